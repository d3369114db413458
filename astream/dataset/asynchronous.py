"""``StreamingCore`` on the caller's asyncio loop: ``aiter`` (samples or lists of them), ``aget``
and ``aget_many`` (random access), with :class:`_Warmer` computing the shuffle blocks an async
iteration reads next in a thread, off the loop."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any

import numpy as np

from astream.dataset.iteration import _recorded
from astream.errors import ConfigError
from astream.runtime.catalog import Catalog
from astream.runtime.config import DatasetConfig
from astream.runtime.engine import Engine
from astream.runtime.placement import detect

SLICE_S = 0.002  # the longest astream keeps the caller's loop on hot data (see aiter)


class _Warmer:
    """Computes the shuffle blocks an async iteration will read next, in a thread, before it
    reads them: a block's permutation (up to 2**20 samples: ~40-80 ms of numpy) would
    otherwise be computed on the caller's loop when the first sample of the block is due."""

    def __init__(self, ds: _AsyncAccess, epoch: int, start: int) -> None:
        self.plan = ds.plan(epoch)
        self.ranks = detect(ds.cfg.replication).world.num_ranks
        ncn = self.plan.num_canonical_nodes
        self.width = ncn  # positions p..p+ncn-1 touch every canonical node once
        self.step = max(1, self.plan.block_size * ncn)  # global positions per block, all nodes
        self.ahead = ds.engine.ahead * self.ranks  # the engine plans that far ahead of us
        self.pos = start
        self.next_at = start
        self.task: asyncio.Future[None] | None = None

    def advance(self, n: int) -> None:
        """The consumer took ``n`` more samples: warm, block by block, every block up to one
        block past what the engine's lookahead may plan next."""
        self.pos += n * self.ranks
        if self.task is not None and not self.task.done():
            return
        target = min(self.pos + self.ahead + self.step, self.plan.num_samples - self.width)
        if target >= self.next_at:
            lo, self.next_at = self.next_at, target + 1
            self.task = asyncio.ensure_future(asyncio.to_thread(self._warm, lo, target))

    def _warm(self, lo: int, hi: int) -> None:
        try:
            for p in range(lo, hi + 1, self.step):
                self.plan.global_ids(p, p + self.width)
            self.plan.global_ids(hi, hi + self.width)
        except Exception:  # only a cache warm-up: the reader computes what it needs anyway
            pass


