"""The per-process read engine: planned ids in, decoded samples out; and random access.

Theory of operation
-------------------
An :class:`Engine` is built in the process that constructs a dataset and travels to DataLoader
workers by pickling (or fork). Its process-local parts -- the fetcher, the shard openers, the
stores -- are made on first use in each process (checked by pid), so nothing bound to a thread,
a loop or a socket ever crosses a process boundary (``runtime/parts.py``).

The engine is its concerns put together, each a mixin over those parts:

- iteration, synchronous and on the caller's loop, with its setup and teardown written once
  (``runtime/iterate.py``), and the next-use tracker of its evictions (``runtime/tracker.py``);
- the range-read policy and its I/O: the first batches of a cold iteration read by ranges
  while whole shards download (``runtime/ranges.py``);
- random access, by ranges kept in a bounded memory tier, with rent-or-buy promotion (in
  time) to a whole-shard download (``runtime/random_access.py``);
- the first batches of a loader's workers: read by the main process and handed over, and the
  whole shards of earlier workers' first batches announced first (``runtime/lead.py``).

What stays here: the settings, the versions board shared on the node, and explicit cache
control (the reference's ``evict_shard`` / ``evict_coldest_shard``).
"""

from __future__ import annotations

import os
import weakref

from astream.core.eviction import check_policy
from astream.runtime.catalog import Catalog
from astream.runtime.iterate import Iteration
from astream.runtime.random_access import RandomAccess
from astream.runtime.range_costs import DEFAULT_MEMORY
from astream.runtime.stores import StorePool
from astream.runtime.versions import Board

__all__ = ["Engine"]


class Engine(Iteration, RandomAccess):
    def __init__(
        self,
        catalog: Catalog,
        stores: StorePool,
        *,
        cache_limit: int | None,
        validate_hash: str | None,
        keep_zip: bool,
        allow_unsafe_types: bool,
        ahead: int,
        concurrency: int | None = None,
        cache_policy: str = "next_use",
        range_first_batches: int = 1,
        ahead_fixed: bool = False,
        random_memory: int = DEFAULT_MEMORY,
        map_memory: int | None = None,
    ) -> None:
        self.catalog = catalog
        self.stores = stores
        self.cache_limit = cache_limit
        self.validate_hash = validate_hash
        self.keep_zip = keep_zip
        self.allow_unsafe_types = allow_unsafe_types
        self.ahead = ahead
        self.ahead_fixed = ahead_fixed  # ``predownload`` given: never plan past it
        # shards a prefetcher downloads, and GETs it runs, at once (None: ``Iteration.gets``)
        self.concurrency = concurrency
        # a prefetched object is split into GETs of at least this many bytes (Prefetcher.split)
        self.split_min = 8 << 20
        # a running GET's half handed to a slot that would idle is at least this many bytes
        self.steal_min = 2 << 20
        self.cache_policy = check_policy(cache_policy)
        self.range_first_batches = range_first_batches  # see _range_wants
        # shards smaller than this are never read by range: one GET brings them whole about as
        # fast as a header GET and a data GET (tests lower it to read small shards by range)
        self.range_min_bytes = 1 << 20
        # a Parquet row group's rows are read by pages only when those pages are at most this
        # share of its fetched bytes (else they would cost about the group, then the group)
        self.page_share = 0.25
        # a batch reads MDS samples by ranges only when those ranges are estimated at most
        # this share of the shards' bytes (see _ranges_pay)
        self.range_share = 0.25
        self.random_memory = random_memory  # see range_costs.SampleMemo
        self.map_memory = map_memory  # see EngineBase.map_limit
        self._follow = None  # the next iteration's place in the node
        # the pipes of a loader's workers' first batches, while they start (runtime/lead.py)
        self._lead = None
        # whole shards of earlier workers' first batches, announced first (share_first)
        self._first_of_others = []
        self._pid = -1
        self._local = None
        # the versions this dataset's processes fix, shared on the node (runtime/versions.py);
        # its directory goes with the dataset: deleted by the process that built it
        self.board = Board.new(min(s.local for s in catalog.sources))
        weakref.finalize(self, _remove_board, self.board, os.getpid())

    async def aclose(self) -> None:
        """Close the connections opened on the running loop (by ``aiter``/``aget``)."""
        await self.stores.aclose_loop()

    def sweep_versions(self) -> None:
        """In this process, compare the cache files of the shards it read by ranges that
        another process has downloaded since (``Versions.sweep``); nothing before this
        process has its parts."""
        parts = self._local
        if parts is not None and self._pid == os.getpid():
            parts.fetcher.versions.sweep()

    # -- explicit cache control (the reference's evict_shard / evict_coldest_shard) -------------
    def evict(self, s: int) -> int:
        """Delete shard ``s``'s cached files under the cache lock; returns bytes freed."""
        from astream.errors import CacheError
        from astream.runtime.cache import unlink_shard
        from astream.runtime.locks import FileLock

        sf = self.catalog.shards[s].files
        if not sf.evictable:
            raise CacheError(
                f"shard {s} ({sf.raw_path}) is local-only data with no remote copy: never evicted"
            )
        space = self.space
        freed = [0]

        def drop() -> None:
            lk = FileLock(sf.pin_lock)
            if not lk.try_exclusive():
                raise CacheError(f"shard {s} ({sf.raw_path}) is being read right now")
            try:
                freed[0] += unlink_shard(sf)
            finally:
                lk.release()

        space._locked(drop)
        return freed[0]

    def evict_coldest(self) -> int:
        """Delete the least recently used evictable shard; returns bytes freed."""
        from astream.errors import CacheError

        space = self.space
        freed = [0]

        def drop() -> None:
            freed[0] = space._evict(space._scan(), 1)[0]

        space._locked(drop)
        if not freed[0]:
            raise CacheError(
                "no shard can be evicted: none is cached, or all are local-only or being read"
            )
        return freed[0]


def _remove_board(board: Board, pid: int) -> None:
    """An engine's board, once the engine is gone, in the process that built it only (a
    forked worker inherits the finalizer, never the board's ownership)."""
    if os.getpid() == pid:
        board.remove()
