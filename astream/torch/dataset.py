"""``StreamingDataset``: astream's dataset as a torch ``IterableDataset``."""

from __future__ import annotations

from torch.utils.data import IterableDataset

from astream.dataset import StreamingCore

__all__ = ["StreamingDataset"]


class StreamingDataset(StreamingCore, IterableDataset):  # type: ignore[type-arg,misc]
    """Stream MDS samples from ``remote`` (cached under ``local``) into a torch DataLoader.

    Same arguments as mosaicml-streaming's ``StreamingDataset`` (see docs/migrating.md).
    Use :class:`astream.StreamingDataLoader` to get exact mid-epoch resumption.
    """
