"""The reader releases the mapped pages of a shard once its lookahead holds no batch that reads
it (``Lookahead(idle=...)`` -> ``ShardOpener.idle``): an epoch's finished shards stop counting
in the process's memory (RSS/PSS) while they stay open, and the samples read from them -- even
those still held by the caller -- keep their bytes."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataset

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps"), reason="reads the process's mappings from /proc"
)

SHARDS, PER_SHARD, SIZE = 8, 48, 8192  # each shard ~400 KB: ~100 pages


def _payload(i: int) -> bytes:
    return np.random.default_rng(i).integers(0, 256, SIZE, dtype=np.uint8).tobytes()


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    root = str(tmp_path_factory.mktemp("pages") / "ds")
    # a sample takes SIZE + 16 bytes (4 offset, 8 id, 4 length); the header 4 + 4 per sample
    limit = 4 + PER_SHARD * (SIZE + 20)
    with MDSWriter(out=root, columns={"id": "int", "payload": "bytes"}, size_limit=limit) as w:
        for i in range(SHARDS * PER_SHARD):
            w.write({"id": i, "payload": _payload(i)})
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".mds"))
    with open(os.path.join(root, "index.json")) as f:
        counts = [sh["samples"] for sh in json.load(f)["shards"]]
    assert counts == [PER_SHARD] * SHARDS
    return root, files


def _mapped_kb(files: list[str]) -> list[int]:
    """Resident kB of this process's mappings of each file (0: not mapped, or no page)."""
    want = {os.path.realpath(f): k for k, f in enumerate(files)}
    out = [0] * len(files)
    cur = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                cur = want.get(head[5]) if len(head) > 5 else None
            elif cur is not None and head[0] == "Rss:":
                out[cur] += int(head[1])
    return out


def _check(ds: StreamingDataset, files: list[str], rows: Any) -> list[Any]:
    """Walk ``rows`` (one shard-ordered epoch); at each shard's first row, every shard the
    reader finished at least one shard earlier has no resident page mapped."""
    held: list[Any] = []
    before = ds.stats.shard_drops
    for k, row in rows:
        held.append(row)
        if k % PER_SHARD == 0 and k // PER_SHARD >= 2:
            cur = k // PER_SHARD
            mapped = _mapped_kb(files)
            assert mapped[cur] > 0  # the shard being read is mapped (the check can see pages)
            assert mapped[: cur - 1] == [0] * (cur - 1), (cur, mapped)
    # each shard released once, after its last batch (not while later batches still read it)
    assert ds.stats.shard_drops - before == SHARDS, ds.stats.shard_drops - before
    return held


def test_finished_shards_unmapped_dicts(shards: tuple[str, list[str]]) -> None:
    root, files = shards
    ds = StreamingDataset(local=root, shuffle=False, batch_size=8)
    for _ in range(2):  # a second epoch maps the released pages again
        held = _check(ds, files, ((int(s["id"]), s) for s in ds))
        # the samples of released shards still hold their bytes (read back through the map)
        assert [int(s["id"]) for s in held] == list(range(SHARDS * PER_SHARD))
        assert all(bytes(s["payload"]) == _payload(int(s["id"])) for s in held)


def test_finished_shards_unmapped_batches(shards: tuple[str, list[str]]) -> None:
    root, files = shards
    ds = StreamingDataset(local=root, shuffle=False, batch_size=8)

    def rows() -> Any:
        for b in ds.batches(ragged="offsets"):
            ids, pay, off = b["id"], b["payload"], b["payload_offsets"]
            for j in range(len(ids)):
                yield int(ids[j]), (int(ids[j]), bytes(pay[off[j] : off[j + 1]]))

    held = _check(ds, files, rows())
    assert [i for i, _ in held] == list(range(SHARDS * PER_SHARD))
    assert all(p == _payload(i) for i, p in held)


def test_shuffled_epoch_releases_and_reads_exactly(shards: tuple[str, list[str]]) -> None:
    """Shuffled: every sample once with its bytes, and shards were released on the way."""
    root, _ = shards
    ds = StreamingDataset(local=root, shuffle=True, shuffle_seed=3, batch_size=8)
    got = {int(s["id"]): bytes(s["payload"]) for s in ds}
    assert sorted(got) == list(range(SHARDS * PER_SHARD))
    assert all(p == _payload(i) for i, p in got.items())
    assert ds.stats.shard_drops >= 1


