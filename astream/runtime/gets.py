"""The ranged GETs of one object into its temporary file, and the slots they run in.

A download (``fetch.ShardFetcher``) reads its object in parts: fixed ``part_size`` pieces, or,
for a prefetch, the near-equal split its prefetcher chose (:class:`Streams`). Each part is a
ranged GET whose chunks are written at their offsets as they arrive (:class:`_FileSink`), in one
of a set of :class:`Slots`. A prefetcher's slots may split a running GET in two when a slot
would otherwise idle (:meth:`Slots.freed`); the object's GETs (:class:`Gets`) then include the
split-off half.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from astream.errors import FormatError
from astream.runtime.stats import Stats
from astream.storage.base import ObjectStore

__all__ = ["Gets", "Slots", "Streams", "even_parts", "fixed_parts", "pwrite_all"]


class Slots:
    """The GET slots of one prefetcher, shared by all its downloads, taken first come, first
    served (an ``asyncio.Semaphore`` that can also say whether anyone waits, and hand a slot
    over without waiting).

    With ``steal_min`` set, a slot that frees while nobody waits for one and no download of the
    prefetcher waits to start (``idle()``) is not left idle: the running GET with the most bytes
    left, of an object someone waits for (``urgent(tag)`` of its download's ``Streams.tag``),
    gives the second half of them to a new GET in that slot, when that half is at least
    ``steal_min`` bytes (work stealing). A download's split is decided when it starts; at the
    tail of an epoch the last shards start while many GETs still run, so each gets one GET, and
    without stealing the slots those running GETs free would idle until the last shard is in.

    Only a GET someone waits for is split: a split costs a request, and the bytes the cut GET
    had in flight past its cut are sent for nothing. A download that nobody waits for yet
    gains nothing from ending sooner, and when the store or the machine, not each connection,
    bounds the rate, the split only shares that bound among more GETs."""

    def __init__(
        self,
        n: int,
        *,
        steal_min: int = 0,
        idle: Callable[[], bool] | None = None,
        urgent: Callable[[object], bool] | None = None,
    ) -> None:
        self.free = n
        self.steal_min = steal_min  # 0: never split a running GET
        self._idle = idle
        self._urgent = urgent  # None: every running GET may be split
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.lanes: set[_Lane] = set()  # the running GETs that may be split (steal_min set)
        self.steals = 0  # GETs split so far

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.done())

    def take(self) -> bool:
        """A slot now, without waiting, if one is free and nobody waits for it."""
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return True
        return False

    async def acquire(self) -> None:
        if self.take():
            return
        w = asyncio.get_running_loop().create_future()
        self._waiters.append(w)
        try:
            await w
        except asyncio.CancelledError:
            if w.done() and not w.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            raise
        finally:
            if w in self._waiters:
                self._waiters.remove(w)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def release(self) -> None:
        """Hand the slot to the first waiter, or keep it free."""
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return
        self.free += 1

    def freed(self) -> None:
        """A GET ended and released its slot, or someone began to wait for a download: split
        the longest running GET of an awaited object into a free slot that would idle (see the
        class)."""
        if not self.steal_min or not self.lanes or (self._idle is not None and not self._idle()):
            return
        urgent = self._urgent
        lanes = [x for x in self.lanes if urgent is None or urgent(x.gets.tag)]
        if not lanes:
            return
        lane = max(lanes, key=_Lane.left)
        if lane.left() < 2 * self.steal_min or not self.take():
            return
        self.steals += 1
        lane.split()


@dataclass(frozen=True)
class Streams:
    """How a prefetched object is read: in ``split`` near-equal ranged GETs (at least one),
    each holding one of ``slots`` (its prefetcher's, shared by all its downloads) while it
    runs. The prefetcher chooses ``split`` (see ``Prefetcher``); the slots bound the GETs one
    prefetcher runs at once, whatever the shard size, and may split a running GET later."""

    split: int
    slots: Slots
    tag: object = None  # what the slots' ``urgent`` is asked about this object's GETs


class Gets:
    """The ranged GETs of one object into its temporary file: the parts it was given at the
    start, and any later half of a running GET its slots hand to a new one (``Slots.freed``).
    The first error cancels the rest and is raised."""

    def __init__(
        self,
        stats: Stats,
        store: ObjectStore,
        key: str,
        url: str,
        fd: int,
        slots: Slots,
        etag: str | None,
        seen: list[str] | None,
        remote: str,
        tag: object = None,
    ) -> None:
        self.stats, self.store, self.key, self.url, self.fd = stats, store, key, url, fd
        self.slots, self.etag, self.seen, self.remote = slots, etag, seen, remote
        self.tag = tag  # see Streams.tag
        self.stream = getattr(store, "stream_range", None)
        self.tasks: list[asyncio.Task[None]] = []
        self.stopping = False  # failed or cancelled: none of its GETs is split any more

    async def run(self, parts: list[tuple[int, int, int]]) -> None:
        for start, end, at in parts:
            self.tasks.append(asyncio.ensure_future(self._part(start, end, at, False)))
        try:
            while True:  # tasks grow while this waits (a running GET's half, split off)
                pending = [t for t in self.tasks if not t.done()]
                if not pending:
                    break
                await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
                for t in self.tasks:
                    if t.done() and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
        except BaseException:
            self.stopping = True
            self.slots.lanes.difference_update([x for x in self.slots.lanes if x.gets is self])
            for t in self.tasks:
                t.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)
            raise

    def split_off(self, start: int, end: int) -> None:
        """Read ``[start, end)`` (its offsets in the file too) in a new GET, in a slot already
        taken for it (released when the GET ends, or if its task never starts)."""
        handed = [True]  # the slot is the task's to release once it runs
        t = asyncio.ensure_future(self._part(start, end, start, True, handed))
        self.tasks.append(t)

        def unstarted(_t: asyncio.Task[None]) -> None:
            if handed[0]:
                self.slots.release()

        t.add_done_callback(unstarted)

    async def _part(
        self, start: int, end: int, at: int, held: bool, handed: list[bool] | None = None
    ) -> None:
        slots = self.slots
        if handed is not None:
            handed[0] = False
        if not held:
            await slots.acquire()
        lane: _Lane | None = None
        try:
            store, key, etag, seen = self.store, self.key, self.etag, self.seen
            if self.stream is None:  # a store without streaming: whole part, then write
                if etag is None:
                    data = await store.get_range(key, start, end, seen=seen)
                else:
                    data = await store.get_range(key, start, end, etag=etag)
                got, want = len(data), end - start
                if got == want:
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(None, pwrite_all, self.fd, data, at)
            else:
                sink = _FileSink(self.fd, at, at + end - start, self.url)
                if slots.steal_min and at == start and not self.stopping:
                    # file offsets are the object's (a whole object): a half splits off as is
                    lane = _Lane(sink, self)
                    slots.lanes.add(lane)
                try:
                    got = await self.stream(key, start, end, sink, etag=etag, seen=seen)
                except _Cut:
                    got = sink.limit - at  # written up to the cut: the rest is another GET's
                want = sink.limit - at
            self.stats.range_requests += 1
            if got != want:
                raise FormatError(
                    f"object is shorter than the index says: got {got} bytes for range "
                    f"{start}-{start + want}",
                    self.url,
                )
            self.stats.add_bytes(self.remote, got)
        finally:
            if lane is not None:
                slots.lanes.discard(lane)
            slots.release()
            slots.freed()


def fixed_parts(ranges: tuple[tuple[int, int], ...], part_size: int) -> list[tuple[int, int, int]]:
    """(start, end, offset in the file) of each ranged GET: every range of the object, split
    into ``part_size`` pieces, written one after the other."""
    out = []
    at = 0
    for lo, hi in ranges:
        for s in range(lo, hi, part_size):
            e = min(s + part_size, hi)
            out.append((s, e, at))
            at += e - s
    return out


def even_parts(size: int, n: int) -> list[tuple[int, int, int]]:
    """(start, end, offset in the file) of ``n`` ranged GETs of near-equal length covering
    ``size`` bytes (fewer when ``size`` is smaller than ``n``; none for an empty object)."""
    n = max(1, min(n, size))
    cuts = [size * i // n for i in range(n + 1)]
    return [(cuts[i], cuts[i + 1], cuts[i]) for i in range(n) if cuts[i + 1] > cuts[i]]


class _Cut(Exception):
    """A GET reached the offset where its range was cut (``Slots.freed``): the rest of its
    body is another GET's."""


class _FileSink:
    """Writes a ranged GET's chunks into the temporary file as they arrive, each at its offset
    (one ``pwrite`` per socket chunk, on the loop thread: a copy into the page cache, no
    thread hand-off). Refuses bytes past ``stop``: a server that sent more than the range.
    ``limit`` (``stop`` until the GET is split) is where this GET's bytes end: reaching a
    lowered limit raises :class:`_Cut`, which ends the GET."""

    __slots__ = ("at", "fd", "limit", "stop", "url")

    def __init__(self, fd: int, at: int, stop: int, url: str) -> None:
        self.fd, self.at, self.stop, self.url = fd, at, stop, url
        self.limit = stop

    def __call__(self, chunk: bytes) -> None:
        at, limit = self.at, self.limit
        if at + len(chunk) > limit:
            if limit == self.stop:
                raise FormatError(
                    f"the server sent more than the {self.stop - at} bytes left of the range",
                    self.url,
                )
            chunk = memoryview(chunk)[: limit - at]  # type: ignore[assignment]
        pwrite_all(self.fd, chunk, at)
        self.at = at = at + len(chunk)
        if at == limit < self.stop:
            raise _Cut


class _Lane:
    """A running GET that may be split: its sink (where it is, where it stops) and the GETs of
    its object, which start the split-off half."""

    __slots__ = ("gets", "sink")

    def __init__(self, sink: _FileSink, gets: Gets) -> None:
        self.sink, self.gets = sink, gets

    def left(self) -> int:
        return self.sink.limit - self.sink.at

    def split(self) -> None:
        """This GET stops halfway through what it has left; a new GET reads the rest."""
        sink = self.sink
        mid = sink.at + (sink.limit - sink.at) // 2
        end, sink.limit = sink.limit, mid
        self.gets.split_off(mid, end)


def pwrite_all(fd: int, data: bytes, offset: int) -> None:
    """Write all of ``data`` at ``offset``. A nearly full disk makes ``pwrite`` write only part
    (its return value): ignoring it left a hole in a file of the right size -- zeros served as
    shard bytes, or SIGBUS reading the map on tmpfs. The next call raises ENOSPC instead."""
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view = view[n:]
        offset += n
