"""``StreamingDataset``: astream's dataset as a torch ``IterableDataset``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import IterableDataset

from astream.dataset import StreamingCore

__all__ = ["StreamingDataset"]


def _to_torch(batch: dict[str, Any]) -> dict[str, Any]:
    """numpy columns -> tensors sharing their memory (``str`` columns stay numpy arrays)."""
    return {k: v if v.dtype.kind in "US" else torch.from_numpy(v) for k, v in batch.items()}


class StreamingDataset(StreamingCore, IterableDataset):  # type: ignore[type-arg,misc]
    """Stream MDS samples from ``remote`` (cached under ``local``) into a torch DataLoader.

    Same arguments as mosaicml-streaming's ``StreamingDataset`` (see docs/migrating.md).
    Use :class:`astream.StreamingDataLoader` to get exact mid-epoch resumption.
    """

    def _batch_converter(self, batch_format: str) -> Callable[[dict[str, Any]], Any]:
        if batch_format == "torch":
            return _to_torch
        return super()._batch_converter(batch_format)

    def batch_view(
        self,
        batch_format: str = "torch",
        *,
        ragged: str = "pad",
        drop_last: bool = False,
        shared_memory: bool = True,
        ring: int = 4,
    ) -> Any:
        """This dataset as an ``IterableDataset`` of whole planned batches, for a plain
        ``DataLoader(view, batch_size=None, num_workers=N)``: workers build each batch in a
        ring of ``ring`` shared-memory slots and hand over a handle (``shared_memory=False``:
        torch's own pickling instead). See docs/batches.md."""
        if self.pack is not None:  # pack_to: batches of packed sequences
            from astream.packing import check_batches
            from astream.torch.pack_loader import PackView

            size = check_batches(self, None, ragged)
            self._batch_converter(batch_format)
            return PackView(self, size, batch_format, drop_last, False, shared_memory, ring)
        from astream.torch.batches import BatchDataset

        return BatchDataset(self, batch_format, ragged, drop_last, shared_memory, ring)
