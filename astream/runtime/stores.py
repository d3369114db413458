"""One ObjectStore per (event loop, root URL, settings), shared by every dataset of a process.

Stores open their HTTP sessions lazily inside the loop that first uses them and must not be
shared across loops or across ``fork``. Stores are therefore kept per running loop (weakly, so
a dead loop's stores go with it): a DataLoader worker -- a forked child with its own astream
loop -- or a user's own asyncio loop (``ds.aiter()``) each get fresh ones.

Within one loop, every dataset that reaches the same root with the same retry policy and
options shares one store: an SDK client costs megabytes and a connection pool, and a job that
builds datasets repeatedly (one per epoch, per evaluation) must not grow by one client each
time. Stores of the astream loop are closed when it shuts down.

Each stream may have its own retry policy (its ``download_retry``/``download_timeout``): the
pool maps a stream's remote root to its policy, and every other URL gets the default one.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

from astream import bridge
from astream.storage import ObjectStore, RetryPolicy, open_store

__all__ = ["StorePool"]

_Key = tuple[str, RetryPolicy, str]
_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_Key, ObjectStore]] = (
    weakref.WeakKeyDictionary()
)
# a forked child's copy of its parent's stores: never used (their sessions are the parent's)
# and never counted (their retries are the parent's, which reports them itself), only kept
# alive as they were, so that nothing closes the parent's connections from the child
_inherited: list[dict[Any, Any]] = []


def _after_fork_in_child() -> None:
    _inherited.append(dict(_by_loop))
    _by_loop.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class StorePool:
    """Picklable factory of per-loop stores: one set of options, a retry policy per remote
    root in ``policies`` and ``retry`` for any other URL."""

    def __init__(
        self,
        retry: RetryPolicy,
        options: dict[str, Any] | None = None,
        *,
        policies: dict[str, RetryPolicy] | None = None,
    ) -> None:
        self.retry = retry
        self.options = dict(options or {})
        self.policies = dict(policies or {})
        self._opts_key = repr(sorted(self.options.items()))

    def policy_for(self, url: str) -> RetryPolicy:
        """The retry policy of the stream whose remote root is ``url`` (else the default)."""
        return self.policies.get(url, self.retry)

    def get(self, url: str) -> ObjectStore:
        """The store for ``url`` on the running loop."""
        loop = asyncio.get_running_loop()
        stores = _by_loop.get(loop)
        if stores is None:
            stores = {}
            _by_loop[loop] = stores
            if bridge.in_loop_thread():
                bridge.add_finalizer(_close_loop_stores)
        policy = self.policy_for(url)
        key = (url, policy, self._opts_key)
        store = stores.get(key)
        if store is None:
            store = open_store(url, retry=policy, **self.options)
            stores[key] = store
        return store

    def _mine(self) -> list[ObjectStore]:
        """The stores of this pool's remote roots with its settings, on every loop of this
        process (a store of another root with the same settings is another dataset's)."""
        mine = {(url, p) for url, p in self.policies.items()}
        return [
            store
            for stores in list(_by_loop.values())
            for key, store in list(stores.items())
            if key[2] == self._opts_key and (key[0], key[1]) in mine
        ]

    def retries(self) -> int:
        """Transient failures retried by the stores of this pool's remotes, on every loop of
        this process (a forked worker counts its own, not its parent's).

        Stores are shared between datasets with the same remote and settings, so so are their
        counts.
        """
        return sum(int(getattr(store, "retries", 0)) for store in self._mine())

    def retry_causes(self) -> dict[str, int]:
        """:meth:`retries` by cause (see ``astream.storage.retry.retry_cause``)."""
        out: dict[str, int] = {}
        for store in self._mine():
            for cause, n in dict(getattr(store, "causes", {})).items():
                out[cause] = out.get(cause, 0) + n
        return out

    async def aclose_loop(self) -> None:
        """Close the stores of the running loop (every dataset's: they are shared)."""
        await _close_loop_stores()


def loop_store_keys() -> frozenset[_Key]:
    """The keys of the stores open on the running loop (see :func:`close_loop_stores_since`)."""
    return frozenset(_by_loop.get(asyncio.get_running_loop(), ()))


async def close_loop_stores_since(before: frozenset[_Key]) -> None:
    """Close the running loop's stores opened after ``before`` was taken: what a failed or
    cancelled ``AsyncStreamingDataset.open`` opened, which no dataset returned can close."""
    stores = _by_loop.get(asyncio.get_running_loop(), {})
    for key in [k for k in stores if k not in before]:
        await stores.pop(key).aclose()


async def _close_loop_stores() -> None:
    stores = _by_loop.pop(asyncio.get_running_loop(), None) or {}
    for store in stores.values():
        await store.aclose()
