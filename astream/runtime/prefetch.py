"""Fetching the shards a consumer will need, before it needs them.

Theory of operation
-------------------
The sample order is known in advance, so the consumer reads its own future: a :class:`Lookahead`
pulls planned batches from the plan up to ``ahead`` samples before they are decoded (the window
opens gradually: twice what was consumed so far) and tells the
:class:`Prefetcher` about every shard they touch, in order of first use. The prefetcher starts
at most ``concurrency`` downloads at a time; a semaphore wakes waiters first-in first-out, so
downloads start in deadline order (earliest needed first).

``concurrency`` also bounds the GETs the prefetcher runs at once (its stream slots, shared by
all its downloads, whatever the shard size). A download takes its share of them when it starts:
with ``n`` downloads wanted and not done, an object is read in ``concurrency // n`` ranged GETs
(at least one, each at least ``split_min`` bytes). Many shards wanted: one GET per shard, many
shards at once. Few wanted (the start of a small dataset, the tail of an epoch): each is split
so the slots still fill. A store that caps each connection's rate gets the same number of
connections either way; a store that reads the whole object to answer any range (moto does)
is asked once per shard whenever the window holds enough shards.

A split is decided when a download starts, so the last shards of an epoch, started while many
GETs still ran, get one GET each. When those other GETs end while the consumer waits for one of
those shards (:meth:`Prefetcher.awaiting`), the slots they free are not left idle: each splits
that shard's running GET with the most bytes left (``steal_min``, ``gets.Slots``). A shard
nobody waits for yet is never split: ending it sooner gains nothing, and each split costs a
request and the bytes the cut GET had in flight.

Prefetch downloads never wait for cache room (``block=False``): if the cache is full of pinned
shards the prefetch is skipped and the consumer fetches on demand when it gets there. Errors of a
prefetch are not lost: they are raised to the consumer when it asks for that shard.

:meth:`Prefetcher.depth` and :attr:`Lookahead.queued` tell :mod:`astream.metrics` how far the
reader is ahead of its consumer; they are read from another thread, never on the hot path.

The same class serves the synchronous path (futures on the astream loop thread, via the
bridge) and ``aiter`` (tasks on the caller's loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import numpy as np

from astream import bridge
from astream.runtime.batch_groups import Groups, chunk_groups
from astream.runtime.catalog import Catalog
from astream.runtime.fetch import Slots, Streams, is_complete

__all__ = ["STEP_DONE", "STEP_LOCATE", "Lookahead", "Prefetcher"]

_CHUNK = 2048  # samples grouped by shard in one pass (Lookahead)
_CHUNK_BATCHES = 64
# samples further() plans at most per batch handed out (~3 ms of grouping): at a cold start
# the prefetcher's slots stay idle for long, and planning all of ``FURTHER * ahead`` at once
# held the caller's event loop 250 ms at 2M samples
_FURTHER_STEP = 16_384
STEP_DONE, STEP_LOCATE = "done", "locate"  # what Lookahead.step() asks next
FURTHER = 4  # how many times ``ahead`` a consumer waiting on a download may plan (further())


class Gate(Protocol):
    """What a held prefetcher waits on before its downloads start (see Prefetcher.release)."""

    def wait(self) -> None: ...

    def close(self) -> None: ...


class Prefetcher:
    """Starts downloads ahead of the consumer; one per consumer."""

    def __init__(
        self,
        catalog: Catalog,
        download: Callable[[int, bool, Streams], Awaitable[bool]],
        *,
        concurrency: int = 16,
        split_min: int = 8 << 20,
        steal_min: int = 0,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.catalog = catalog
        self._download = download
        self.concurrency = max(1, concurrency)
        self.split_min = max(1, split_min)  # the fewest bytes one GET of a split object reads
        # the fewest bytes a running GET hands to a new one when a slot would idle (0: never)
        self.steal_min = max(0, steal_min)
        self._loop = loop  # None: the bridge loop (sync consumer)
        # GETs that may run while held (see hold): half the slots
        self.early = max(1, self.concurrency // 2)
        self._sem: asyncio.Semaphore | None = None  # shards downloading
        self._slots: Slots | None = None  # GETs running (see Streams)
        self._short = 0  # slots kept back from _slots while held (on the loop)
        self._unfinished = 0  # downloads wanted and not finished (see split)
        self._active = 0  # of those, the ones started (past the shard semaphore)
        self._pending: dict[int, concurrent.futures.Future[bool] | asyncio.Future[bool]] = {}
        # shards the consumer waits for now (see awaiting): changed by the consumer's thread,
        # read by the slots on the loop (a set's add, discard and ``in`` hold the GIL)
        self._awaited: set[int] = set()
        self._held = False  # see hold()
        # run by the consumer's release() before held downloads start (see release)
        self.gate: Gate | None = None
        self.started = False  # a download was wanted (the cache is not hot)

    def hold(self, early: int | None = None) -> None:
        """Until :meth:`release`, run at most ``early`` GETs at once (default: half the
        slots): the engine holds the downloads while it reads an iteration's first samples by
        range, so those few GETs do not queue behind a full set of whole shards at the server,
        while the earliest shards already come in. With ``early=0`` no GET runs until then:
        the caller must release before it waits on a download."""
        self._held = True
        if early is not None:
            self.early = early

    def release(self) -> None:
        """Give held downloads every slot (idempotent; cheap once released). A ``gate`` set
        meanwhile runs first, in the caller's thread: a DataLoader worker whose first batch the
        loader's main process read waits there until the main process has read the next
        worker's first batch too (``runtime/lead.py``), so that its downloads do not slow that
        read at the server."""
        if not self._held:
            return
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.wait()
        self._held = False
        if self._loop is None:
            bridge.get_loop().call_soon_threadsafe(self._open)
        else:
            self._open()  # called on the caller's loop (``aiter``)

    def _open(self) -> None:
        """On the loop: the slots kept back while held become free."""
        short, self._short = self._short, 0
        for _ in range(short):
            assert self._slots is not None
            self._slots.release()
            self._slots.freed()

    async def _run(self, s: int) -> bool:
        self._unfinished += 1  # on the loop, as every change of it: no lock
        try:
            if self._sem is None:
                # made on the loop, as _open runs: a release scheduled since then frees them
                self._sem = asyncio.Semaphore(self.concurrency)
                self._short = self.concurrency - self.early if self._held else 0
                self._slots = Slots(
                    self.concurrency - self._short,
                    steal_min=self.steal_min,
                    idle=_idle_of(self),
                    urgent=self._awaited.__contains__,
                )
            async with self._sem:
                self._active += 1
                try:
                    # downloads wanted in the same burst count before the first one splits
                    await asyncio.sleep(0)
                    assert self._slots is not None
                    return await self._download(s, False, Streams(self.split(s), self._slots, s))
                finally:
                    self._active -= 1
        finally:
            self._unfinished -= 1

    def _idle(self) -> bool:
        """No wanted download waits to start: a slot that frees now would idle (Slots)."""
        return self._active == self._unfinished

    def split(self, s: int) -> int:
        """In how many ranged GETs ``s`` is read, decided as its download starts: its share of
        the stream slots among the downloads wanted and not finished (itself included), and
        no GET under ``split_min`` bytes."""
        files = self.catalog.shards[s].files
        size = files.zip_size if files.zip_size is not None else files.raw_size
        share = self.concurrency // max(1, self._unfinished)
        return max(1, min(share, -(-size // self.split_min)))

    def want(self, s: int) -> None:
        if s in self._pending:
            return
        files = self.catalog.shards[s].files
        if is_complete(files.raw_path, files.raw_size) or self.catalog.shards[s].remote is None:
            return
        self.started = True
        if self._loop is None:
            self._pending[s] = bridge.submit(self._run(s))
        else:
            self._pending[s] = self._loop.create_task(self._run(s))

    @contextlib.contextmanager
    def awaiting(self, s: int) -> Iterator[None]:
        """The consumer waits for the download of ``s`` meanwhile: a slot that is free, or
        frees, while no download waits to start splits one of its running GETs (see
        ``gets.Slots``). Entered from the consumer's thread or, for ``aiter``, on the loop."""
        self._awaited.add(s)
        slots = self._slots
        if slots is not None and slots.steal_min:  # a slot may be idle already
            if self._loop is None:
                bridge.get_loop().call_soon_threadsafe(slots.freed)
            else:
                self._loop.call_soon(slots.freed)
        try:
            yield
        finally:
            self._awaited.discard(s)

    def running(self) -> list[concurrent.futures.Future[bool] | asyncio.Future[bool]]:
        """The downloads started or queued and not finished (read by the consumer)."""
        return [f for f in self._pending.values() if not f.done()]

    def take(self, s: int) -> concurrent.futures.Future[bool] | asyncio.Future[bool] | None:
        """The pending download of ``s``, if one was started; forgets it."""
        return self._pending.pop(s, None)

    def depth(self) -> tuple[int, int, int, int]:
        """(shards downloading or queued, their bytes, shards downloaded and not yet opened by
        the consumer, their bytes). Safe to call from another thread."""
        busy = busy_b = ready = ready_b = 0
        for s, fut in list(self._pending.items()):
            size = self.catalog.shards[s].files.raw_size
            if not fut.done():
                busy, busy_b = busy + 1, busy_b + size
            elif not fut.cancelled() and fut.exception() is None and fut.result():
                ready, ready_b = ready + 1, ready_b + size
        return busy, busy_b, ready, ready_b

    def cancel(self) -> None:
        gate, self.gate = self.gate, None
        if gate is not None:
            gate.close()
        for fut in self._pending.values():
            fut.cancel()
        self._pending.clear()


