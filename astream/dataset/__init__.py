"""``StreamingCore``: the dataset logic shared by the torch ``StreamingDataset`` and asyncio
users, torch-free (see :mod:`astream.dataset.core`)."""

from astream.dataset.core import StreamingCore
from astream.dataset.iteration import _skip

__all__ = ["StreamingCore", "_skip"]
