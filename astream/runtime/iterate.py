"""An engine's iterations: planned batches in, decoded samples (or columns) out, in order.

Theory of operation
-------------------
Synchronous consumers (``iter_samples``, ``iter_columns``: ``__iter__`` in a worker or the main
process) run downloads on the astream loop thread through the bridge. ``aiter_batches`` runs
everything on the caller's own loop (``io="loop"``), or awaits downloads that run on the loop
thread (``io="thread"``): no thread is added, the decode is the same code, and so is the order.

All three paths share one setup and one teardown (:meth:`Iteration._start`, :class:`_Run`): a
lookahead over the plan feeding a prefetcher (held until the first batch's ranges are read, when
some shard may be read by ranges), this iteration's own opener, the next-use tracker of its
evictions, and the metrics' view of the prefetcher and lookahead. The first batches may be read
by ranges (``runtime/ranges.py``) or handed over by the loader's main process
(``runtime/lead.py``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import numpy as np

from astream import bridge
from astream.core.batchdecode import ColumnBatch
from astream.core.eviction import ConsumerClock
from astream.errors import FormatError
from astream.runtime.batch import BatchLayouts, locate_batch
from astream.runtime.batch_groups import BatchGroups, Groups
from astream.runtime.cache import CacheSpace
from astream.runtime.catalog import Catalog
from astream.runtime.lead import FirstBatch, PipeEnd
from astream.runtime.placement import rank_readers
from astream.runtime.prefetch import FURTHER, STEP_LOCATE, Lookahead, Prefetcher
from astream.runtime.reader import ShardOpener, decode_batch
from astream.runtime.shard_handles import OpenShard, RangeShard
from astream.runtime.stats import Stats, Stopwatch
from astream.runtime.tracker import Follow, Tracker

__all__ = ["Iteration"]

Batches = Iterator[np.ndarray[Any, np.dtype[np.int64]]]

# GETs at once per rank, over the processes that read it, and the fewest per process
# (``Iteration.gets``): 32 GETs read a rank without workers; two or more workers run 16 each
RANK_GETS = 32
PROCESS_GETS = 16


class _Run:
    """The parts of one iteration, its per-batch bookkeeping and its teardown."""

    def __init__(
        self,
        catalog: Catalog,
        stats: Stats,
        la: Lookahead,
        pf: Prefetcher,
        opener: ShardOpener,  # this iteration's own (its pins are released per batch)
        tracker: Tracker | None,
    ) -> None:
        self.catalog = catalog
        self.stats = stats
        self.la = la
        self.pf = pf
        self.opener = opener
        self.tracker = tracker
        self.multi = bool(stats.stream_samples)

    def batch(self) -> None:
        """The consumer starts its next batch."""
        if self.tracker is not None:
            self.tracker.batch()

    def counted(self, groups: Groups, size: int) -> None:
        """A batch of ``size`` samples is decoded: counted, and this iteration's pins let go."""
        stats = self.stats
        stats.samples += size
        if self.multi:
            stats.count_streams(groups, self.catalog.shard_stream)
        if self.opener.pinning:
            # Never hold a pin while suspended: the DataLoader may park this worker
            # for long, and another process may be waiting for exactly that shard.
            self.opener.release_all()

    def close(self) -> None:
        self.pf.cancel()
        self.opener.release_all()
        if self.tracker is not None:
            self.tracker.stop()


