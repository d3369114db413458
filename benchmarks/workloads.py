"""The benchmark workloads: deterministic samples, generated once, read by every writer.

Theory of operation
-------------------
A workload is a list of samples ``{"id": int, "label": int, "payload": ...}``:

- ``tokens``: payload is a ``uint16`` array of length uniform in [512, 2048] (MDS column
  ``ndarray:uint16``); 200,000 samples at scale 1.
- ``tokens-zstd``: the same samples, written with zstd level 3 compression.
- ``images``: payload is 80-120 KB of incompressible bytes (MDS column ``bytes``); 20,000
  samples at scale 1.

``materialize`` generates a workload once from ``(seed, workload)`` with numpy's PCG64 and
stores it as a *source*: ``payload.bin`` (every payload back to back), ``offsets.npy`` and
``labels.npy``. Every library's writer then reads sample ``i`` from that source by slicing a
memory map, so writing is timed without generation and all libraries write identical bytes.
This module needs only numpy: it is imported by the peers' runners in their own venv too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

SHARD_BYTES_FULL = 1 << 26  # 64 MiB: the shard/chunk target of every library at scale 1
MIN_SHARD_BYTES = 1 << 20


@dataclass(frozen=True)
class Workload:
    name: str
    base_samples: int
    compression: str | None
    payload_kind: str  # "tokens" (uint16 array) or "bytes"

    def samples(self, scale: float) -> int:
        return max(16, round(self.base_samples * scale))


WORKLOADS: dict[str, Workload] = {
    "tokens": Workload("tokens", 200_000, None, "tokens"),
    "tokens-zstd": Workload("tokens-zstd", 200_000, "zstd:3", "tokens"),
    "images": Workload("images", 20_000, None, "bytes"),
}


def shard_bytes(scale: float) -> int:
    """The shard/chunk size target: 64 MiB at scale 1, scaled down (never under 1 MiB)."""
    return max(MIN_SHARD_BYTES, min(SHARD_BYTES_FULL, int(SHARD_BYTES_FULL * scale)))


def mds_columns(workload: Workload) -> dict[str, str]:
    payload = "ndarray:uint16" if workload.payload_kind == "tokens" else "bytes"
    return {"id": "int", "label": "int", "payload": payload}


def source_dir(root: Path, workload: Workload) -> Path:
    # tokens and tokens-zstd share their samples
    return root / ("tokens" if workload.payload_kind == "tokens" else workload.name)


def materialize(root: Path, workload: Workload, scale: float, seed: int) -> Path:
    """Generate the workload's source under ``root`` unless an identical one exists."""
    out = source_dir(root, workload)
    n = workload.samples(scale)
    meta = {"seed": seed, "samples": n, "kind": workload.payload_kind}
    meta_path = out / "meta.json"
    if meta_path.exists() and json.loads(meta_path.read_text()) == meta:
        return out
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.Generator(
        np.random.PCG64([seed, 1 if workload.payload_kind == "tokens" else 2])
    )
    if workload.payload_kind == "tokens":
        sizes = rng.integers(512, 2049, size=n, dtype=np.int64) * 2
    else:
        sizes = rng.integers(80_000, 120_001, size=n, dtype=np.int64)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    labels = rng.integers(0, 1000, size=n, dtype=np.int64)
    with open(out / "payload.bin", "wb") as f:
        chunk = 1 << 24
        for start in range(0, int(offsets[-1]), chunk):
            size = min(chunk, int(offsets[-1]) - start)
            if workload.payload_kind == "tokens":
                f.write(rng.integers(0, 50_000, size=size // 2, dtype=np.uint16).tobytes())
            else:
                f.write(rng.bytes(size))
    np.save(out / "offsets.npy", offsets)
    np.save(out / "labels.npy", labels)
    meta_path.write_text(json.dumps(meta))
    return out


class Source:
    """Read access to a materialized workload: ``source[i]`` is sample ``i``."""

    def __init__(self, path: Path | str, payload_kind: str) -> None:
        path = Path(path)
        self.offsets = np.load(path / "offsets.npy")
        self.labels = np.load(path / "labels.npy")
        self.payload = np.memmap(path / "payload.bin", dtype=np.uint8, mode="r")
        self.kind = payload_kind

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def total_payload_bytes(self) -> int:
        return int(self.offsets[-1])

    def payload_of(self, i: int) -> Any:
        raw = self.payload[int(self.offsets[i]) : int(self.offsets[i + 1])]
        if self.kind == "tokens":
            return np.array(raw.view(np.uint16))
        return raw.tobytes()

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"id": int(i), "label": int(self.labels[i]), "payload": self.payload_of(i)}


def synthetic_shard_layout(num_shards: int, min_samples: int) -> tuple[int, int]:
    """(shards, samples per shard) for the index-only scale scenario."""
    per_shard = math.ceil(min_samples / num_shards)
    return num_shards, per_shard
