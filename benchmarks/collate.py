"""The one collate function every library's loader uses, so only the loaders differ.

ids and labels become int64 tensors; the payloads (``uint16`` arrays or bytes) are copied
once into one flat ``uint8`` tensor, with int64 ``offsets`` (``len(batch) + 1``) to cut it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def _as_u8(payload: Any) -> np.ndarray:
    if isinstance(payload, np.ndarray):
        return np.ascontiguousarray(payload).reshape(-1).view(np.uint8)
    if isinstance(payload, torch.Tensor):
        return payload.contiguous().view(-1).view(torch.uint8).numpy()
    return np.frombuffer(payload, dtype=np.uint8)


def collate(batch: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
    views = [_as_u8(s["payload"]) for s in batch]
    offsets = np.zeros(len(views) + 1, dtype=np.int64)
    np.cumsum([v.size for v in views], out=offsets[1:])
    payload = torch.empty(int(offsets[-1]), dtype=torch.uint8)
    out = payload.numpy()
    for v, start in zip(views, offsets[:-1]):
        out[start : start + v.size] = v
    return {
        "id": torch.tensor([int(s["id"]) for s in batch], dtype=torch.int64),
        "label": torch.tensor([int(s["label"]) for s in batch], dtype=torch.int64),
        "payload": payload,
        "offsets": torch.from_numpy(offsets),
    }
