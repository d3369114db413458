"""Batch output equals the collated sample path, column by column, for generated layouts:
any mix of encodings, value sizes from empty to large (the ``preadv`` path), shards of a few
samples (batches spanning many shards), both ragged layouts, and a row store small enough to
be compacted mid-epoch. A corrupt sample fails only the batch that holds it."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from astream import MDSWriter, StreamingDataset
from astream.errors import FormatError
from astream.runtime import batch as runtime_batch

# encoding -> (kind, value maker from (rng, big)) ; kinds: stacked / ragged / text / bytes
ENCODINGS: dict[str, str] = {
    "int": "stacked",
    "uint8": "stacked",
    "int16": "stacked",
    "float32": "stacked",
    "float64": "stacked",
    "ndarray:int32:3": "stacked",  # small fixed: kept in the table
    "ndarray:float64:2,3": "stacked",  # 48 bytes: copied from the shard
    "ndarray:uint16": "ragged",
    "ndarray": "ragged",  # the dtype code is in each value (one dtype per column here)
    "bytes": "bytes",
    "str": "text",
    "str_int": "stacked",
    "json": "bytes",
}


def value(enc: str, rng: np.random.Generator, big: bool, i: int) -> Any:
    n = int(rng.integers(16_384, 40_000)) if big else int(rng.integers(0, 12))
    if enc in ("int", "str_int"):
        return int(rng.integers(-(10**6), 10**6))
    if enc in ("uint8", "int16", "float32", "float64"):
        return np.array(rng.integers(0, 200), dtype=enc)[()]
    if enc == "ndarray:int32:3":
        return rng.integers(-99, 99, size=3).astype(np.int32)
    if enc == "ndarray:float64:2,3":
        return rng.random((2, 3))
    if enc == "ndarray:uint16":
        return rng.integers(0, 60_000, size=max(1, n // 2 if big else n)).astype(np.uint16)
    if enc == "ndarray":
        return rng.random(max(1, n // 8 if big else n))
    if enc == "bytes":
        return rng.bytes(n)
    if enc == "str":
        return "é" * (i % 3) + "x" * n
    return {"i": i, "l": list(range(n % 5))}


def stored(enc: str, v: Any) -> np.ndarray[Any, Any]:
    return np.frombuffer(v, np.uint8) if enc == "bytes" else np.asarray(v)


def check(
    batch: dict[str, Any], chunk: list[dict[str, Any]], cols: dict[str, str], ragged: str
) -> None:
    for name, enc in cols.items():
        kind = ENCODINGS[enc]
        if kind == "stacked":
            want = np.stack([np.asarray(s[name]) for s in chunk])
            assert np.array_equal(batch[name], want), name
            assert batch[name].shape == want.shape, name
            continue
        if kind == "text":
            assert batch[name].tolist() == [s[name] for s in chunk], name
            continue
        vals = [np.asarray(s[name]) if kind == "ragged" else stored(enc, s[name]) for s in chunk]
        if enc == "json":  # the stored bytes: decode them back to compare
            got = [
                json.loads(bytes(batch[name][r, : batch[f"{name}_len"][r]]))
                if ragged == "pad"
                else json.loads(
                    bytes(
                        batch[name][batch[f"{name}_offsets"][r] : batch[f"{name}_offsets"][r + 1]]
                    )
                )
                for r in range(len(chunk))
            ]
            assert got == [s[name] for s in chunk], name
            continue
        if ragged == "pad":
            assert batch[f"{name}_len"].tolist() == [len(v) for v in vals], name
            for r, v in enumerate(vals):
                assert np.array_equal(batch[name][r, : len(v)], v), name
                assert not batch[name][r, len(v) :].any(), name
        else:
            offs = batch[f"{name}_offsets"]
            assert offs.tolist() == [0, *np.cumsum([len(v) for v in vals]).tolist()], name
            for r, v in enumerate(vals):
                assert np.array_equal(batch[name][offs[r] : offs[r + 1]], v), name
        assert batch[name].dtype == vals[0].dtype, name


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    picks=st.lists(st.sampled_from(sorted(ENCODINGS)), min_size=1, max_size=5, unique=True),
    n=st.integers(1, 60),
    bs=st.integers(1, 9),
    big=st.booleans(),
    limit=st.sampled_from([1 << 10, 1 << 14, 1 << 22]),
    ragged=st.sampled_from(["pad", "offsets"]),
    seed=st.integers(0, 1000),
)
@example(picks=["bytes", "int"], n=30, bs=4, big=True, limit=1 << 16, ragged="offsets", seed=1)
@example(picks=["ndarray:uint16", "str"], n=20, bs=3, big=True, limit=1 << 17, ragged="pad", seed=2)
def test_batches_equal_samples(
    picks: list[str],
    n: int,
    bs: int,
    big: bool,
    limit: int,
    ragged: str,
    seed: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a row store of at most 2 shards: compacted again and again within the epoch
    monkeypatch.setattr(runtime_batch.BatchLayouts.__init__, "__defaults__", (2,))
    rng = np.random.default_rng(seed)
    cols = {f"c{k}": enc for k, enc in enumerate(picks)}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ds")
        with MDSWriter(out=path, columns=cols, size_limit=limit) as w:
            for i in range(n):
                w.write({c: value(e, rng, big and c == "c0", i) for c, e in cols.items()})

        def fresh() -> StreamingDataset:
            return StreamingDataset(local=path, batch_size=bs, shuffle=True, shuffle_seed=seed)

        samples = list(fresh())
        got = list(fresh().batches(ragged=ragged))
        assert len(got) == -(-n // bs)
        for k, b in enumerate(got):
            check(b, samples[k * bs : (k + 1) * bs], cols, ragged)


def test_corrupt_sample_fails_only_its_batch(tmp_path: Any) -> None:
    path = str(tmp_path / "ds")
    rng = np.random.default_rng(0)
    with MDSWriter(out=path, columns={"x": "bytes", "y": "int"}, size_limit=1 << 20) as w:
        for i in range(40):
            w.write({"x": rng.bytes(20_000 if i % 2 else 5), "y": i})
    shard = os.path.join(path, "shard.00000.mds")
    with open(shard, "r+b") as f:
        data = bytearray(f.read())
        n = int.from_bytes(data[:4], "little")
        starts = np.frombuffer(bytes(data[4 : 4 + 4 * (n + 1)]), "<u4")
        # sample 20: its length field says one byte more than it holds
        at = int(starts[20])
        data[at : at + 4] = (int.from_bytes(data[at : at + 4], "little") + 1).to_bytes(4, "little")
        f.seek(0)
        f.write(data)
    it = StreamingDataset(local=path, batch_size=8, shuffle=False).batches()
    first = [next(it)["y"].tolist() for _ in range(2)]
    assert first == [list(range(8)), list(range(8, 16))]
    with pytest.raises(FormatError, match="column lengths add up to"):
        next(it)


def test_fixed_2d_samples_outlive_their_map(tmp_path: Any) -> None:
    """A sample of a multi-dimensional fixed ndarray column stays readable after the reader
    has closed its shard (it once kept only the mmap object, which closing unmapped: a crash)."""
    path = str(tmp_path / "ds")
    rng = np.random.default_rng(3)
    want = [rng.random((2, 3)) for _ in range(30)]
    with MDSWriter(out=path, columns={"a": "ndarray:float64:2,3"}, size_limit=1 << 10) as w:
        for a in want:
            w.write({"a": a})
    ds = StreamingDataset(local=path, batch_size=4, shuffle=False)
    held = [s["a"] for s in ds]
    list(ds)  # another epoch: every shard of the first is closed
    assert all(np.array_equal(a, b) for a, b in zip(held, want))