def _idle_of(pf: Prefetcher) -> Callable[[], bool]:
    """``pf._idle`` without a reference to ``pf``: its slots must not keep it (and through it
    the engine and dataset) alive in a cycle once its iteration is dropped."""
    ref = weakref.ref(pf)

    def idle() -> bool:
        p = ref()
        return p is not None and p._idle()

    return idle


class Lookahead:
    """Iterates planned batches while announcing the shards of the next ``ahead`` samples."""

    def __init__(
        self,
        batches: Iterator[np.ndarray[Any, np.dtype[np.int64]]],
        catalog: Catalog,
        prefetcher: Prefetcher,
        ahead: int,
        idle: Callable[[int], None] | None = None,
        further: int = 1,
    ) -> None:
        self._src = batches
        self._catalog = catalog
        self._pf = prefetcher
        self._ahead = max(1, ahead)
        self._further = max(1, further) * self._ahead  # see further()
        self._queue: deque[tuple[Groups, int]] = deque()
        self._queued = 0
        self._consumed = 0
        self._start_window = min(self._ahead, 256)
        self._done = False  # the plan is exhausted
        self._located: deque[tuple[Groups, int]] = deque()  # grouped, not yet in the window
        self._announced: set[int] = set()
        self.batches_taken = 0  # batches handed out (the current one is the last of them)
        self._current: Groups = []  # the current batch
        # shard -> queued batches that read it; ``idle(s)`` is called once the batch that
        # read ``s`` last in the window is done and no queued batch reads it (see __next__)
        self._idle = idle
        self._uses: dict[int, int] = {}
        self._leaving: list[int] = []
        # set by ``aiter``: it plans with step() and locate() between batches (locate() in a
        # thread), and __next__ then only plans a batch if none was
        self.stepwise = False

    def _next_located(self) -> tuple[Groups, int] | None:
        """The next planned batch grouped by shard (see :meth:`locate`)."""
        got = self._located
        if not got:
            self.locate()
            if not got:
                return None
        return got.popleft()

    def locate(self) -> None:
        """Group the plan's next chunk of batches by shard, if none is grouped and waiting.

        Batches are grouped a chunk at a time (``chunk_groups``: up to ``_CHUNK`` samples --
        fewer until that many were consumed -- and at most ``_CHUNK_BATCHES`` batches): one
        vectorised pass instead of one per batch. Only the plan is read ahead; shards are
        announced batch by batch (``_push``). This walks the plan (numpy: milliseconds for a
        batch of 25,000 samples) and touches nothing but the plan and the grouped batches, so a
        stepwise consumer runs it in a thread while it waits."""
        if self._located or self._done:
            return
        # small at first (the first batch waits for its chunk), then _CHUNK samples
        cap = min(_CHUNK, max(self._start_window, self._consumed))
        chunk: list[np.ndarray[Any, np.dtype[np.int64]]] = []
        taken = 0
        while len(chunk) < _CHUNK_BATCHES and taken < cap:
            try:
                ids = next(self._src)
            except StopIteration:
                self._done = True
                break
            chunk.append(ids)
            taken += len(ids)
        self._located.extend(zip(chunk_groups(chunk, self._catalog), (len(b) for b in chunk)))

    def _target(self) -> int:
        # The window opens gradually (twice what has been consumed, up to ``ahead``): the first
        # batch never waits for a long plan walk, and a hot cache never pays for one at all.
        return min(self._ahead, max(self._start_window, 2 * self._consumed))

    def _fill(self) -> None:
        if self.stepwise:
            while not self._queue:  # step() plans the window; this only the batch handed out
                if not self._push():
                    return
            return
        target = self._target()
        while self._queued < target:
            if not self._push():
                return

    def _slots_idle(self) -> bool:
        """further() may plan now: downloads started, and fewer running than allowed."""
        pf = self._pf
        return self._further > self._ahead and pf.started and len(pf.running()) < pf.concurrency

    def step(self) -> str:
        """For a ``stepwise`` consumer, between batches: plan towards the window's target (and,
        while download slots idle, as far as :meth:`further` would) from the batches already
        grouped. Returns ``STEP_DONE`` (nothing more to plan now) or ``STEP_LOCATE`` (call
        :meth:`locate`, off the loop, then this again): so one call plans at most one grouped
        chunk, and never walks the plan itself."""
        while self._queued < self._target() or (
            self._queued < self._further and self._slots_idle()
        ):
            if not self._located:
                return STEP_DONE if self._done else STEP_LOCATE
            self._push()
        return STEP_DONE

    def _push(self) -> bool:
        """Plan the next batch into the window and announce its new shards (False: no more)."""
        nxt = self._next_located()
        if nxt is None:
            return False
        groups, size = nxt
        self._queue.append((groups, size))
        self._queued += size
        uses = self._uses
        for s, _, _ in groups:  # in order of first use: earliest deadline first
            uses[s] = uses.get(s, 0) + 1
            if s not in self._announced:
                self._announced.add(s)
                self._pf.want(s)
        return True

    def further(self, limit: int | None = None) -> None:
        """At each batch and whenever the consumer is about to wait for a download (cold data
        only): while the prefetcher has idle slots, plan past ``ahead`` (up to ``further``
        times it) so they fetch the next shards the plan needs. Without this the slots idle
        whenever the window's shards are all fetched or fetching: at the tail of a shuffled
        epoch the shards first used late were announced only when the window reached them,
        one window's download after another. Announcements stay in the plan's order
        (earliest first use first). ``limit``: plan at most about that many samples in this
        call (at least one batch); the rest waits for the next call."""
        pf = self._pf
        end = self._queued + limit if limit is not None else self._further
        while self._queued < min(end, self._further) and len(pf.running()) < pf.concurrency:
            if not self._push():
                return

    @property
    def queued(self) -> int:
        """Samples planned ahead of the consumer (announced to the prefetcher, not yet decoded)."""
        return self._queued

    def forget(self, s: int) -> None:
        """The consumer opened ``s``; announce it again if it is needed after eviction."""
        self._announced.discard(s)

    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> tuple[Groups, int]:
        """The next batch: its ids grouped by shard (``batch_groups``), and its size."""
        self._fill()
        if not self.stepwise and self._further > self._ahead and self._pf.started:
            # slots freed while the last batch decoded (never on a hot cache); a step at a time
            self.further(_FURTHER_STEP)
        uses = self._uses
        if self._leaving:  # the previous batch is done: its shards no queued batch reads
            idle = self._idle
            for s in self._leaving:
                if s not in uses and idle is not None:
                    idle(s)
            self._leaving = []
        if not self._queue:
            raise StopIteration
        groups, size = self._queue.popleft()
        for s, _, _ in groups:
            n = uses[s] - 1
            if n:
                uses[s] = n
            else:
                del uses[s]
                self._leaving.append(s)
        self._queued -= size
        self._consumed += size
        self.batches_taken += 1
        self._current = groups
        return groups, size

    def offset_of(self, s: int) -> int:
        """First position of shard ``s`` in the current batch (0 if it is not in it); asked on
        cache misses only, so nothing is added per batch."""
        for shard, positions, _ in self._current:
            if shard == s:
                return positions[0]
        return 0
