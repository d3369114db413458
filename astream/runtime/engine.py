"""The per-process read engine: planned ids in, decoded samples out; and random access.

Theory of operation
-------------------
An :class:`Engine` is built in the process that constructs a dataset and travels to DataLoader
workers by pickling (or fork). Its process-local parts -- the fetcher, the shard openers, the
stores -- are made on first use in each process (checked by pid), so nothing bound to a thread,
a loop or a socket ever crosses a process boundary.

Synchronous consumers (``__iter__`` in a worker or the main process) run downloads on the
astream loop thread through the bridge. ``aiter`` runs everything on the caller's own loop:
no thread is added, the decode is the same code, and so is the order.

Random access (``get``): a shard already in the cache is read from the map; an uncompressed
shard that is not is read with two ranged GETs -- its header (then remembered) and exactly the
sample's bytes -- so one sample never costs a shard download. Promotion to a whole-shard fetch
is rent-or-buy, by bytes: the bytes spent on ranges in one shard (headers and samples) are
counted, and once they reach the shard's size the shard is fetched whole in the background;
reads of that shard then wait for that fetch and are local. Whatever the access pattern, the
bytes moved for a shard are then at most twice those of the better of the two pure strategies
(ranges only, or the shard at the first read), and sparse random access -- a few samples of
each big shard -- never downloads a shard. A compressed shard is fetched whole through the
cache, since its samples cannot be addressed inside the compressed bytes. So is every shard of
a stream read with ``validate_hash``: its hash covers the whole file, so random access returns
a sample only from a shard whose whole bytes matched the index (``_sample_rangeable``).

The start of a cold iteration reads its first batches by ranges while whole shards download:
an uncompressed MDS shard's wanted samples (only when the batch's ranges are estimated at most
``range_share`` of its shards' bytes: a dense batch waits for the downloads), or a Parquet row
group's pages holding the wanted rows when its file has a page index
(``parquet/io_pages.py``; only when every row group of the batch needs at most
``page_share`` of its bytes that way).

The first batches of a loader's workers, cold: the loader hands out worker 0's first batch,
then worker 1's, and so on, and until then each worker would download only its own. Shards
read by ranges are read by the main process in that order (``runtime/lead.py``); shards that
must be whole before a sample of them is read (Parquet row groups, compressed shards) are
announced by worker ``w`` first for workers ``0..w-1``'s first batches, then for its own
(:meth:`Engine.share_first`), so the node's download slots go to the batch handed out first.
A prefetch never queues behind another process's download of a shard (``fetch.py``), so the
workers split those shards between them. Only with no ``cache_limit`` and no explicit
``predownload`` (the downloads are then bounded by nothing but the plan anyway: every shard is
fetched once per node), and not when a worker resumes from its own saved state (a loader that
resumes at a sample starts its workers' iterations there, and they share from there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from astream import bridge
from astream.core.batchdecode import ColumnBatch
from astream.core.eviction import ConsumerClock, check_policy
from astream.core.shard import header_size, parse_offsets
from astream.errors import FormatError
from astream.runtime import lead
from astream.runtime.batch import BatchLayouts, locate_batch
from astream.runtime.batch_groups import BatchGroups, Groups, batch_groups
from astream.runtime.cache import CacheSpace
from astream.runtime.catalog import Catalog
from astream.runtime.clocks import NodeClocks
from astream.runtime.fetch import RemoteShard, ShardFetcher, is_complete
from astream.runtime.lead import LeadEnds
from astream.runtime.placement import dataloader_worker
from astream.runtime.prefetch import FURTHER, Lookahead, Prefetcher
from astream.runtime.reader import ShardOpener, decode_batch
from astream.runtime.shard_handles import OpenShard, RangeShard
from astream.runtime.stats import Stats, Stopwatch
from astream.runtime.stores import StorePool
from astream.runtime.versions import Board, Versions

__all__ = ["Engine"]

Batches = Iterator[np.ndarray[Any, np.dtype[np.int64]]]


# guards the making of an Engine's per-process parts (Engine._parts); made anew in a forked
# child, which may inherit it held by a thread that does not exist there
_PARTS_LOCK = threading.Lock()


def _new_parts_lock() -> None:
    global _PARTS_LOCK
    _PARTS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_new_parts_lock)


@dataclass
class _ProcessParts:
    """What an :class:`Engine` owns in one process: built on first use there (checked by pid),
    never pickled, so nothing bound to a thread, a loop or a socket crosses a process boundary."""

    stats: Stats
    space: CacheSpace
    fetcher: ShardFetcher
    random: ShardOpener  # the opener of random access (``get``/``aget``)
    # shard -> its sample offsets, read by range (``aget_range``)
    headers: dict[int, Sequence[int]] = field(default_factory=dict)
    # shard -> bytes spent on ranges since its last promotion (``_maybe_promote``)
    range_bytes: dict[int, int] = field(default_factory=dict)
    # shard -> its whole-shard fetch started by a promotion, while it runs
    promoting: dict[int, asyncio.Task[bool]] = field(default_factory=dict)
    # a cached file's raw path -> its shard (``next_use`` evictions); filled on first use
    file_shard: dict[str, int] = field(default_factory=dict)
    # samples served by ranges at the start of an iteration (``Engine._range_batch``)
    range_samples: int = 0
    # shard -> its header read in flight (``Engine._range_offsets``: concurrent reads share it)
    header_reads: dict[int, asyncio.Future[Sequence[int]]] = field(default_factory=dict)


class _Follow(NamedTuple):
    """Where the next iteration is in its node's time (set by :meth:`Engine.follow`)."""

    clock: ConsumerClock
    shape: tuple[int, int, int, int]  # (nodes, ranks per node, workers per rank, this node)
    epoch: int
    worker: int


class _SyncReader(NamedTuple):
    """The parts of one synchronous iteration (:meth:`Engine._sync_reader`)."""

    lookahead: Lookahead
    prefetcher: Prefetcher
    opener: ShardOpener  # this iteration's own (its pins are released per batch)
    open_shard: Callable[[int], OpenShard]  # shard -> open handle, fetching when needed
    tracker: _Tracker | None