class Iteration(FirstBatch):
    """The iterations of an engine (synchronous and on the caller's loop)."""

    _follow: Follow | None  # the next iteration's place in the node

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
        self._follow = Follow(clock, shape, epoch, worker)

    def _track(self, space: CacheSpace, la: Lookahead) -> Tracker | None:
        follow, self._follow = self._follow, None
        if follow is None:
            return None
        return Tracker.start(follow, la, self._file_shard(), space)

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

    def gets(self) -> int:
        """The shards this process's prefetcher downloads, and the GETs it runs, at once:
        ``concurrency`` when set, else ``RANK_GETS`` shared by the processes that read the
        rank (its DataLoader workers, or the main process alone), and at least
        ``PROCESS_GETS`` per process. An object store caps each connection's rate, so a rank
        needs many GETs at once; with several workers each has its own slots, and more per
        worker only share the CPU the workers and the store already use."""
        if self.concurrency is not None:
            return self.concurrency
        return max(PROCESS_GETS, -(-RANK_GETS // rank_readers()))

    def _start(self, batches: Batches, loop: asyncio.AbstractEventLoop | None = None) -> _Run:
        """The lookahead, prefetcher (downloads on ``loop``; None: the bridge loop), opener
        and next-use tracker of one iteration."""
        parts = self._parts()
        stats = parts.stats
        opener = self._opener(parts.space, stats, parts.fetcher.versions, self.map_limit())
        pf = Prefetcher(
            self.catalog,
            self.download,
            concurrency=self.gets(),
            split_min=self.split_min,
            steal_min=self.steal_min,
            loop=loop,
        )
        if self._may_range():
            # until the first batch's ranges are read (``_ranged``); a worker whose first
            # batch the main process reads runs none before its next batch (see _ranged)
            pf.hold(0 if self._lead_expected() else None)
        self._want_first_of_others(pf)  # before the lookahead announces this worker's own
        la = Lookahead(
            batches, self.catalog, pf, self.ahead, idle=opener.idle, further=self._further()
        )
        tracker = self._track(parts.space, la)
        stats.live = (weakref.ref(pf), weakref.ref(la))  # for astream.metrics
        return _Run(self.catalog, stats, la, pf, opener, tracker)

    def _sync_open(self, run: _Run) -> Callable[[int], OpenShard]:
        """``open_shard`` of a synchronous iteration: shard -> open handle, fetching (on the
        bridge loop) when needed."""
        la, pf, opener, tracker, stats = run.la, run.pf, run.opener, run.tracker, run.stats

        def fetch(s: int) -> None:
            # downloads held for the first batch's ranges (or a lead hand-over) start before
            # anything waits on one, whichever batch path the consumer is on
            pf.release()
            fut: Any = pf.take(s)
            with Stopwatch(stats):
                if fut is not None and not fut.done():
                    with pf.awaiting(s):
                        # while this download runs, every other one that ends frees a slot:
                        # fill it with the plan's next shards (Lookahead.further), then wait
                        while not fut.done():
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

        return open_shard

    def iter_samples(
        self, batches: Batches, cursor: list[Any] | None = None, lists: bool = False
    ) -> Iterator[Any]:
        """Decoded samples of ``batches`` in order (synchronous consumer).

        ``cursor`` (``[samples of finished batches, iterator of the current batch, its size]``)
        lets the caller count the samples consumed at no per-sample cost: the current batch's
        list iterator knows how many of its items are left. With ``lists`` (and a ``cursor``)
        each batch's list iterator is yielded instead of its samples: the caller takes the
        samples from it (the consumed count stays exact) with no generator step per sample."""
        run = self._start(batches)
        open_shard = self._sync_open(run)
        done: Groups | None = None  # the batch handed out before this one
        try:
            for groups, size in run.la:
                if done is not None:
                    run.opener.drop_read(done)
                done = groups
                run.batch()
                ranged = self._ranged(groups, run.la, run.opener, run.pf)
                if ranged is None:
                    batch = decode_batch(groups, size, open_shard)
                else:
                    batch = decode_batch(groups, size, _first(ranged, open_shard))
                run.counted(groups, len(batch))
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
            run.close()

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
        run = self._start(batches)
        open_shard = self._sync_open(run)
        layouts = BatchLayouts(self.catalog)
        # past the batches _ranged may read by ranges (and the first, which may take a lead
        # hand-over) it has nothing to do but release the prefetcher, which a whole first
        # batch handed over by the main process leaves held until the next batch
        ranging = max(1, self.range_first_batches)
        try:
            for groups, size in run.la:
                run.batch()
                if run.la.batches_taken > ranging:
                    ranged = None
                    run.pf.release()  # held at a lead hand-over of the first batch (_ranged)
                else:
                    ranged = self._ranged(groups, run.la, run.opener, run.pf)
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
                run.counted(groups, size)
                if cursor is not None:
                    cursor[0] += size
                yield out
        finally:
            run.close()

    def _ranged(
        self, groups: Groups, la: Lookahead, opener: ShardOpener, pf: Prefetcher
    ) -> dict[int, RangeShard] | None:
        """This batch's range shards (see ``_range_wants``), read on the I/O loop thread;
        None when the batch reads only whole shards. The iteration's whole-shard downloads
        were held (:meth:`Prefetcher.hold`) so that the first batch's GETs do not queue behind
        them at the server: they start once those are read (or failed), before anything
        waits for a download. A DataLoader worker whose whole first batch came from the main
        process starts them at its next batch instead, once this one is collated and handed
        over: its loop thread making its SDK client and starting four streaming downloads
        would otherwise contend for its GIL with the collate and the hand-over (tens of ms on
        2 cores); the next batch is where it needs them. They also wait for the main process
        to have read the next worker's first batch (``lead.PipeEnd``)."""
        later = False
        try:
            wants = self._range_wants(groups, la, opener)
            handoff = self._lead_take() if la.batches_taken == 1 else None
            with Stopwatch(self._parts().stats):
                if handoff is not None:
                    got, pipe = self._lead_received(handoff, wants)
                    if got is not None:
                        # nothing of this batch waits for a download (the caller's rule)
                        later = all(s in got for s, _positions, _locals in groups)
                    if later and pipe is not None:
                        # and its downloads wait for the next worker's first batch too
                        pf.gate = PipeEnd(pipe)
                    elif pipe is not None:
                        pipe.close()
                    if got is not None:
                        return got
                if not wants:
                    return None
                return bridge.run(self._range_batch(wants))
        finally:
            if not later:
                pf.release()

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
        on_loop = io == "loop"
        run = self._start(batches, asyncio.get_running_loop() if on_loop else None)
        la = run.la
        la.stepwise = True  # the window is planned below, off the loop (see Lookahead.step)
        open_shard = self._async_open(run, on_loop)
        clock = time.perf_counter
        done: Groups | None = None  # the batch handed out before this one
        try:
            while True:
                while la.step() == STEP_LOCATE:
                    await asyncio.to_thread(la.locate)  # the plan walk: ms per 10,000 ids
                mark = clock()
                step = next(la, None)
                if step is None:
                    break
                if done is not None:
                    run.opener.drop_read(done)
                groups, size = step
                done = groups
                run.batch()
                ranged = await self._aranged(run, groups, on_loop)
                out = await _adecode(groups, size, ranged, open_shard, mark, slice_s)
                run.counted(groups, size)
                yield out
                await asyncio.sleep(0)  # at least once per batch
            # unmapping every shard the epoch held open, ~10 ms at 30 shards: in a thread (only
            # this generator uses the opener)
            await asyncio.to_thread(run.opener.release_all)
        finally:
            run.close()

    async def _aranged(self, run: _Run, groups: Groups, on_loop: bool) -> dict[int, RangeShard]:
        """:meth:`_ranged` of ``aiter_batches`` (no lead hand-over there): this batch's range
        shards, read on the caller's loop or awaited from the I/O loop thread."""
        ranged: dict[int, RangeShard] = {}
        wants = self._range_wants(groups, run.la, run.opener)
        try:
            if wants:
                with Stopwatch(run.stats):
                    if on_loop:
                        ranged = await self._range_batch(wants)
                    else:
                        ranged = await asyncio.wrap_future(bridge.submit(self._range_batch(wants)))
        finally:
            run.pf.release()
        return ranged

    def _async_open(self, run: _Run, on_loop: bool) -> Callable[[int], Awaitable[OpenShard]]:
        """``open_shard`` of ``aiter_batches``: shard -> open handle, awaiting its download."""
        la, pf, opener, tracker, stats = run.la, run.pf, run.opener, run.tracker, run.stats

        async def demand(s: int) -> bool:
            if on_loop:
                return await self.download(s, True)
            return await asyncio.wrap_future(bridge.submit(self.download(s, True)))

        async def try_open(s: int) -> OpenShard | None:
            # opening a cached shard checks its offsets table (and, with validate_hash, hashes
            # the file): milliseconds per 100,000 samples, so it runs in a thread. Nothing else
            # uses this consumer's opener meanwhile: only this generator does, and it waits.
            return opener.cached(s) or await asyncio.to_thread(opener.try_open, s)

        async def open_shard(s: int) -> OpenShard:
            h = await try_open(s)
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
                        else:
                            with pf.awaiting(s):
                                ok = await (fut if on_loop else asyncio.wrap_future(fut))
                        if not ok:
                            await demand(s)
                        h = await try_open(s)
                    finally:
                        opener.drop_pin(hold)
                    if h is not None:
                        la.forget(s)
                        return h
            raise FormatError(
                "shard keeps disappearing from the cache", opener.catalog.shards[s].files.raw_path
            )

        return open_shard

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


async def _adecode(
    groups: Groups,
    size: int,
    ranged: dict[int, RangeShard],
    open_shard: Callable[[int], Awaitable[OpenShard]],
    mark: float,
    slice_s: float,
) -> list[Any]:
    """One batch's samples, decoded on the caller's loop, which is given back whenever
    ``slice_s`` has passed since ``mark`` (when it was last given back)."""
    clock = time.perf_counter
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
    return out


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
