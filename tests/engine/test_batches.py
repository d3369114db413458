"""Batch output (columns) equals the collated sample stream: every encoding, both ragged
layouts, 0 and 2 DataLoader workers, a plain DataLoader, resumption mid-epoch; and refusals."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from astream import MDSWriter, StreamingDataLoader, StreamingDataset
from astream.core.encodings import encode
from astream.errors import ConfigError
from astream.storage.sync import upload

COLUMNS = {
    "ids": "ndarray:uint16", "label": "int", "text": "str", "f32": "float32", "u8": "uint8",
    "i16": "int16", "f64": "float64", "fix": "ndarray:int16:2,3", "vec": "ndarray:float32:5",
    "raw": "bytes", "anyarr": "ndarray", "js": "json", "sint": "str_int", "sflt": "str_float",
    "dec": "str_decimal", "img": "jpeg",
}  # fmt: skip
STACKED = ("label", "f32", "u8", "i16", "f64", "fix", "vec", "sint", "sflt")
RAGGED_NUMERIC = ("ids", "anyarr")
AS_BYTES = ("raw", "js", "dec", "img")  # batched as their stored bytes


def _jpeg(i: int) -> Any:
    from PIL import Image

    return Image.new("RGB", (4 + i % 3, 4), (i % 255, 10, 20))


def make(i: int, rng: np.random.Generator) -> dict[str, Any]:
    from decimal import Decimal

    return {
        "ids": rng.integers(0, 60000, size=int(rng.integers(1, 90))).astype(np.uint16),
        "label": i * 3 - 500,
        "text": "é" * (i % 4) + f"s{i}",
        "f32": np.float32(i / 3),
        "u8": np.uint8(i % 256),
        "i16": np.int16(-i),
        "f64": np.float64(i / 7),
        "fix": rng.integers(-99, 99, size=(2, 3)).astype(np.int16),
        "vec": rng.random(5).astype(np.float32),
        "raw": bytes(rng.integers(0, 255, size=i % 9).astype(np.uint8)),
        "anyarr": np.arange(i % 6 + 1, dtype=np.float64) * i,
        "js": {"i": i, "l": list(range(i % 3))},
        "sint": i * 1000 - 77,
        "sflt": i / 9,
        "dec": Decimal(i) / 4,
        "img": _jpeg(i),
    }


def write(path: str, n: int, seed: int = 0, **kw: Any) -> None:
    rng = np.random.default_rng(seed)
    with MDSWriter(out=path, columns=COLUMNS, size_limit=6000, **kw) as w:
        for i in range(n):
            w.write(make(i, rng))


@pytest.fixture(scope="module")
def enc_dataset(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("batches") / "all")
    write(path, 240)
    return path


def stored_bytes(enc: str, value: Any) -> np.ndarray[Any, Any]:
    if enc == "jpeg":  # the sample path opens the stored bytes with PIL: those bytes
        return np.frombuffer(value.fp.getvalue(), np.uint8)
    if enc == "bytes":
        return np.frombuffer(value, np.uint8)
    return np.frombuffer(encode(enc, value), np.uint8)


def check_batch(batch: dict[str, Any], chunk: list[dict[str, Any]], ragged: str) -> None:
    """``batch`` (numpy or torch) is exactly the columns of the decoded samples ``chunk``."""
    b = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    for col in STACKED:
        want = np.stack([np.asarray(s[col]) for s in chunk])
        assert b[col].shape == want.shape and np.array_equal(b[col], want), col
        if col != "label":
            assert b[col].dtype == want.dtype or col in ("sint", "sflt"), col
    assert b["label"].dtype == np.int64
    assert b["text"].tolist() == [s["text"] for s in chunk]
    values: dict[str, list[np.ndarray[Any, Any]]] = {
        col: [np.asarray(s[col]) for s in chunk] for col in RAGGED_NUMERIC
    }
    for col in AS_BYTES:
        values[col] = [stored_bytes(COLUMNS[col], s[col]) for s in chunk]
    for col, vals in values.items():
        if ragged == "pad":
            assert b[f"{col}_len"].tolist() == [len(v) for v in vals], col
            assert b[col].shape == (len(chunk), max(len(v) for v in vals)), col
            for r, v in enumerate(vals):
                assert np.array_equal(b[col][r, : len(v)], v), col
                assert not b[col][r, len(v) :].any(), col
        else:
            offs = b[f"{col}_offsets"]
            assert offs[0] == 0 and offs.tolist()[1:] == np.cumsum([len(v) for v in vals]).tolist()
            for r, v in enumerate(vals):
                assert np.array_equal(b[col][offs[r] : offs[r + 1]], v), col
        assert b[col].dtype == vals[0].dtype, col


def collated(path: str, bs: int = 16, **kw: Any) -> list[list[dict[str, Any]]]:
    ds = StreamingDataset(local=path, batch_size=bs, shuffle=True, **kw)
    samples = list(ds)
    return [samples[i : i + bs] for i in range(0, len(samples), bs)]


@pytest.fixture(scope="module")
def reference(enc_dataset: str) -> list[list[dict[str, Any]]]:
    return collated(enc_dataset)


@pytest.mark.parametrize("ragged", ["pad", "offsets"])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_batches_equal_collated_samples(
    enc_dataset: str, reference: Any, ragged: str, fmt: str
) -> None:
    ds = StreamingDataset(local=enc_dataset, batch_size=16, shuffle=True)
    got = list(ds.batches(batch_format=fmt, ragged=ragged))
    assert len(got) == len(reference) == 15
    for batch, chunk in zip(got, reference):
        check_batch(batch, chunk, ragged)
        kind = torch.Tensor if fmt == "torch" else np.ndarray
        assert isinstance(batch["ids"], kind) and isinstance(batch["text"], np.ndarray)


@pytest.mark.parametrize(("workers", "ragged"), [(0, "offsets"), (2, "pad"), (2, "offsets")])
def test_loader_batches_equal_collated_samples(
    enc_dataset: str, reference: Any, workers: int, ragged: str
) -> None:
    ds = StreamingDataset(local=enc_dataset, batch_size=16, shuffle=True)
    ld = StreamingDataLoader(
        ds, batch_size=16, num_workers=workers, batch_format="torch", ragged=ragged
    )
    got = list(ld)
    assert len(got) == len(ld) == len(reference)
    for batch, chunk in zip(got, reference):
        check_batch(batch, chunk, ragged)
    assert ld.state_dict()["sample_in_epoch"] == 240


def test_plain_dataloader_recipe(enc_dataset: str, reference: Any) -> None:
    ds = StreamingDataset(local=enc_dataset, batch_size=16, shuffle=True)
    ld = DataLoader(ds.batch_view("numpy"), batch_size=None, num_workers=2)
    got = list(ld)
    assert len(got) == len(reference)
    for batch, chunk in zip(got, reference):
        assert isinstance(batch["label"], np.ndarray)
        check_batch(batch, chunk, "pad")


def test_compressed_mixed_streams_and_remote(tmp_path: Any, s3_bucket: str) -> None:
    """zstd shards from S3 mixed with a local stream: batches equal the collated samples."""
    from astream import Stream

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write(a, 120, seed=1, compression="zstd")
    write(b, 90, seed=2)
    url = f"{s3_bucket}/mix-{uuid.uuid4().hex[:8]}"
    upload(a, url)

    def build() -> StreamingDataset:
        streams = [
            Stream(remote=url, local=str(tmp_path / f"c{uuid.uuid4().hex[:6]}"), proportion=0.5),
            Stream(local=b, proportion=0.5),
        ]
        return StreamingDataset(streams=streams, batch_size=8, shuffle=True, epoch_size=160)

    samples = list(build())
    got = list(build().batches(ragged="offsets"))
    assert len(got) == 20
    for k, batch in enumerate(got):
        check_batch(batch, samples[8 * k : 8 * k + 8], "offsets")


@pytest.mark.parametrize(("before", "after", "stop"), [(0, 0, 3), (2, 2, 5), (0, 2, 4)])
def test_resume_mid_epoch(enc_dataset: str, before: int, after: int, stop: int) -> None:
    def loader(w: int) -> StreamingDataLoader:
        ds = StreamingDataset(local=enc_dataset, batch_size=16, shuffle=True)
        return StreamingDataLoader(ds, batch_size=16, num_workers=w, batch_format="numpy")

    full = [b["label"].tolist() for b in loader(0)]
    ld = loader(before)
    first = []
    for i, b in enumerate(ld):
        first.append(b["label"].tolist())
        if i + 1 == stop:
            break
    state = ld.state_dict()
    assert state["sample_in_epoch"] == 16 * stop
    ld2 = loader(after)
    ld2.load_state_dict(state)
    assert ld2.remaining_len() == 15 - stop
    rest = [b["label"].tolist() for b in ld2]
    assert first + rest == full


def test_dataset_state_dict_counts_batches(enc_dataset: str) -> None:
    ds = StreamingDataset(local=enc_dataset, batch_size=16, shuffle=True)
    full = [b["label"].tolist() for b in ds.batches()]
    ds.set_epoch(0)
    it = ds.batches()
    head = [next(it)["label"].tolist() for _ in range(4)]
    state = ds.state_dict()
    assert state["sample_in_epoch"] == 64
    ds2 = StreamingDataset(local=enc_dataset, batch_size=16, shuffle=True)
    ds2.load_state_dict(state)
    assert head + [b["label"].tolist() for b in ds2.batches()] == full


def test_drop_last(enc_dataset: str) -> None:
    ds = StreamingDataset(local=enc_dataset, batch_size=50, shuffle=False)
    assert [len(b["label"]) for b in ds.batches()] == [50, 50, 50, 50, 40]
    ds.set_epoch(0)
    assert [len(b["label"]) for b in ds.batches(drop_last=True)] == [50] * 4
    ld = StreamingDataLoader(ds, batch_size=50, num_workers=2, batch_format="torch", drop_last=True)
    assert [len(b["label"]) for b in ld] == [50] * 4 and len(ld) == 4


def test_refusals(enc_dataset: str, tmp_path: Any) -> None:
    ds = StreamingDataset(local=enc_dataset, batch_size=16)
    with pytest.raises(ConfigError, match="batch_format"):
        ds.batches(batch_format="arrow")
    with pytest.raises(ConfigError, match="ragged"):
        ds.batches(ragged="nested")
    with pytest.raises(ConfigError, match="batch_size=8 differs"):
        ds.batches(8)
    with pytest.raises(ConfigError, match="collate_fn"):
        StreamingDataLoader(ds, batch_size=16, batch_format="torch", collate_fn=list)
    with pytest.raises(ConfigError, match="transform"):
        StreamingDataset(local=enc_dataset, batch_size=16, transform=lambda x: x).batches()
    from astream.aio import AsyncStreamingDataset

    core = AsyncStreamingDataset(local=enc_dataset, batch_size=16)
    with pytest.raises(ConfigError, match=r"astream\.StreamingDataset"):
        core.batches(batch_format="torch")
    assert core.batches(batch_format="numpy") is not None
    # a dynamic-shape array of more than one dimension has no column form
    path = str(tmp_path / "nd")
    with MDSWriter(out=path, columns={"a": "ndarray:int8"}) as w:
        w.write({"a": np.zeros((2, 2), np.int8)})
    with pytest.raises(ConfigError, match="only 1-D dynamic-shape"):
        list(StreamingDataset(local=path, batch_size=1).batches())


def test_json_lines_stream_refused(tmp_path: Any) -> None:
    from astream.writer.xsv import JSONWriter

    path = str(tmp_path / "jl")
    with JSONWriter(out=path, columns={"a": "int"}) as w:
        w.write({"a": 1})
    with pytest.raises(ConfigError, match="MDS shards only"):
        list(StreamingDataset(local=path, batch_size=1).batches())
