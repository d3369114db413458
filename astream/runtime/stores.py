"""One ObjectStore per (event loop, root URL, settings), shared by every dataset of a process.

Stores open their HTTP sessions lazily inside the loop that first uses them and must not be
shared across loops or across ``fork``. Stores are therefore kept per running loop (weakly, so
a dead loop's stores go with it): a DataLoader worker -- a forked child with its own astream
loop -- or a user's own asyncio loop (``ds.aiter()``) each get fresh ones.

Within one loop, every dataset that reaches the same root with the same retry policy and
options shares one store: an SDK client costs megabytes and a connection pool, and a job that
builds datasets repeatedly (one per epoch, per evaluation) must not grow by one client each
time. Stores of the astream loop are closed when it shuts down.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from astream.runtime import bridge
from astream.storage import ObjectStore, RetryPolicy, open_store

__all__ = ["StorePool"]

_Key = tuple[str, RetryPolicy, str]
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Key, ObjectStore]] = (
    weakref.WeakKeyDictionary()
)


class StorePool:
    """Picklable factory of per-loop stores with one retry policy and one set of options."""

    def __init__(self, retry: RetryPolicy, options: dict[str, Any] | None = None) -> None:
        self.retry = retry
        self.options = dict(options or {})
        self._opts_key = repr(sorted(self.options.items()))

    def get(self, url: str) -> ObjectStore:
        """The store for ``url`` on the running loop."""
        loop = asyncio.get_running_loop()
        stores = _by_loop.get(loop)
        if stores is None:
            stores = {}
            _by_loop[loop] = stores
            if bridge.in_loop_thread():
                bridge.add_finalizer(_close_loop_stores)
        key = (url, self.retry, self._opts_key)
        store = stores.get(key)
        if store is None:
            store = open_store(url, retry=self.retry, **self.options)
            stores[key] = store
        return store

    def retries(self) -> int:
        """Transient failures retried by the stores this pool's settings reach, every loop.

        Stores are shared between datasets with the same remote and settings, so so are their
        counts.
        """
        return sum(
            int(getattr(store, "retries", 0))
            for stores in list(_by_loop.values())
            for key, store in list(stores.items())
            if key[1] == self.retry and key[2] == self._opts_key
        )

    async def aclose_loop(self) -> None:
        """Close the stores of the running loop (every dataset's: they are shared)."""
        await _close_loop_stores()


async def _close_loop_stores() -> None:
    stores = _by_loop.pop(asyncio.get_running_loop(), None) or {}
    for store in stores.values():
        await store.aclose()
