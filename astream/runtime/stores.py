"""One ObjectStore per (event loop, root URL), made on demand.

Stores open their HTTP sessions lazily inside the loop that first uses them and must not be
shared across loops or across ``fork``. The pool is keyed by the running loop (weakly), so a
DataLoader worker -- a forked child with its own astream loop -- or a user's own asyncio loop
(``ds.aiter()``) each get fresh stores, and a dead loop's stores are forgotten with it.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from astream.runtime import bridge
from astream.storage import ObjectStore, RetryPolicy, open_store

__all__ = ["StorePool"]


class StorePool:
    """Picklable factory of per-loop stores with one retry policy and one set of options."""

    def __init__(self, retry: RetryPolicy, options: dict[str, Any] | None = None) -> None:
        self.retry = retry
        self.options = dict(options or {})
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, Any]] = (
            weakref.WeakKeyDictionary()
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"retry": self.retry, "options": self.options}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["retry"], state["options"])  # type: ignore[misc]

    def get(self, url: str) -> ObjectStore:
        """The store for ``url`` on the running loop."""
        loop = asyncio.get_running_loop()
        stores = self._by_loop.get(loop)
        if stores is None:
            stores = {}
            self._by_loop[loop] = stores
            if bridge.in_loop_thread():
                bridge.add_finalizer(self.aclose_loop)
        store = stores.get(url)
        if store is None:
            store = open_store(url, retry=self.retry, **self.options)
            stores[url] = store
        return store  # type: ignore[no-any-return]

    def retries(self) -> int:
        """Transient failures retried by this process's stores, on every loop."""
        return sum(
            int(getattr(store, "retries", 0))
            for stores in list(self._by_loop.values())
            for store in list(stores.values())
        )

    async def aclose_loop(self) -> None:
        """Close the stores of the running loop."""
        stores = self._by_loop.pop(asyncio.get_running_loop(), None) or {}
        for store in stores.values():
            await store.aclose()
