"""astream: stream MDS training data from object storage into PyTorch, asyncio-native.

Public names are imported lazily so that ``import astream`` stays cheap and never pulls in
torch or a cloud SDK until it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS: dict[str, str] = {
    "MDSWriter": "astream.writer.mds",
    **{w: "astream.writer.xsv" for w in ("JSONWriter", "CSVWriter", "TSVWriter", "XSVWriter")},
    "merge_index": "astream.writer.merge",
    "LocalDataset": "astream.local",
    "Stream": "astream.stream",
    "StreamingDataset": "astream.torch.dataset",
    "StreamingDataLoader": "astream.torch.dataloader",
    "AsyncStreamingDataset": "astream.aio",
}

__all__ = [*sorted(_EXPORTS), "__version__"]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'astream' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