class Engine:
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
        concurrency: int = 4,
        cache_policy: str = "next_use",
        range_first_batches: int = 1,
        ahead_fixed: bool = False,
    ) -> None:
        self.catalog = catalog
        self.stores = stores
        self.cache_limit = cache_limit
        self.validate_hash = validate_hash
        self.keep_zip = keep_zip
        self.allow_unsafe_types = allow_unsafe_types
        self.ahead = ahead
        self.ahead_fixed = ahead_fixed  # ``predownload`` given: never plan past it
        self.concurrency = concurrency
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
        self._follow: _Follow | None = None  # the next iteration's place in the node
        # the pipes of a loader's workers' first batches, while they start (runtime/lead.py)
        self._lead: LeadEnds | None = None
        # whole shards of earlier workers' first batches, announced first (share_first)
        self._first_of_others: list[int] = []
        self._pid = -1
        self._local: _ProcessParts | None = None
        # the versions this dataset's processes fix, shared on the node (runtime/versions.py);
        # its directory goes with the dataset: deleted by the process that built it
        self.board = Board.new(min(s.local for s in catalog.sources))
        weakref.finalize(self, _remove_board, self.board, os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pid"] = -1
        state["_local"] = None
        return state

    # -- process-local parts -----------------------------------------------------------------
    def _parts(self) -> _ProcessParts:
        parts = self._local
        if parts is not None and self._pid == os.getpid():
            return parts
        # made once per process, under a lock: a thread that also asks for them (a metrics
        # publisher, the loop thread) must get the same stats, cache space and opener, not a
        # second set that wins the assignment while the iteration counts into the first
        with _PARTS_LOCK:
            return self._make_parts()

    def _make_parts(self) -> _ProcessParts:
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
            parts = _ProcessParts(stats, space, fetcher, opener)
            self._local = parts
            self._pid = os.getpid()
        return parts

    def _opener(self, space: CacheSpace, stats: Stats, versions: Versions) -> ShardOpener:
        return ShardOpener(
            self.catalog,
            space,
            stats,
            allow_unsafe_types=self.allow_unsafe_types,
            validate_hash=self.validate_hash,
            versions=versions,
        )

    @property
    def stats(self) -> Stats:
        stats = self._parts().stats
        stats.retries = self.stores.retries()
        return stats

    @property
    def space(self) -> CacheSpace:
        return self._parts().space

    async def download(self, s: int, block: bool) -> bool:
        fetcher = self._parts().fetcher
        return await fetcher.download(self.catalog.shards[s], block=block)

    # -- iteration -----------------------------------------------------------------------------
    def follow(
        self, plan: Any, world: Any, rank: int, worker: int, epoch: int, start: int, skip: int
    ) -> None:
        """The next iteration reads ``worker``'s batches of ``rank`` in ``plan`` (of ``epoch``)
        from ``start`` (``skip`` samples already yielded): under a cache limit with
        ``cache_policy="next_use"`` its evictions then follow the node's future
        (:class:`~astream.core.eviction.NodeFuture`, ranks' progress from ``clocks.py``)."""
        if self.cache_limit is None or self.cache_policy != "next_use":
            self._follow = None
            return
        clock = ConsumerClock.for_consumer(plan, world, rank, worker, start, skip)
        shape = (world.num_nodes, world.ranks_per_node, world.workers_per_rank, world.node_of(rank))
        self._follow = _Follow(clock, shape, epoch, worker)

    def share_first(
        self, plan: Any, world: Any, rank: int, worker: int, start: int, skip: int
    ) -> None:
        """The next iteration of DataLoader worker ``worker`` (> 0) announces the whole shards
        of workers ``0..worker-1``'s first batches before its own (see the module's docstring):
        those not complete in the cache and not read by ranges, in the order the loader hands
        the batches out. Nothing for worker 0, a worker resuming its own saved state (``skip``), a
        ``cache_limit`` or an explicit ``predownload``."""
        self._first_of_others = []
        if worker <= 0 or skip or self.cache_limit is not None or self.ahead_fixed:
            return
        seen: set[int] = set()
        for w in range(worker):
            first = next(iter(plan.worker_batches(world, rank, w, start)), None)
            if first is None:
                continue
            for s, _positions, _locals in batch_groups(first, self.catalog):
                if s in seen:
                    continue
                seen.add(s)
                shard = self.catalog.shards[s]
                if shard.remote is None or is_complete(shard.files.raw_path, shard.files.raw_size):
                    continue
                if not self._rangeable(s):
                    self._first_of_others.append(s)

    def _want_first_of_others(self, pf: Prefetcher) -> None:
        shards, self._first_of_others = self._first_of_others, []
        for s in shards:
            pf.want(s)

    def _track(self, space: CacheSpace, la: Lookahead) -> _Tracker | None:
        follow, self._follow = self._follow, None
        if follow is None:
            return None
        clock, shape, epoch, worker = follow
        try:
            clocks: NodeClocks | None = NodeClocks(
                space.roots[0], shape, epoch, clock.local, worker
            )
        except OSError:  # no shared clock (read-only .astream?): assume ranks in lockstep
            clocks = None
        tracker = _Tracker(clock, la, self._file_shard(), space, clocks)
        space.future = tracker.next_use
        return tracker

    def _further(self) -> int:
        """How far past ``ahead`` a consumer that waits for a download may plan (a multiple of
        it, see ``Lookahead.further``): only with no ``cache_limit`` (a prefetch then never
        competes with the pinned working set for room) and no explicit ``predownload``."""
        if self.cache_limit is not None or self.ahead_fixed:
            return 1
        return FURTHER

    def _file_shard(self) -> dict[str, int]:
        index = self._parts().file_shard
        if not index:
            for s, shard in enumerate(self.catalog.shards):
                index[shard.files.raw_path] = s
                if shard.meta is not None:
                    index[shard.meta.files.raw_path] = s
        return index

    def _sync_reader(self, batches: Batches) -> _SyncReader:
        """The lookahead, prefetcher, opener, ``open_shard`` and next-use tracker of one
        synchronous iteration."""
        parts = self._parts()
        stats = parts.stats
        opener = self._opener(parts.space, stats, parts.fetcher.versions)
        pf = Prefetcher(self.catalog, self.download, concurrency=self.concurrency)
        if self._may_range():
            pf.hold()  # until the first batch's ranges are read (``_ranged``)
        self._want_first_of_others(pf)  # before the lookahead announces this worker's own
        la = Lookahead(
            batches, self.catalog, pf, self.ahead, idle=opener.idle, further=self._further()
        )
        tracker = self._track(parts.space, la)
        stats.live = (weakref.ref(pf), weakref.ref(la))  # for astream.metrics

        def fetch(s: int) -> None:
            # downloads held for the first batch's ranges (or a lead hand-over) start before
            # anything waits on one, whichever batch path the consumer is on
            pf.release()
            fut: Any = pf.take(s)
            with Stopwatch(stats):
                # while this download runs, every other one that ends frees a slot: fill it
                # with the plan's next shards (Lookahead.further), then wait again
                while fut is not None and not fut.done():
                    la.further()
                    others: list[Any] = pf.running()  # bridge futures on this path
                    concurrent.futures.wait(
                        [fut, *others], return_when=concurrent.futures.FIRST_COMPLETED
                    )
                ok = fut.result() if fut is not None else False
                if not ok:
                    la.further()
                    bridge.run(self.download(s, True))

        def open_shard(s: int) -> OpenShard:
            h = opener.cached(s)
            if h is None:
                if tracker is not None:
                    tracker.reading(s)
                h = opener.open(s, fetch)
                la.forget(s)
            return h

        return _SyncReader(la, pf, opener, open_shard, tracker)

    def iter_samples(
        self, batches: Batches, cursor: list[Any] | None = None, lists: bool = False
    ) -> Iterator[Any]:
        """Decoded samples of ``batches`` in order (synchronous consumer).

        ``cursor`` (``[samples of finished batches, iterator of the current batch, its size]``)
        lets the caller count the samples consumed at no per-sample cost: the current batch's
        list iterator knows how many of its items are left. With ``lists`` (and a ``cursor``)
        each batch's list iterator is yielded instead of its samples: the caller takes the
        samples from it (the consumed count stays exact) with no generator step per sample."""
        stats = self._parts().stats
        la, pf, opener, open_shard, tracker = self._sync_reader(batches)
        multi = bool(stats.stream_samples)
        done: Groups | None = None  # the batch handed out before this one
        try:
            for groups, size in la:
                if done is not None:
                    opener.drop_read(done)
                done = groups
                if tracker is not None:
                    tracker.batch()
                ranged = self._ranged(groups, la, opener, pf)
                if ranged is None:
                    batch = decode_batch(groups, size, open_shard)
                else:
                    batch = decode_batch(groups, size, _first(ranged, open_shard))
                stats.samples += len(batch)
                if multi:
                    stats.count_streams(groups, self.catalog.shard_stream)
                if opener.pinning:
                    # Never hold a pin while suspended: the DataLoader may park this worker
                    # for long, and another process may be waiting for exactly that shard.
                    opener.release_all()
                if cursor is None:
                    yield from batch
                else:
                    cursor[0] += cursor[2]
                    cursor[1] = it = iter(batch)
                    cursor[2] = len(batch)
                    if lists:
                        yield it
                    else:
                        yield from it
        finally:
            pf.cancel()
            opener.release_all()
            if tracker is not None:
                tracker.stop()

    def iter_columns(
        self,
        batches: Batches,
        finish: Callable[[ColumnBatch], Any],
        ragged: str,
        cursor: list[Any] | None = None,
    ) -> Iterator[Any]:
        """Each planned batch of ``batches`` as columns (see :mod:`astream.runtime.batch`):
        located in its shards, then ``finish(column_batch)`` (which allocates and fills it) is
        yielded. ``cursor[0]`` counts the samples of the batches handed out."""
        stats = self._parts().stats
        la, pf, opener, open_shard, tracker = self._sync_reader(batches)
        multi = bool(stats.stream_samples)
        layouts = BatchLayouts(self.catalog)
        # past the batches _ranged may read by ranges (and the first, which may take a lead
        # hand-over) it has nothing to do but release the prefetcher, which a whole first
        # batch handed over by the main process leaves held until the next batch
        ranging = max(1, self.range_first_batches)
        try:
            for groups, size in la:
                if tracker is not None:
                    tracker.batch()
                if la.batches_taken > ranging:
                    ranged = None
                    pf.release()  # held at a lead hand-over of the first batch (_ranged)
                else:
                    ranged = self._ranged(groups, la, opener, pf)
                if ranged is None:
                    out = finish(locate_batch(groups, size, open_shard, layouts, ragged))
                else:  # its own row tables: a range shard holds a few samples of its shard
                    located = locate_batch(
                        _compact(groups, ranged),
                        size,
                        _first(ranged, open_shard),
                        BatchLayouts(self.catalog),
                        ragged,
                    )
                    try:
                        out = finish(located)
                    finally:
                        for r in ranged.values():
                            r.close()
                stats.samples += size
                if multi:
                    stats.count_streams(groups, self.catalog.shard_stream)
                if opener.pinning:
                    opener.release_all()
                if cursor is not None:
                    cursor[0] += size
                yield out
        finally:
            pf.cancel()
            opener.release_all()
            if tracker is not None:
                tracker.stop()

    async def aiter_batches(
        self, batches: Batches, *, io: str = "thread", slice_s: float = 0.002
    ) -> AsyncGenerator[list[Any], None]:
        """Decoded planned batches, in order, for a consumer on the caller's event loop.

        The loop is given back (``await asyncio.sleep(0)``) after every batch and, while a
        batch decodes, whenever ``slice_s`` has passed since it was last given back, so other
        coroutines of the program wait at most about one slice for astream on hot data.

        ``io="thread"``: downloads run on astream's I/O loop thread (as for the synchronous
        path) and are awaited here, so they go on while the consumer blocks its loop (a
        synchronous training step). ``io="loop"``: they run on the caller's loop too, with no
        thread at all; they then progress only while the consumer awaits.
        """
        if io not in ("thread", "loop"):
            from astream.errors import ConfigError

            raise ConfigError(f"io must be 'thread' or 'loop', got {io!r}")
        parts = self._parts()
        stats = parts.stats
        opener = self._opener(parts.space, stats, parts.fetcher.versions)
        on_loop = io == "loop"
        loop = asyncio.get_running_loop() if on_loop else None
        pf = Prefetcher(self.catalog, self.download, concurrency=self.concurrency, loop=loop)
        if self._may_range():
            pf.hold()  # until the first batch's ranges are read (below)
        self._want_first_of_others(pf)  # before the lookahead announces this worker's own
        la = Lookahead(
            batches, self.catalog, pf, self.ahead, idle=opener.idle, further=self._further()
        )
        tracker = self._track(parts.space, la)
        stats.live, multi = (weakref.ref(pf), weakref.ref(la)), bool(stats.stream_samples)

        async def demand(s: int) -> bool:
            if on_loop:
                return await self.download(s, True)
            return await asyncio.wrap_future(bridge.submit(self.download(s, True)))

        async def open_shard(s: int) -> OpenShard:
            h = opener.cached(s) or opener.try_open(s)
            if h is not None:
                stats.cache_hits += 1
                return h
            stats.cache_misses += 1
            if tracker is not None:
                tracker.reading(s)
            with Stopwatch(stats):
                for _ in range(8):
                    hold = opener.hold_pin(s)  # see ShardOpener.hold_pin
                    try:
                        fut: Any = pf.take(s)
                        if fut is None:
                            ok = False
                        elif on_loop:
                            ok = await fut
                        else:
                            ok = await asyncio.wrap_future(fut)
                        if not ok:
                            await demand(s)
                        h = opener.try_open(s)
                    finally:
                        opener.drop_pin(hold)
                    if h is not None:
                        la.forget(s)
                        return h
            raise FormatError(
                "shard keeps disappearing from the cache", opener.catalog.shards[s].files.raw_path
            )

        clock = time.perf_counter
        done: Groups | None = None  # the batch handed out before this one
        try:
            while True:
                mark = clock()
                step = next(la, None)  # the plan walk for the lookahead runs here
                if step is None:
                    break
                if done is not None:
                    opener.drop_read(done)
                groups, size = step
                done = groups
                if tracker is not None:
                    tracker.batch()
                ranged: dict[int, RangeShard] = {}
                wants = self._range_wants(groups, la, opener)
                try:
                    if wants:
                        with Stopwatch(stats):
                            if on_loop:
                                ranged = await self._range_batch(wants)
                            else:
                                ranged = await asyncio.wrap_future(
                                    bridge.submit(self._range_batch(wants))
                                )
                finally:
                    pf.release()
                out: list[Any] = [None] * size
                for s, positions, locals_ in groups:
                    if clock() - mark > slice_s:
                        await asyncio.sleep(0)
                        mark = clock()
                    got = ranged.get(s)
                    h: Any = got if got is not None else await open_shard(s)
                    sample = h.sample
                    for c in range(0, len(positions), 128):
                        for j, li in zip(positions[c : c + 128], locals_[c : c + 128]):
                            out[j] = sample(li)
                        if clock() - mark > slice_s:
                            await asyncio.sleep(0)
                            mark = clock()
                    if got is None and getattr(h, "_drop", False):  # see ShardOpener.big
                        h.drop_pages()
                if opener.pinning:
                    opener.release_all()
                stats.samples += size
                if multi:
                    stats.count_streams(groups, self.catalog.shard_stream)
                yield out
                await asyncio.sleep(0)  # at least once per batch
        finally:
            pf.cancel()
            opener.release_all()
            if tracker is not None:
                tracker.stop()

    async def aiter_samples(
        self, batches: Batches, *, io: str = "thread", slice_s: float = 0.002
    ) -> AsyncIterator[dict[str, Any]]:
        """The samples of :meth:`aiter_batches`, one by one; the loop is given back as there,
        and also between samples once ``slice_s`` has passed (checked every 32 samples)."""
        clock = time.perf_counter
        async for batch in self.aiter_batches(batches, io=io, slice_s=slice_s):
            mark = clock()
            for k, x in enumerate(batch, 1):
                yield x
                if not k & 31 and clock() - mark > slice_s:
                    await asyncio.sleep(0)
                    mark = clock()

    async def aclose(self) -> None:
        """Close the connections opened on the running loop (by ``aiter``/``aget``)."""
        await self.stores.aclose_loop()

    # -- random access -------------------------------------------------------------------------
    def get(self, i: int) -> dict[str, Any]:
        """Sample ``i`` (a global index) without downloading its shard when avoidable."""
        opener = self._parts().random
        s, li = self.catalog.locate_one(i)
        h = opener.try_open(s)
        if h is not None:
            self.stats.samples += 1
            return h.sample(li)
        if self._sample_rangeable(s):
            return bridge.run(self.aget_range(s, li))
        if self.catalog.entries[s].format == "parquet" and self._rangeable(s):
            got = bridge.run(self.aget_pages(s, li))
            if got is not None:
                return got
        h = opener.open(s, lambda s: bridge.run(self.download(s, True)))
        self.stats.samples += 1
        return h.sample(li)

    async def aget(self, i: int) -> dict[str, Any]:
        opener = self._parts().random
        s, li = self.catalog.locate_one(i)
        h = opener.try_open(s)
        if h is None:
            if self._sample_rangeable(s):
                return await self.aget_range(s, li)
            if self.catalog.entries[s].format == "parquet" and self._rangeable(s):
                got = await self.aget_pages(s, li)
                if got is not None:
                    return got
            await self.download(s, True)
            h = opener.try_open(s)
            if h is None:
                return await self.aget(i)
        self.stats.samples += 1
        return h.sample(li)

    def _sample_rangeable(self, s: int) -> bool:
        """Whether random access reads a sample of shard ``s`` by ranged GETs (its header, then
        the sample): an uncompressed MDS or split shard with a remote, read without hash
        validation. A hash covers the whole file, so under ``validate_hash`` (the stream's or
        the dataset's) the shard is downloaded whole, hashed, and the sample read from the
        cache (a mismatch: deleted, fetched once more, then :class:`IntegrityError`)."""
        shard = self.catalog.shards[s]
        return (
            shard.compression is None
            and shard.remote is not None
            and shard.ranges is None
            and (shard.validate_hash or self.validate_hash) is None
        )

    async def aget_range(self, s: int, li: int) -> dict[str, Any]:
        parts = self._parts()
        stats = parts.stats
        opener = parts.random
        local = await self._promoted(parts, s, li)
        if local is not None:
            return local
        shard = self.catalog.shards[s]
        assert shard.remote is not None
        store = self.stores.get(shard.remote)
        offsets, spent = await self._range_offsets(parts, s)
        a, b = offsets[li], offsets[li + 1]
        versions = parts.fetcher.versions
        data = await versions.read(store, shard.remote, shard.raw_key, a, b, shard.etag)
        stats.range_requests += 1
        stats.add_bytes(shard.remote, len(data))
        self._maybe_promote(parts, s, spent + len(data))
        stats.samples += 1
        return opener.decoder(s).decode(memoryview(data))

    async def aget_pages(self, s: int, li: int) -> dict[str, Any] | None:
        """Row ``li`` of Parquet row group ``s`` read by its pages (the file's offset indexes
        kept per process); None when it is not to be read so (the caller reads the group
        whole). The bytes are counted toward the group's promotion, as for MDS ranges."""
        parts = self._parts()
        local = await self._promoted(parts, s, li)
        if local is not None:
            return local
        from astream.parquet.io_pages import index_span

        got = await self._range_read([(s, [li])], asyncio.Semaphore(_RANGE_GETS))
        r = self._range_shards(parts, got).get(s)
        if r is None:
            return None
        span = index_span(self.catalog.entries[s])  # type: ignore[arg-type]
        spent = sum(len(v) for k, v in got[s][0].items() if k != span)  # the pages only
        self._maybe_promote(parts, s, spent)
        parts.stats.samples += 1
        out: dict[str, Any] = r.sample(li)
        return out

    async def _range_offsets(self, parts: _ProcessParts, s: int) -> tuple[Sequence[int], int]:
        """Shard ``s``'s sample offsets, read by range the first time (then kept for the
        process; concurrent first calls share one read), and the bytes that cost now."""
        offsets = parts.headers.get(s)
        if offsets is not None:
            return offsets, 0
        pending = parts.header_reads.get(s)
        if pending is not None and pending.get_loop() is asyncio.get_running_loop():
            return await asyncio.shield(pending), 0
        task = asyncio.ensure_future(self._read_offsets(parts, s))
        parts.header_reads[s] = task
        task.add_done_callback(lambda t: _forget_read(parts.header_reads, s, t))
        return await asyncio.shield(task), header_size(self.catalog.entries[s].samples)

    async def _read_offsets(self, parts: _ProcessParts, s: int) -> Sequence[int]:
        shard = self.catalog.shards[s]
        entry = self.catalog.entries[s]
        assert shard.remote is not None
        store = self.stores.get(shard.remote)
        meta = shard.meta  # a split shard's offsets live in its meta file
        head_key = shard.raw_key if meta is None else meta.raw_key
        etag = shard.etag if meta is None else meta.etag
        n = header_size(entry.samples)
        head = await parts.fetcher.versions.read(store, shard.remote, head_key, 0, n, etag)
        parts.stats.range_requests += 1
        parts.stats.add_bytes(shard.remote, len(head))
        first = None if meta is None else 0  # split offsets index the data file from 0
        offsets: tuple[int, ...] = tuple(  # as ShardView's: the GC stops scanning a tuple
            parse_offsets(
                head, shard.url(), entry.samples, entry.raw_data.bytes, min_first=first
            ).tolist()
        )
        parts.headers[s] = offsets
        return offsets

    # -- the start of an iteration: first samples by range while whole shards download ---------
    def _may_range(self) -> bool:
        """Whether this iteration may read a shard by ranges at all (see :meth:`_range_wants`):
        some stream has a remote and a shard of at least ``range_min_bytes``. Only then are its
        downloads held for the first batch's ranges; otherwise holding them would only change
        when they start."""
        if not self.range_first_batches:
            return False
        cat = self.catalog
        for i, src in enumerate(cat.sources):
            first, end = int(cat.shard_first[i]), int(cat.shard_first[i + 1])
            if (
                end > first
                and cat.shards[first].remote is not None
                and int(src.index.table.raw_bytes.max()) >= self.range_min_bytes
            ):
                return True
        return False

    def _range_wants(
        self, groups: Groups, la: Lookahead, opener: ShardOpener
    ) -> list[tuple[int, list[int]]]:
        """The shards of this batch to read by ranges, with their wanted samples: only in the
        first ``range_first_batches`` batches of an iteration (each worker's; a resumed one
        starts again), and only shards :meth:`_rangeable` and not open here."""
        if la.batches_taken > self.range_first_batches:
            return []
        wants = [
            (s, list(locals_))
            for s, _positions, locals_ in groups
            if opener.cached(s) is None and self._rangeable(s)
        ]
        return wants if self._ranges_pay(wants) else []

    def _ranges_pay(self, wants: list[tuple[int, list[int]]]) -> bool:
        """Whether reading ``wants`` by ranges saves enough bytes before the batch: the MDS
        shards' ranges (wanted samples, neighbours under ``_RANGE_GAP`` apart in one GET, as
        :meth:`_range_read` reads them) at most ``range_share`` of those shards' bytes. Else
        the ranges would cost about what the whole shards cost, which their downloads then
        read again: the batch waits for the downloads instead. Estimated from the index alone
        (the same answer in every process, no GET): a shard's bytes spread evenly over its
        samples. Parquet row groups have their own rule (``page_share``), on the fetched
        offset indexes."""
        entries = self.catalog.entries
        ranged = whole = 0.0
        for s, locals_ in wants:
            entry = entries[s]
            n = entry.samples
            if entry.format != "mds" or n <= 0:
                continue
            head = header_size(n)
            each = (entry.raw_data.bytes - head) / n
            want = sorted(set(locals_))
            first = want[0]
            for k in range(1, len(want) + 1):
                if k == len(want) or (want[k] - want[k - 1] - 1) * each >= _RANGE_GAP:
                    ranged += (want[k - 1] + 1 - first) * each
                    if k < len(want):
                        first = want[k]
            ranged += head  # its header, read first
            whole += entry.raw_data.bytes
        return ranged <= self.range_share * whole

    def _rangeable(self, s: int) -> bool:
        """Whether shard ``s`` may be read by ranges now: at least ``range_min_bytes`` (1 MiB),
        not complete in the cache, and its samples can be addressed and trusted without the
        whole file: an uncompressed MDS shard with a remote, read without hash validation (a
        range cannot be checked against a whole-file hash, so a validating stream always waits
        for its shards). A Parquet row group qualifies when its file has a page index for
        every projected column (``parquet/io_pages.py``: its rows are read by pages)."""
        shard = self.catalog.shards[s]
        entry = self.catalog.entries[s]
        if entry.format == "parquet":
            return not (
                shard.remote is None
                or (shard.validate_hash or self.validate_hash) is not None
                or shard.files.raw_size < self.range_min_bytes
                or _page_layout(entry) is None
                or is_complete(shard.files.raw_path, shard.files.raw_size)
            )
        return not (
            shard.remote is None
            or shard.compression is not None
            or shard.ranges is not None
            or shard.meta is not None
            or entry.format != "mds"
            or (shard.validate_hash or self.validate_hash) is not None
            or shard.files.raw_size < self.range_min_bytes
            or is_complete(shard.files.raw_path, shard.files.raw_size)
        )

    def _ranged(
        self, groups: Groups, la: Lookahead, opener: ShardOpener, pf: Prefetcher
    ) -> dict[int, RangeShard] | None:
        """This batch's range shards (see :meth:`_range_wants`), read on the I/O loop thread;
        None when the batch reads only whole shards. The iteration's whole-shard downloads
        were held (:meth:`Prefetcher.hold`) so that the first batch's GETs do not queue behind
        them at the server: they start once those are read (or failed), before anything
        waits for a download. A DataLoader worker whose whole first batch came from the main
        process starts them at its next batch instead, once this one is collated and handed
        over: its loop thread making its SDK client and starting four streaming downloads
        would otherwise contend for its GIL with the collate and the hand-over (tens of ms on
        2 cores); the next batch is where it needs them."""
        later = False
        try:
            wants = self._range_wants(groups, la, opener)
            handoff = self._lead_take() if la.batches_taken == 1 else None
            with Stopwatch(self._parts().stats):
                if handoff is not None:
                    got = self._lead_received(handoff, wants)
                    if got is not None:
                        # nothing of this batch waits for a download (the caller's rule)
                        later = all(s in got for s, _positions, _locals in groups)
                        return got
                if not wants:
                    return None
                return bridge.run(self._range_batch(wants))
        finally:
            if not later:
                pf.release()

    # -- the first batch of each DataLoader worker, read by the main process (runtime/lead.py) --
    def lead_wants(self, ids: np.ndarray[Any, np.dtype[np.int64]]) -> list[tuple[int, list[int]]]:
        """What a worker whose first batch is ``ids`` reads by ranges (its :meth:`_range_wants`
        in a process with nothing open)."""
        if not self.range_first_batches:
            return []
        wants = [
            (s, [int(x) for x in locals_])
            for s, _positions, locals_ in batch_groups(ids, self.catalog)
            if self._rangeable(s)
        ]
        return wants if self._ranges_pay(wants) else []

    async def lead_first(
        self,
        per_worker: list[list[tuple[int, list[int]]]],
        writers: list[Any],
        live: list[bool] | None = None,
        under_way: threading.Event | None = None,
    ) -> None:
        """Read each worker's wanted samples (``per_worker[w]``) by ranges and send each worker
        its bytes as soon as they are complete (``None`` when the read failed: the worker then
        reads them itself). Worker by worker, worker 0's first, each worker's shard headers and
        samples together (at most ``_RANGE_GETS`` GETs at a time; a header already read for
        an earlier worker is not read again): the loader hands out worker 0's batch first, and
        on a server that serves requests side by side (CPU-bound, as moto) the GETs of one
        worker alone come back sooner than with the next workers' headers among them (on the
        images benchmark 5 of the 55 GETs before worker 0's batch was complete; on tokens the
        workers' first batches share their shards). No GET starts once ``live[0]`` is False
        (the loader's iteration is over). ``under_way`` is set once the first GET is answered
        (its requests are at the server then), or when this ends."""
        sem = asyncio.Semaphore(_RANGE_GETS)
        sent = [False] * len(per_worker)
        answered = None if under_way is None else under_way.set
        try:
            for w, wants in enumerate(per_worker):
                got: dict[int, tuple[Any, list[int] | None, dict[int, int]]] | None = None
                try:
                    if wants:
                        got = await self._range_read(wants, sem, live, answered)
                except Exception:
                    got = None
                sent[w] = True
                lead.send(writers[w], wants, got, self._versions_of(wants) if got else {})
        finally:
            if under_way is not None:
                under_way.set()
            for w, done in enumerate(sent):
                if not done:  # cancelled (the loop shutting down): no worker waits
                    lead.send(writers[w], per_worker[w], None, {})

    def _objects_of(
        self, wants: list[tuple[int, list[int]]]
    ) -> list[tuple[tuple[str, str], RemoteShard]]:
        """The remote objects read by ranges for ``wants`` (each shard's data file and, for
        a split shard, its meta file), with their keys in ``Versions``."""
        out = []
        for s, _ in wants:
            shard = self.catalog.shards[s]
            for one in (shard, shard.meta):
                if one is not None and one.remote is not None:
                    out.append(((one.remote, one.raw_key), one))
        return out

    def _versions_of(self, wants: list[tuple[int, list[int]]]) -> dict[tuple[str, str], str]:
        """The versions this process read of the objects of ``wants``' shards: what the
        worker it reads them for must read too."""
        keys = [k for k, _ in self._objects_of(wants)]
        return self._parts().fetcher.versions.subset(keys)

    def sweep_versions(self) -> None:
        """In this process, compare the cache files of the shards it read by ranges that
        another process has downloaded since (``Versions.sweep``); nothing before this
        process has its parts."""
        parts = self._local
        if parts is not None and self._pid == os.getpid():
            parts.fetcher.versions.sweep()

    def _lead_take(self) -> Any:
        """In a DataLoader worker whose loader's main process reads its first batch: this
        worker's read end (once per iteration); else None."""
        ends, self._lead = self._lead, None
        if ends is None:
            return None
        me = dataloader_worker()
        if me is None or ends.ppid == os.getpid():
            ends.close()
            return None
        conn = ends.take(me[0])
        return None if conn is None else (conn, ends.ppid)

    def _lead_received(
        self, handoff: tuple[Any, int], wants: list[tuple[int, list[int]]]
    ) -> dict[int, RangeShard] | None:
        """The first batch's range shards the main process read for this worker, when it read
        exactly the samples of ``wants`` of each of their shards (else None: read them here).
        ``wants`` may lack shards the main process read: a shard completed in the node's cache
        since the main process planned (another worker's download; this worker's own are held
        until its first batch) is read from there, and the bytes of the others are used."""
        msg = lead.receive(*handoff)
        if msg is None:
            return None
        theirs, payload, versions = msg
        mine = [(s, [int(x) for x in locals_]) for s, locals_ in wants]
        if payload is None or not mine or not _lead_covers(mine, theirs, payload):
            return None
        parts = self._parts()
        mine_v = parts.fetcher.versions
        how = "the main process read it for this worker's first batch at"
        for k, one in self._objects_of(wants):
            v = versions.get(k)
            if v is not None:  # the version those bytes came from
                mine_v.keep(k, [v], one.url(), how)
            # and their files, once any process of the node downloads them
            mine_v.expect_file(k, one.files.raw_path, one.files.raw_size, one.url())
        out = self._range_shards(parts, {s: payload[s] for s, _ in mine})
        parts.range_samples += sum(len(r.slot) for r in out.values())
        return out

    async def _range_batch(self, wants: list[tuple[int, list[int]]]) -> dict[int, RangeShard]:
        """Read the wanted samples of each shard by ranged GETs, all shards at once: the
        header of a shard once per process, then its wanted samples coalesced into few ranges
        (neighbours less than ``_RANGE_GAP`` bytes apart share a GET), at most
        ``_RANGE_GETS`` GETs at a time. The whole-shard downloads go on meanwhile."""
        parts = self._parts()
        got = await self._range_read(wants, asyncio.Semaphore(_RANGE_GETS))
        out = self._range_shards(parts, got)
        parts.range_samples += sum(len(r.slot) for r in out.values())
        return out

    def _range_shards(self, parts: _ProcessParts, got: dict[int, Any]) -> dict[int, Any]:
        """The range shards of :meth:`_range_read`'s bytes: an MDS shard's samples as they are,
        a Parquet row group's pages decoded (a group whose pages do not decode on their own is
        left out: it is read whole, by the path that checks it)."""
        out: dict[int, Any] = {}
        for s, (buf, compact, slot) in got.items():
            if compact is not None:
                out[s] = RangeShard(buf, compact, slot, parts.random.decoder(s))
                continue
            from astream.parquet.io_pages import PageRows, decode_rows

            entry = self.catalog.entries[s]
            table = decode_rows(entry, buf, sorted(slot))  # type: ignore[arg-type]
            if table is not None:
                out[s] = PageRows(entry, table, slot)  # type: ignore[arg-type]
        return out

    async def _range_read(
        self,
        wants: list[tuple[int, list[int]]],
        sem: asyncio.Semaphore,
        live: list[bool] | None = None,
        answered: Callable[[], None] | None = None,
    ) -> dict[int, tuple[Any, list[int] | None, dict[int, int]]]:
        """:meth:`_range_batch`'s reads, under ``sem``: per shard, the wanted samples back to
        back, their offsets in that buffer, and each sample's slot (``live``: see
        :meth:`lead_first`; ``answered`` is called as each GET's bytes are in)."""
        parts = self._parts()
        stats = parts.stats
        versions = parts.fetcher.versions

        def check() -> None:
            if live is not None and not live[0]:
                raise _IterationOver

        async def get(store: Any, shard: RemoteShard, a: int, b: int) -> bytes:
            """Bytes ``[a, b)`` of ``shard``'s object, conditional on its indexed identity (a
            Parquet file's: a rewritten file is an ObjectChangedError, as for whole reads,
            never its new pages decoded with the old footer), or for an MDS shard on the
            version this process read first (``runtime/versions.py``)."""
            key, remote = shard.raw_key, shard.remote
            assert remote is not None
            async with sem:
                check()
                # an iteration's first samples: their shard's file is compared once it is in
                # the cache (Versions.sweep); a random read's (aget_range) only if opened
                cached = (shard.files.raw_path, shard.files.raw_size)
                data = await versions.read(store, remote, key, a, b, shard.etag, cached)
            stats.range_requests += 1
            stats.add_bytes(remote, len(data))
            if answered is not None:
                answered()
            if len(data) != b - a:
                raise FormatError(f"range {a}-{b} came back with {len(data)} bytes", key)
            return data

        indexes: dict[tuple[str, tuple[int, int]], Any] = {}  # a file's offset indexes, once

        async def page_plan(s: int, locals_: list[int]) -> tuple[Any, list[Any]] | None:
            """A Parquet row group's offset indexes (fetched) and the GETs of the pages
            holding ``locals_``; None when those pages are over ``page_share`` of the group
            (they would cost about the whole group, then the group again: its download
            starts after the first batches) or the index does not parse."""
            from astream.parquet import io_pages as parquet_range

            shard = self.catalog.shards[s]
            entry: Any = self.catalog.entries[s]
            assert shard.remote is not None
            store = self.stores.get(shard.remote)
            span = parquet_range.index_span(entry)
            assert span is not None  # _rangeable
            kept = parquet_range.kept_index(shard.url(), entry, span)
            if kept is None:
                key = (shard.raw_key, span)
                task = indexes.get(key)
                if task is None:
                    task = asyncio.ensure_future(get(store, shard, *span))
                    indexes[key] = task
                fetched: bytes = await asyncio.shield(task)
                parquet_range.keep_index(shard.url(), entry, span, fetched)
                kept = fetched
            got: dict[tuple[int, int], bytes] = {span: kept}
            ranges = parquet_range.page_ranges(entry, got, sorted(set(locals_)))
            if ranges is None or sum(b - a for a, b in ranges) > (
                shard.files.raw_size * self.page_share
            ):
                return None
            runs: list[tuple[int, int]] = []
            spans = entry.ranges()  # the projected chunks, merged: a GET never leaves one
            for a, b in ranges:  # sorted: neighbours closer than _PAGE_GAP share a GET
                if runs and a - runs[-1][1] < _PAGE_GAP and _within(spans, runs[-1][0], b):
                    runs[-1] = (runs[-1][0], max(b, runs[-1][1]))
                else:
                    runs.append((a, b))
            return got, runs

        async def pages(
            s: int, locals_: list[int], plan: tuple[Any, list[Any]] | None
        ) -> tuple[Any, None, dict[int, int]]:
            """A Parquet row group's wanted rows: its planned pages (none: read it whole)."""
            if plan is None:
                return {}, None, {}
            shard = self.catalog.shards[s]
            assert shard.remote is not None
            store = self.stores.get(shard.remote)
            got, runs = plan
            pieces = await asyncio.gather(*(get(store, shard, a, b) for a, b in runs))
            got.update(zip(runs, pieces))
            return got, None, {li: j for j, li in enumerate(sorted(set(locals_)))}

        async def one(s: int, locals_: list[int]) -> tuple[Any, list[int] | None, dict[int, int]]:
            shard = self.catalog.shards[s]
            assert shard.remote is not None
            store = self.stores.get(shard.remote)
            async with sem:
                check()
                offsets, _ = await self._range_offsets(parts, s)
            if answered is not None:
                answered()
            want = sorted(set(locals_))
            runs: list[tuple[int, int]] = []  # [first, last] index into ``want``, inclusive
            first = 0
            for k in range(1, len(want) + 1):
                if k == len(want) or offsets[want[k]] - offsets[want[k - 1] + 1] >= _RANGE_GAP:
                    runs.append((first, k - 1))
                    first = k
            pieces = await asyncio.gather(
                *(get(store, shard, offsets[want[a]], offsets[want[b] + 1]) for a, b in runs)
            )
            chunks: list[memoryview] = []
            compact = [0]
            for (a, b), piece in zip(runs, pieces):
                mv = memoryview(piece)
                base = offsets[want[a]]
                for li in want[a : b + 1]:
                    chunks.append(mv[offsets[li] - base : offsets[li + 1] - base])
                    compact.append(compact[-1] + offsets[li + 1] - offsets[li])
            slot = {li: j for j, li in enumerate(want)}
            return b"".join(chunks), compact, slot

        cat = self.catalog
        pq = [(s, locals_) for s, locals_ in wants if cat.entries[s].format == "parquet"]
        plans = await asyncio.gather(*(page_plan(s, locals_) for s, locals_ in pq))
        if any(p is None for p in plans):
            # a row group of the batch is read whole: the batch waits for its download, which
            # page reads of the others would only delay (downloads are held meanwhile)
            plans = [None] * len(plans)
        plan_of = {s: p for (s, _), p in zip(pq, plans)}
        shards = await asyncio.gather(
            *(
                pages(s, locals_, plan_of[s]) if s in plan_of else one(s, locals_)
                for s, locals_ in wants
            )
        )
        return {s: r for (s, _), r in zip(wants, shards)}

    async def _promoted(self, parts: _ProcessParts, s: int, li: int) -> dict[str, Any] | None:
        """Sample ``li`` of ``s`` from the cache once a promotion of ``s`` started on this loop
        has finished (waiting for it: its bytes are already on the way); None to read a range
        (no promotion, one on another loop, or one that could not make room)."""
        task = parts.promoting.get(s)
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            return None
        try:
            ok = await asyncio.shield(task)
        except Exception:
            ok = False
        opener = parts.random
        h = opener.try_open(s) if ok else None
        if h is None:
            return None
        parts.stats.samples += 1
        return h.sample(li)

    def _maybe_promote(self, parts: _ProcessParts, s: int, nbytes: int) -> None:
        """Count ``nbytes`` more spent on ranges in shard ``s``; when the total reaches the
        shard's size, fetch it whole in the background (only if the cache has room without
        evicting anything pinned). Rent-or-buy: ranges cost what they move, a download the
        shard's size, so buying when the rent paid equals the price bounds the total at twice
        the better choice made in hindsight. A promotion that could not make room starts the
        count again."""
        spent = parts.range_bytes
        total = spent.get(s, 0) + nbytes
        spent[s] = total
        promoting = parts.promoting
        if total < self.catalog.entries[s].raw_data.bytes or s in promoting:
            return
        spent[s] = 0
        task = asyncio.get_running_loop().create_task(self.download(s, False))
        promoting[s] = task
        task.add_done_callback(_forget_promotion(promoting, s))

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


class _Tracker:
    """Where one iteration is in its node's time, for its process's evictions."""

    def __init__(
        self,
        clock: ConsumerClock,
        la: Lookahead,
        index: dict[str, int],
        space: CacheSpace,
        clocks: NodeClocks | None,
    ) -> None:
        self.clock = clock
        self.la = la
        self.index = index
        self.space = space
        self.clocks = clocks
        self.now = clock.tick(0)

    def batch(self) -> None:
        """The consumer starts its next batch."""
        self.now = self.clock.tick(max(0, self.la.batches_taken - 1))
        if self.clocks is not None:
            self.clocks.publish(self.now)

    def reading(self, s: int) -> None:
        """The consumer is about to read shard ``s`` of its current batch."""
        self.now = self.clock.tick(max(0, self.la.batches_taken - 1), self.la.offset_of(s))
        if self.clocks is not None:
            self.clocks.publish(self.now)

    def next_use(self, files: list[Any]) -> list[int]:
        if self.clocks is not None:
            nows = self.clocks.nows()
        else:  # ranks in lockstep
            nows = [self.now] * self.clock.future.world.ranks_per_node
        nows[self.clock.local] = self.now
        shards = [self.index.get(sf.raw_path, -1) for sf in files]
        out: list[int] = self.clock.future.next_use(shards, nows).tolist()
        return out

    def stop(self) -> None:
        if self.space.future == self.next_use:
            self.space.future = None
        if self.clocks is not None:
            self.clocks.close()
            self.clocks = None


_RANGE_GAP = 1 << 20  # wanted samples closer than this in a shard are read by one GET
_RANGE_GETS = 32  # ranged GETs at a time per batch
# Parquet pages closer than this share a GET: pages are large, and a column's dictionary page
# is far from the data page of a late row (a wide gap would fetch most of the group)
_PAGE_GAP = 64 << 10


def _first(ranged: dict[int, RangeShard], open_shard: Callable[[int], OpenShard]) -> Any:
    """``open_shard`` that serves the batch's range shards first."""

    def open_(s: int) -> Any:
        got = ranged.get(s)
        return got if got is not None else open_shard(s)

    return open_


def _compact(groups: Groups, ranged: dict[int, RangeShard]) -> BatchGroups:
    """``groups`` with the sample indices of range shards turned into their slots in the
    range shard's compact buffer (what the columnar path indexes)."""
    out = BatchGroups()
    local = groups.local if isinstance(groups, BatchGroups) else None
    if local is not None:
        local = local.copy()
    for s, positions, locals_ in groups:
        r = ranged.get(s)
        if r is not None:
            slot = r.slot
            locals_ = [slot[li] for li in locals_]
            if local is not None:  # positions: a tuple or range, which numpy reads as axes
                local[np.asarray(positions, np.int64)] = locals_
        out.append((s, positions, locals_))
    out.local = local
    out.which = groups.which if isinstance(groups, BatchGroups) else None
    return out


def _within(spans: tuple[tuple[int, int], ...], a: int, b: int) -> bool:
    return any(s <= a and b <= e for s, e in spans)


def _page_layout(entry: Any) -> Any:
    from astream.parquet.io_pages import layout_of

    return layout_of(entry)


class _IterationOver(Exception):
    """The loader's iteration ended while its workers' first batches were being read."""


def _remove_board(board: Board, pid: int) -> None:
    """An engine's board, once the engine is gone, in the process that built it only (a
    forked worker inherits the finalizer, never the board's ownership)."""
    if os.getpid() == pid:
        board.remove()


def _forget_read(reads: dict[int, Any], s: int, task: Any) -> None:
    if reads.get(s) is task:
        del reads[s]
    if not task.cancelled():
        task.exception()  # retrieved here: a failed read raises in each caller instead


def _forget_promotion(promoting: dict[int, asyncio.Task[bool]], s: int) -> Any:
    def done(task: asyncio.Task[bool]) -> None:
        if promoting.get(s) is task:
            del promoting[s]
        if not task.cancelled():
            task.exception()  # a failed background fetch only means the next read is a range

    return done


def _lead_covers(
    mine: list[tuple[int, list[int]]], theirs: list[tuple[int, list[int]]], payload: Any
) -> bool:
    """Whether the main process read each shard of ``mine`` with exactly its samples."""
    read = {s: locals_ for s, locals_ in theirs}
    return all(read.get(s) == locals_ and s in payload for s, locals_ in mine)
