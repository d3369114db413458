"""The lean column-batch path (``ColumnBatch._lean``: scalar and variable-size columns in
``offsets`` layout, fresh numpy memory) gives exactly the arrays of the general path
(``finish`` with an allocator) and of the sample path: same keys in the same order, dtypes,
shapes and bytes; over batches spanning many shards, single-shard batches, a row store
compacted mid-epoch, and batches the caller keeps (never overwritten)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from astream import MDSWriter, StreamingDataset
from astream.core import batchdecode
from astream.runtime import batch as runtime_batch

COLUMNS = {
    "id": "int", "tokens": "ndarray:uint16", "label": "int32", "raw": "bytes",
    "f": "float32", "u": "uint8", "vec": "ndarray:float64",
}  # fmt: skip


def _write(path: str, n: int, limit: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with MDSWriter(out=path, columns=COLUMNS, size_limit=limit) as w:
        for i in range(n):
            w.write(
                {
                    "id": i * 7 - 300,
                    "tokens": rng.integers(0, 60_000, int(rng.integers(40, 700))).astype(np.uint16),
                    "label": np.int32(-i),
                    "raw": rng.bytes(int(rng.integers(65, 400))),
                    "f": np.float32(i / 3),
                    "u": np.uint8(i % 251),
                    "vec": rng.random(int(rng.integers(9, 40))),
                }
            )


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("lean")
    out = {}
    for name, n, limit in (("many", 300, 1 << 14), ("one", 300, 1 << 24), ("grow", 1500, 1 << 14)):
        out[name] = str(root / name)
        _write(out[name], n, limit)
    return out


def _epoch(
    path: str, shuffle: bool, general: bool, mp: pytest.MonkeyPatch, calls: dict[str, int]
) -> list[Any]:
    with mp.context() as m:
        real, real_chunk = batchdecode.ColumnBatch._lean, batchdecode.chunk_values

        def spy(self: Any) -> Any:
            got = None if general else real(self)
            calls["lean"] += got is not None
            return got

        def spy_chunk(*a: Any) -> Any:
            got = real_chunk(*a)
            calls["chunk"] += got is not None  # the batch slices its chunk's values
            return got

        m.setattr(batchdecode.ColumnBatch, "_lean", spy)
        m.setattr(batchdecode, "chunk_values", spy_chunk)
        ds = StreamingDataset(local=path, batch_size=13, shuffle=shuffle, shuffle_seed=5)
        got = list(ds.batches(ragged="offsets"))
        assert calls["lean"] == (0 if general else len(got))
        return got


@pytest.mark.parametrize(
    "name,shuffle,max_shards",
    [("many", True, 2), ("one", False, 2), ("one", True, 2), ("grow", True, 1000)],
)
def test_lean_equals_general_and_samples(
    data: dict[str, str], name: str, shuffle: bool, max_shards: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # max_shards=2: the row store is compacted (its tables moved) again and again; 1000
    # on 1,500 samples in ~150 shards: its tables grow (reallocated) after the first batches
    monkeypatch.setattr(runtime_batch.BatchLayouts.__init__, "__defaults__", (max_shards,))
    path = data[name]
    n = 1500 if name == "grow" else 300
    calls = {"lean": 0, "chunk": 0}
    lean = _epoch(path, shuffle, False, monkeypatch, calls)  # every batch kept until the end
    # most batches slice their chunk's values (chunk_values), once its shards are all held
    assert calls["chunk"] >= (len(lean) // 2 if name != "many" else 0), calls
    general = _epoch(path, shuffle, True, monkeypatch, {"lean": 0, "chunk": 0})
    samples = list(StreamingDataset(local=path, batch_size=13, shuffle=shuffle, shuffle_seed=5))
    assert len(lean) == len(general) == -(-n // 13)
    for k, (a, b) in enumerate(zip(lean, general)):
        assert list(a) == list(b)  # the same keys, in the same order
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
            assert np.array_equal(a[key], b[key]), (k, key)
        chunk = samples[k * 13 : (k + 1) * 13]
        for col in ("id", "label", "f", "u"):
            assert np.array_equal(a[col], np.stack([np.asarray(s[col]) for s in chunk])), col
        assert a["id"].dtype == np.int64 and a["label"].dtype == np.int32
        for col in ("tokens", "raw", "vec"):
            vals = [np.frombuffer(s[col], np.uint8) if col == "raw" else s[col] for s in chunk]
            offs = a[f"{col}_offsets"]
            assert offs.tolist() == [0, *np.cumsum([len(v) for v in vals]).tolist()], col
            assert a[col].dtype == vals[0].dtype, col
            for r, v in enumerate(vals):
                assert np.array_equal(a[col][offs[r] : offs[r + 1]], v), (k, col, r)


def test_lean_declines_what_it_does_not_cover(tmp_path: Any) -> None:
    """``pad``, string columns and batches at the pool's size take the general path."""
    path = str(tmp_path / "s")
    with MDSWriter(out=path, columns={"t": "str", "x": "int"}) as w:
        for i in range(20):
            w.write({"t": f"s{i}", "x": i})
    seen: list[Any] = []
    real = batchdecode.ColumnBatch._lean

    def spy(self: Any) -> Any:
        seen.append(real(self))
        return seen[-1]

    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(batchdecode.ColumnBatch, "_lean", spy)
        got = list(StreamingDataset(local=path, batch_size=8).batches(ragged="offsets"))
        assert got[0]["t"].tolist() == [f"s{i}" for i in range(8)]
        assert seen and all(x is None for x in seen)
        seen.clear()
        with MDSWriter(out=str(tmp_path / "p"), columns={"b": "bytes"}) as w:
            for i in range(20):
                w.write({"b": bytes(100 + i)})
        got = list(StreamingDataset(local=str(tmp_path / "p"), batch_size=8).batches())
        assert got[2]["b_len"].tolist() == [116, 117, 118, 119]  # pad
        assert len(seen) == 3 and all(x is None for x in seen)
    finally:
        mp.undo()
