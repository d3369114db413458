"""Async iteration for asyncio programs: the same engine and order, without stalling the loop.

``AsyncStreamingDataset`` takes the same arguments as ``StreamingDataset`` and needs no torch
(importing this module, building a dataset and iterating it never import torch)::

    ds = await AsyncStreamingDataset.open(remote="s3://bucket/tokens", local="/tmp/tokens",
                                          batch_size=32)
    async for sample in ds.aiter():
        ...
    async for batch in ds.aiter(batch_size=32):
        ...
    sample = await ds.aget(123)
    samples = await ds.aget_many([5, 17, 99])

``open`` does the constructor's I/O (index fetch and revalidation, SDK clients) on the calling
loop, cancellable, bounded by ``download_timeout`` x ``download_retry``; the plain constructor
does the same I/O blocking, on astream's I/O thread. The checks that plan epoch 0 run in a
thread during ``open``, so a large dataset never holds the loop. ``astream.StreamingDataset``
has the same ``aiter``/``aget``/``aget_many`` methods. See docs/async.md for what runs where.
"""

from __future__ import annotations

import asyncio
from typing import Any

from astream.dataset import StreamingCore
from astream.runtime.resolve import CpuStep
from astream.runtime.stores import close_loop_stores_since, loop_store_keys
from astream.storage.registry import preload_backends
from astream.writer.aio import AsyncMDSWriter

__all__ = ["AsyncMDSWriter", "AsyncStreamingDataset"]


def _preload(urls: list[Any]) -> None:
    """The modules a build imports on first use (its remotes' backends), imported here in a
    thread rather than on the caller's loop."""
    preload_backends(urls)


class AsyncStreamingDataset(StreamingCore):
    """The torch-free dataset for asyncio programs (arguments: ``StreamingDataset``'s)."""

    @classmethod
    async def open(cls, **kwargs: Any) -> AsyncStreamingDataset:
        """Build the dataset with its I/O awaited on the running loop (never blocking it)."""
        self = cls.__new__(cls)
        urls = [kwargs.get("remote")]
        urls += [getattr(s, "remote", None) for s in kwargs.get("streams") or ()]
        await asyncio.to_thread(_preload, urls)  # an SDK's import: tens of ms
        steps = self._build(cls._arguments(kwargs))
        before = loop_store_keys()
        try:
            step = next(steps)
            while True:
                if isinstance(step, CpuStep):
                    got = await asyncio.to_thread(step.run)  # planning: seconds at 10M samples
                else:
                    got = await step
                try:
                    step = steps.send(got)
                except StopIteration:
                    return self
        except BaseException:
            steps.close()
            # failed or cancelled: no dataset reaches the caller, so nothing could ever close
            # the connections this open made on the caller's loop (aiohttp would report an
            # unclosed session when the loop goes)
            await close_loop_stores_since(before)
            raise
