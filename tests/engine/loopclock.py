"""The loop clock of tests/engine/test_loop_bound.py, importable without pytest (the
ten-million-sample check runs it in a fresh interpreter)."""

from __future__ import annotations

import asyncio
import time
from asyncio import events
from collections.abc import Awaitable, Callable
from typing import Any

from astream.aio import AsyncStreamingDataset


def longest(main: Callable[[], Awaitable[int]], expect: int) -> float:
    """The most CPU time one loop callback took while ``main`` ran (it returns a count)."""
    longest = [0.0]
    run = events.Handle._run

    def timed(self: Any) -> None:
        start = time.thread_time()
        try:
            run(self)
        finally:
            longest[0] = max(longest[0], time.thread_time() - start)

    events.Handle._run = timed  # type: ignore[method-assign]
    try:
        assert asyncio.run(main()) == expect
    finally:
        events.Handle._run = run  # type: ignore[method-assign]
    return longest[0]


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
