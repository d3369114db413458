"""The loop clock of tests/engine/test_loop_bound.py, importable without pytest (the
ten-million-sample checks run it in a fresh interpreter)."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from asyncio import events
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from astream.aio import AsyncStreamingDataset


@dataclass
class Clock:
    """What one run of ``main`` cost the loop, in CPU time (``time.thread_time``).

    ``own``: the longest loop callback, less the garbage collections that ran inside it. A
    collection runs in whichever callback allocates past the collector's threshold, and a full
    one scans every object of the process, so its length is the process's, not the callback's:
    it is counted apart. ``full``: the full collections that ran, in any thread. ``pause``:
    the longest of them."""

    own: float
    full: int
    pause: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def longest(main: Callable[[], Awaitable[int]], expect: int) -> Clock:
    """Run ``main`` (it returns a count, which must be ``expect``) and clock the loop."""
    own = [0.0]
    in_gc = [0.0]  # collections in the loop's thread during the current callback
    full: list[float] = []
    started: dict[int, float] = {}
    loop_thread = threading.get_ident()
    run = events.Handle._run

    def timed(self: Any) -> None:
        in_gc[0] = 0.0
        start = time.thread_time()
        try:
            run(self)
        finally:
            own[0] = max(own[0], time.thread_time() - start - in_gc[0])

    def collecting(phase: str, info: dict[str, int]) -> None:
        me = threading.get_ident()
        if phase == "start":
            started[me] = time.thread_time()
            return
        took = time.thread_time() - started.pop(me, time.thread_time())
        if me == loop_thread:
            in_gc[0] += took
        if info["generation"] == 2:
            full.append(took)

    events.Handle._run = timed  # type: ignore[method-assign]
    gc.callbacks.append(collecting)
    try:
        assert asyncio.run(main()) == expect
    finally:
        gc.callbacks.remove(collecting)
        events.Handle._run = run  # type: ignore[method-assign]
    return Clock(own=own[0], full=len(full), pause=max(full, default=0.0))


def hot_epoch(path: str, **kw: Any) -> Callable[[], Awaitable[int]]:
    async def main() -> int:
        # planned batches of 25,000 samples: decoding one takes far longer than the bound, so
        # only the slicing within a batch keeps each callback short
        ds = await AsyncStreamingDataset.open(local=path, batch_size=25_000, shuffle=True, **kw)
        got = 0
        async for batch in ds.aiter(batch_size=64):
            got += len(batch)
            if got == 64 * 1_000:
                ds.state_dict()  # a checkpoint mid-epoch
        ds.state_dict()
        return got

    return main


def cold_epoch(
    remote: str, local: str, picks: list[int] | None = None, every: int = 5_000
) -> Callable[[], Awaitable[int]]:
    """``open`` (in a fresh interpreter: the store's SDK imported then), ``aget_many(picks)``,
    a shuffled epoch with every shard downloaded during it, and a checkpoint every ``every``
    batches; returns the samples read."""

    async def main() -> int:
        ds = await AsyncStreamingDataset.open(
            remote=remote, local=local, batch_size=25_000, shuffle=True
        )
        got = len(await ds.aget_many(picks)) if picks else 0
        async for batch in ds.aiter(batch_size=64):
            got += len(batch)
            if got % (64 * every) == 0:
                ds.state_dict()
        ds.state_dict()
        return got

    return main
