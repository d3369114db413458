"""Async iteration for asyncio trainers: the same engine and order, on the caller's loop.

``AsyncStreamingDataset`` takes the same arguments as ``StreamingDataset`` and needs no torch::

    ds = AsyncStreamingDataset(remote="s3://bucket/tokens", local="/tmp/tokens", batch_size=32)
    async for sample in ds.aiter():
        ...
    sample = await ds.aget(123)

``astream.StreamingDataset`` has the same ``aiter``/``aiter_batches``/``aget`` methods.
"""

from __future__ import annotations

from astream.dataset import StreamingCore as AsyncStreamingDataset

__all__ = ["AsyncStreamingDataset"]
