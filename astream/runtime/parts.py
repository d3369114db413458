"""What every part of an :class:`~astream.runtime.engine.Engine` reads: its settings and its
per-process parts.

An engine is built in the process that constructs a dataset and travels to DataLoader workers
by pickling (or fork). Its process-local parts -- the stats, the cache space, the fetcher, the
opener of random access and the per-shard state of range reads -- are made on first use in each
process (checked by pid), so nothing bound to a thread, a loop or a socket ever crosses a
process boundary. :class:`EngineBase` holds them and the settings; the engine's concerns
(iteration, range reads, random access, the first-batch hand-over) are mixins over it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from astream.runtime.cache import CacheSpace
from astream.runtime.catalog import Catalog
from astream.runtime.fetch import ShardFetcher, Streams
from astream.runtime.placement import rank_readers
from astream.runtime.range_costs import SampleMemo, StoreCosts
from astream.runtime.reader import ShardOpener
from astream.runtime.stats import Stats
from astream.runtime.stores import StorePool
from astream.runtime.versions import Board, Versions

if TYPE_CHECKING:
    from astream.runtime.lead import LeadEnds

__all__ = ["EngineBase", "ProcessParts"]


# guards the making of an engine's per-process parts (EngineBase._parts); made anew in a forked
# child, which may inherit it held by a thread that does not exist there
_PARTS_LOCK = threading.Lock()


def _new_parts_lock() -> None:
    global _PARTS_LOCK
    _PARTS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_parts_lock)


@dataclass
class ProcessParts:
    """What an engine owns in one process: built on first use there (checked by pid), never
    pickled, so nothing bound to a thread, a loop or a socket crosses a process boundary."""

    stats: Stats
    space: CacheSpace
    fetcher: ShardFetcher
    random: ShardOpener  # the opener of random access (``get``/``aget``)
    # shard -> its sample offsets, read by range (``aget_range``)
    headers: dict[int, Sequence[int]] = field(default_factory=dict)
    # shard -> seconds spent on ranged reads since its last promotion (``_maybe_promote``)
    range_rent: dict[int, float] = field(default_factory=dict)
    # shard -> (rent, price) in seconds when random access last decided to buy it
    bought: dict[int, tuple[float, float]] = field(default_factory=dict)
    # a remote root -> its request latency and download bandwidth, as measured here
    costs: dict[str, StoreCosts] = field(default_factory=dict)
    # the samples random access read by range, kept (``random_memory`` bytes at most)
    memo: SampleMemo = field(default_factory=SampleMemo)
    # shard -> its whole-shard fetch started by a promotion, while it runs
    promoting: dict[int, asyncio.Task[bool]] = field(default_factory=dict)
    # a cached file's raw path -> its shard (``next_use`` evictions); filled on first use
    file_shard: dict[str, int] = field(default_factory=dict)
    # samples served by ranges at the start of an iteration (``_range_batch``)
    range_samples: int = 0
    # shard -> its header read in flight (``_range_offsets``: concurrent reads share it)
    header_reads: dict[int, asyncio.Future[Sequence[int]]] = field(default_factory=dict)


class EngineBase:
    """The settings (set by ``Engine.__init__``) and the per-process parts of an engine."""

    catalog: Catalog
    stores: StorePool
    cache_limit: int | None
    validate_hash: str | None
    keep_zip: bool
    allow_unsafe_types: bool
    ahead: int
    ahead_fixed: bool  # ``predownload`` given: never plan past it
    concurrency: int | None  # None: Iteration.gets decides per process
    split_min: int  # see Prefetcher.split
    steal_min: int  # see gets.Slots
    cache_policy: str
    range_first_batches: int  # see RangeReads._range_wants
    range_min_bytes: int
    page_share: float
    range_share: float
    random_memory: int  # bytes of range-read samples random access keeps (SampleMemo)
    map_memory: int | None  # bytes of shards an iteration reads through maps (map_limit)
    board: Board
    # the pipes of a loader's workers' first batches, while they start (runtime/lead.py)
    _lead: LeadEnds | None
    # whole shards of earlier workers' first batches, announced first (share_first)
    _first_of_others: list[int]
    _pid: int
    _local: ProcessParts | None

    def prepare(self) -> None:
        """Make this process's parts now (thread-safe), e.g. in a thread before an ``aiter``."""
        self._parts()

    def _parts(self) -> ProcessParts:
        parts = self._local
        if parts is not None and self._pid == os.getpid():
            return parts
        # made once per process, under a lock: a thread that also asks for them (a metrics
        # publisher, the loop thread) must get the same stats, cache space and opener, not a
        # second set that wins the assignment while the iteration counts into the first
        with _PARTS_LOCK:
            return self._make_parts()

    def _make_parts(self) -> ProcessParts:
        parts = self._local
        if parts is None or self._pid != os.getpid():
            stats = Stats()
            if len(self.catalog.sources) > 1:
                stats.stream_samples = [0] * len(self.catalog.sources)
            space = CacheSpace(
                {s.local for s in self.catalog.sources}, self.cache_limit, self.cache_policy
            )
            space.register(self.catalog.files())
            fetcher = ShardFetcher(
                space,
                stats,
                self.stores.get,
                validate_hash=self.validate_hash,
                keep_zip=self.keep_zip,
                board=self.board,
            )
            opener = self._opener(space, stats, fetcher.versions)
            parts = ProcessParts(stats, space, fetcher, opener, memo=SampleMemo(self.random_memory))
            self._local = parts
            self._pid = os.getpid()
        return parts

    def _opener(
        self, space: CacheSpace, stats: Stats, versions: Versions, map_limit: int | None = None
    ) -> ShardOpener:
        return ShardOpener(
            self.catalog,
            space,
            stats,
            allow_unsafe_types=self.allow_unsafe_types,
            validate_hash=self.validate_hash,
            versions=versions,
            map_limit=map_limit,
        )

    def map_limit(self) -> int | None:
        """This process's share of ``map_memory`` for an iteration's opener: the bytes of
        shards it reads through memory maps, the rest by copy (``ShardOpener.map_limit``).
        ``map_memory`` bounds one rank's iteration, so a DataLoader worker gets its
        ``1 / num_workers``: the workers of one loader map at most ``map_memory`` together.
        Random access maps what it opens (its own opener has no limit)."""
        if self.map_memory is None:
            return None
        return self.map_memory // rank_readers()

    @property
    def stats(self) -> Stats:
        stats = self._parts().stats
        stats.retries = self.stores.retries()
        return stats

    @property
    def space(self) -> CacheSpace:
        return self._parts().space

    async def download(self, s: int, block: bool, streams: Streams | None = None) -> bool:
        fetcher = self._parts().fetcher
        return await fetcher.download(self.catalog.shards[s], block=block, streams=streams)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pid"] = -1
        state["_local"] = None
        return state