@pytest.mark.parametrize("column", ["bytes", "ndarray:uint8"])
def test_large_samples_leave_the_map_once_read(
    tmp_path_factory: pytest.TempPathFactory, column: str
) -> None:
    """Samples of >= 32 KB: their pages are unmapped once decoded (bytes: the values are
    copies) or once their batch is handed out (ndarray: the values are views of the map), so
    a shuffled epoch over shards all read at once never has much of them mapped; the values
    keep their bytes."""
    root = str(tmp_path_factory.mktemp("big") / column.replace(":", "_"))
    n, size = 96, 48 << 10

    def value(i: int) -> Any:
        raw = np.random.default_rng(1000 + i).integers(0, 256, size, dtype=np.uint8)
        return raw.tobytes() if column == "bytes" else raw

    with MDSWriter(
        out=root, columns={"id": "int", "payload": column}, size_limit=24 * (size + 64)
    ) as w:
        for i in range(n):
            w.write({"id": i, "payload": value(i)})
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".mds"))
    assert len(files) >= 4
    ds = StreamingDataset(local=root, shuffle=True, shuffle_seed=5, batch_size=8)
    peak = 0
    held: dict[int, Any] = {}
    for k, s in enumerate(ds):
        held[int(s["id"])] = s["payload"]
        if k % 3 == 0:
            peak = max(peak, sum(_mapped_kb(files)))
    total_kb = n * size // 1024
    # all shards are read at once: without the release, most of the data ends up mapped
    assert peak < total_kb // 4, (peak, total_kb)
    assert sorted(held) == list(range(n))
    for i, v in held.items():
        assert bytes(v) == bytes(value(i))


def test_views_unmapped_after_their_batch(tmp_path_factory: pytest.TempPathFactory) -> None:
    """ndarray values are views of the map: the caller's collate reads them back in, so their
    shards' pages are unmapped again once the batch is handed out (``drop_read``): at each
    batch start only the shard of the sample just read has pages mapped, though each batch
    reads few of the 16 shards."""
    root = str(tmp_path_factory.mktemp("views") / "ds")
    size = 48 << 10
    with MDSWriter(
        out=root, columns={"id": "int", "payload": "ndarray:uint8"}, size_limit=6 * (size + 64)
    ) as w:
        for i in range(96):
            w.write({"id": i, "payload": np.full(size, i % 251, np.uint8)})
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".mds"))
    assert len(files) >= 12
    ds = StreamingDataset(local=root, shuffle=True, shuffle_seed=2, batch_size=4)
    worst = 0
    for k, s in enumerate(ds):
        assert int(s["payload"].sum()) == size * (int(s["id"]) % 251)  # "collate": reads it
        if k % 4 == 0 and k:
            worst = max(worst, sum(1 for kb in _mapped_kb(files) if kb))
    assert worst <= 2, worst


def test_async_iteration_releases_large_samples(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``aiter`` (the asyncio path) unmaps large samples' pages as the sync path does."""
    import asyncio

    from astream.aio import AsyncStreamingDataset

    root = str(tmp_path_factory.mktemp("aio") / "ds")
    size = 48 << 10
    with MDSWriter(
        out=root, columns={"id": "int", "payload": "bytes"}, size_limit=24 * (size + 64)
    ) as w:
        for i in range(96):
            w.write({"id": i, "payload": bytes([i % 251]) * size})
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".mds"))

    async def main() -> tuple[int, list[int]]:
        ds = await AsyncStreamingDataset.open(
            local=root, shuffle=True, shuffle_seed=4, batch_size=8
        )
        peak, ids = 0, []
        async for s in ds.aiter(io="loop"):
            assert s["payload"] == bytes([int(s["id"]) % 251]) * size
            ids.append(int(s["id"]))
            if len(ids) % 3 == 0:
                peak = max(peak, sum(_mapped_kb(files)))
        return peak, ids

    peak, ids = asyncio.run(main())
    assert sorted(ids) == list(range(96))
    assert peak < 96 * size // 1024 // 4, peak


_LEAN = """
import sys
import torch
from astream.torch.dataloader import StreamingDataLoader
from astream.torch.dataset import StreamingDataset
ds = StreamingDataset(local=sys.argv[1], shuffle=True, batch_size=8)
n = sum(len(b["id"]) for b in StreamingDataLoader(ds, batch_size=8))
assert n == int(sys.argv[2]), n
heavy = ("aiobotocore", "botocore", "boto3", "aiohttp", "gcloud", "google", "azure",
         "pyarrow", "prometheus_client", "opentelemetry")
print(sorted({m.split(".")[0] for m in sys.modules} & set(heavy)))
"""


def test_local_epoch_imports_no_storage_sdk(shards: tuple[str, list[str]]) -> None:
    """A torch epoch over local data imports no cloud SDK, HTTP client, pyarrow or metrics
    exporter: each would be resident memory in the trainer and every DataLoader worker."""
    import subprocess
    import sys

    root, _ = shards
    import astream

    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(astream.__file__))}
    p = subprocess.run(
        [sys.executable, "-c", _LEAN, root, str(SHARDS * PER_SHARD)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.strip().splitlines()[-1] == "[]", p.stdout