class _AsyncAccess:
    """The part of ``StreamingCore`` that serves coroutines."""

    # set by StreamingCore._build, or its other parts
    cfg: DatasetConfig
    catalog: Catalog
    engine: Engine
    transform: Callable[[Any], Any] | None
    _current: tuple[int, int]
    plan: Callable[[int], Any]
    _plan_and_warm: Callable[[int, int], None]
    _next_position: Callable[[], tuple[int, int]]
    _start_iteration: Callable[[], tuple[Iterator[np.ndarray[Any, Any]], list[int]]]
    _has_override: Callable[[], bool]
    _set_batch_size: Callable[[int | None], None]
    _through: Callable[[int, Any], Any]

    async def aiter(
        self,
        batch_size: int | None = None,
        *,
        collate: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = False,
        io: str = "thread",
    ) -> AsyncIterator[Any]:
        """``async for sample in ds.aiter()``: the next epoch on the caller's loop, in the order
        the synchronous path gives with ``num_workers=0`` (through a subclass's ``__getitem__``
        or ``get_item`` override and ``transform``, as iteration is).

        ``batch_size``: yield lists of that many consecutive samples instead (the last one
        shorter unless ``drop_last``), passed through ``collate`` if given; a dataset built
        without ``batch_size`` plans with this one. The loop is given back at least once per
        planned batch and whenever about 2 ms have passed since astream last gave it back.
        ``io``: where downloads run (see :meth:`astream.runtime.engine.Engine.aiter_batches`):
        ``"thread"`` (default; astream's I/O thread, so they go on while a synchronous step
        blocks the loop) or ``"loop"`` (the caller's loop, no astream I/O thread). Planning and
        the shuffle blocks are computed in the loop's default executor either way.
        """
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
            if self.cfg.batch_size is None:
                self._set_batch_size(batch_size)
        if collate is not None and batch_size is None:
            raise ConfigError("collate needs batch_size: it is applied to each batch")
        if io not in ("thread", "loop"):  # before the epoch is taken
            raise ConfigError(f"io must be 'thread' or 'loop', got {io!r}")
        # planning an epoch is numpy work proportional to the shards (tens of ms on large
        # datasets): done in a thread, the loop is free meanwhile
        await asyncio.to_thread(self._plan_and_warm, *self._next_position())
        batches, progress = self._start_iteration()
        warm = _Warmer(self, *self._current) if self.cfg.shuffle else None
        override = self._has_override()
        ids: collections.deque[int] = collections.deque()
        if override:
            batches = _recorded(batches, ids)
        transform = self.transform
        source = self.engine.aiter_batches(batches, io=io)
        clock = time.perf_counter
        buf: list[Any] = []
        try:
            async for out in source:
                if warm is not None:
                    warm.advance(len(out))
                if override:
                    out = [self._through(ids.popleft(), x) for x in out]
                elif transform is not None:
                    out = [transform(x) for x in out]
                if batch_size is not None:
                    buf.extend(out)
                    at, mark = 0, clock()
                    while len(buf) - at >= batch_size:
                        # slices by index: re-slicing the rest each time is quadratic in a
                        # planned batch many times ``batch_size``
                        batch = buf[at : at + batch_size]
                        at += batch_size
                        progress[0] += batch_size
                        yield batch if collate is None else collate(batch)
                        if clock() - mark > SLICE_S:
                            await asyncio.sleep(0)
                            mark = clock()
                    del buf[:at]
                    continue
                mark = clock()
                for k, x in enumerate(out, 1):
                    progress[0] += 1
                    yield x
                    if not k & 31 and clock() - mark > SLICE_S:
                        await asyncio.sleep(0)
                        mark = clock()
            if buf and not drop_last:
                progress[0] += len(buf)
                yield buf if collate is None else collate(buf)
        finally:
            await source.aclose()

    async def aclose(self) -> None:
        """Close the connections ``io="loop"`` reads opened on the running loop."""
        await self.engine.aclose()

    async def aiter_batches(self) -> AsyncIterator[list[Any]]:
        """Like :meth:`aiter`, grouped into the planned per-device batches (lists)."""
        async for batch in self.aiter(self.cfg.batch_or_1):
            yield batch

    async def aget(self, index: int, *, io: str = "thread") -> Any:
        """``ds[index]`` for a coroutine: the read (a cached map, or two ranged GETs) runs on
        astream's I/O thread (``io="thread"``) or on the caller's loop (``io="loop"``); the
        loop is never blocked."""
        n = self.catalog.num_samples
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__}")
        i = int(index) + (n if int(index) < 0 else 0)
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for {n} samples")
        if io == "thread":
            from astream import bridge

            x = await asyncio.wrap_future(bridge.submit(self.engine.aget(i)))
        elif io == "loop":
            x = await self.engine.aget(i)
        else:
            raise ConfigError(f"io must be 'thread' or 'loop', got {io!r}")
        return self._through(i, x) if self._has_override() or self.transform is not None else x

    async def aget_many(
        self, indices: Iterable[int], *, concurrency: int = 16, io: str = "thread"
    ) -> list[Any]:
        """Samples ``indices``, in that order, read ``concurrency`` at a time."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        ids = [int(i) for i in indices]
        out: list[Any] = [None] * len(ids)
        todo = iter(range(len(ids)))

        # ``concurrency`` readers taking the next index in turn: a task per reader, not per
        # index (2,000 tasks made in one go held the caller's loop for tens of ms)
        async def reader() -> None:
            for k in todo:
                out[k] = await self.aget(ids[k], io=io)

        tasks = [asyncio.ensure_future(reader()) for _ in range(min(concurrency, len(ids)))]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            for t in tasks:
                t.cancel()  # the first error ends the call: no reader goes on in the background
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return out
