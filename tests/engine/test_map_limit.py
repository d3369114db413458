"""``astream.runtime.batch.MAP_LIMIT``: column batches read the values of shards opened past
that many bytes of mapped shards with ``preadv`` (``OpenShard.by_copy``), so an order that
reads every shard all epoch long (py1e at the reference's block) keeps at most the limit of
shard pages mapped in the process, as /proc/self/smaps shows during a real iteration; the
batches are the same as through the map, on the lean path (``offsets``) and the general one
(``pad``)."""

from __future__ import annotations

import json
import mmap
import os
from typing import Any

import numpy as np
import pytest

import astream.runtime.batch as batch_mod
from astream import MDSWriter, StreamingDataset

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps"), reason="reads the process's mappings from /proc"
)

SHARDS, PER_SHARD, SIZE = 8, 128, 2000  # ~2 KB samples, each shard ~260 KB


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], int]:
    root = str(tmp_path_factory.mktemp("maplimit") / "ds")
    limit = 4 + PER_SHARD * (SIZE + 20)  # a sample: SIZE + 16 bytes, its offset 4
    rng = np.random.default_rng(7)
    with MDSWriter(out=root, columns={"id": "int", "payload": "bytes"}, size_limit=limit) as w:
        for i in range(SHARDS * PER_SHARD):
            n = int(rng.integers(SIZE // 2, SIZE))
            w.write({"id": i, "payload": rng.integers(0, 256, n, dtype=np.uint8).tobytes()})
    with open(os.path.join(root, "index.json")) as f:
        counts = [sh["samples"] for sh in json.load(f)["shards"]]
    assert len(counts) >= 6
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".mds"))
    return root, files, max(os.path.getsize(f) for f in files)


def _mapped_bytes(files: list[str]) -> int:
    """Resident bytes of this process's mappings of ``files``."""
    want = {os.path.realpath(f) for f in files}
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                ours = len(head) > 5 and head[5] in want
            elif ours and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def _epoch(root: str, files: list[str], ragged: str) -> tuple[list[dict[str, Any]], int]:
    """One py1e epoch of column batches (copied out) and the most shard bytes mapped."""
    ds = StreamingDataset(
        local=root, shuffle=True, shuffle_seed=3, shuffle_algo="py1e", batch_size=16
    )
    out, most = [], 0
    for b in ds.batches(ragged=ragged):
        out.append({k: np.array(v, copy=True) for k, v in b.items()})
        most = max(most, _mapped_bytes(files))
    return out, most


@pytest.mark.parametrize("ragged", ["offsets", "pad"])
def test_map_limit_bounds_mapped_shards(
    shards: tuple[str, list[str], int], ragged: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, files, size = shards
    monkeypatch.setattr(batch_mod, "MAP_LIMIT", None)
    want, most = _epoch(root, files, ragged)
    assert most > 4 * size  # through the map, every shard stays mapped all epoch
    monkeypatch.setattr(batch_mod, "MAP_LIMIT", 2 * size)
    got, most = _epoch(root, files, ragged)
    page = mmap.PAGESIZE
    assert most <= 2 * -(-size // page) * page, (most, size)  # two shards at most
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            assert np.array_equal(g[k], w[k]), k
