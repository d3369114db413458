"""``ds.batches()`` / ``StreamingDataLoader(batch_format=...)`` over Parquet streams: batch
columns equal the sample path's values column by column (hypothesis over column types, row
groups, both ``ragged`` layouts), with 0 and 2 real DataLoader workers, resumption, a dataset
mixing an MDS and a Parquet stream, and the refusals (nulls, types without a column form)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astream import MDSWriter, Stream, StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError

from .test_hot import big_rows, write_big

SCALARS = {
    "i8": pa.int8(), "i16": pa.int16(), "i32": pa.int32(), "i64": pa.int64(),
    "u8": pa.uint8(), "u16": pa.uint16(), "u32": pa.uint32(), "u64": pa.uint64(),
    "f16": pa.float16(), "f32": pa.float32(), "f64": pa.float64(), "b": pa.bool_(),
}  # fmt: skip
LISTS = {"li16": pa.list_(pa.int16()), "lf32": pa.list_(pa.float32()),
         "lu16": pa.large_list(pa.uint16())}  # fmt: skip
VARS = {"bin": pa.binary(), "lbin": pa.large_binary(), "s": pa.string(),
        "ls": pa.large_string()}  # fmt: skip


def check(batch: dict[str, Any], chunk: list[dict[str, Any]], ragged: str) -> None:
    """``batch`` holds exactly the sample path's values of ``chunk``, column by column."""
    b = {k: v.numpy() if hasattr(v, "numpy") else v for k, v in batch.items()}
    for col in chunk[0]:
        vals = [s[col] for s in chunk]
        v0 = vals[0]
        if isinstance(v0, str):
            assert b[col].tolist() == vals, col
        elif isinstance(v0, (bytes, np.ndarray)):
            arrs = [np.frombuffer(v, np.uint8) if isinstance(v, bytes) else v for v in vals]
            if ragged == "pad":
                assert b[f"{col}_len"].tolist() == [len(a) for a in arrs], col
                assert b[col].shape == (len(chunk), max(len(a) for a in arrs)), col
                for r, a in enumerate(arrs):
                    assert np.array_equal(b[col][r, : len(a)], a), col
                    assert not b[col][r, len(a) :].any(), col
            else:
                offs = b[f"{col}_offsets"].tolist()
                assert offs == [0, *np.cumsum([len(a) for a in arrs]).tolist()], col
                for r, a in enumerate(arrs):
                    assert np.array_equal(b[col][offs[r] : offs[r + 1]], a), col
            assert b[col].dtype == arrs[0].dtype, col
        else:  # Python scalars
            assert b[col].shape == (len(chunk),), col
            assert b[col].tolist() == vals, col
            assert type(b[col].tolist()[0]) is type(v0), col


def chunks(samples: list[dict[str, Any]], bs: int) -> list[list[dict[str, Any]]]:
    return [samples[i : i + bs] for i in range(0, len(samples), bs)]


def _value(kind: str, t: Any, draw: Any) -> Any:
    if kind in SCALARS:
        if t == pa.bool_():
            return draw(st.booleans())
        if pa.types.is_floating(t):
            width = {pa.float16(): 16, pa.float32(): 32}.get(t, 64)
            return draw(st.floats(width=width, allow_nan=False))
        info = np.iinfo(t.to_pandas_dtype())
        return draw(st.integers(int(info.min), int(info.max)))
    if kind in LISTS:
        inner = t.value_type
        if pa.types.is_floating(inner):
            elem = st.floats(width=32, allow_nan=False)
        else:
            info = np.iinfo(inner.to_pandas_dtype())
            elem = st.integers(int(info.min), int(info.max))
        return draw(st.lists(elem, max_size=12))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return draw(st.binary(max_size=40))
    text = st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")
    return draw(st.text(text, max_size=12))


@st.composite
def tables(draw: Any) -> tuple[pa.Table, int]:
    every = {**SCALARS, **LISTS, **VARS}
    names = draw(st.lists(st.sampled_from(sorted(every)), min_size=1, max_size=5, unique=True))
    n = draw(st.integers(1, 40))
    cols = {k: pa.array([_value(k, every[k], draw) for _ in range(n)], every[k]) for k in names}
    if draw(st.booleans()) and "s" in cols:  # dictionary-encoded strings too
        cols["s"] = cols["s"].dictionary_encode()
    return pa.table(cols), draw(st.integers(1, 16))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=tables(), ragged=st.sampled_from(["pad", "offsets"]), bs=st.integers(1, 9))
def test_batches_equal_samples_for_every_column_type(
    tmp_path: Any, data: tuple[pa.Table, int], ragged: str, bs: int
) -> None:
    table, rg = data
    root = str(tmp_path / f"t{os.urandom(4).hex()}")
    os.makedirs(root)
    pq.write_table(table, os.path.join(root, "a.parquet"), row_group_size=rg)

    def ds() -> StreamingDataset:
        return StreamingDataset(
            streams=[Stream(local=root, format="parquet")], batch_size=bs, shuffle=True
        )

    samples = list(ds())
    got = list(ds().batches(ragged=ragged))
    want = chunks(samples, bs)
    assert len(got) == len(want)
    for batch, chunk in zip(got, want):
        check(batch, chunk, ragged)


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[dict[str, Any]]]:
    root = str(tmp_path_factory.mktemp("pqbatch") / "table")
    rows = big_rows(180, seed=3)
    for r in rows[::4]:  # values over PREAD bytes: read with preadv from the decoded file
        r["img"] = r["img"] * 3
    write_big(root, rows)
    return root, rows


def pq_stream(root: str, cache: str | None) -> Stream:
    if cache is None:
        return Stream(local=root, format="parquet")
    return Stream(remote=root, local=cache, format="parquet")


@pytest.mark.parametrize(
    ("workers", "ragged", "fetched"), [(0, "pad", True), (2, "offsets", True), (2, "pad", False)]
)
def test_loader_batches_equal_samples(
    table: Any, tmp_path: Any, workers: int, ragged: str, fetched: bool
) -> None:
    """Through the fetch path (decoded files shared by the workers) and in place (a private
    decode): the same batches as the collated samples."""
    root, _rows = table

    def ds(name: str) -> StreamingDataset:
        cache = str(tmp_path / name) if fetched else None
        return StreamingDataset(streams=[pq_stream(root, cache)], batch_size=16, shuffle=True)

    want = chunks(list(ds("a")), 16)
    ld = StreamingDataLoader(
        ds("b"), batch_size=16, num_workers=workers, batch_format="numpy", ragged=ragged
    )
    got = list(ld)
    assert len(got) == len(want) == 12
    for batch, chunk in zip(got, want):
        check(batch, chunk, ragged)
    assert sorted(np.concatenate([b["label"] for b in got]).tolist()) == list(range(180))
    if fetched:
        assert any(f.endswith(".arrow") for f in os.listdir(str(tmp_path / "b")))


@pytest.mark.parametrize(("before", "after", "stop"), [(0, 2, 4), (2, 0, 7)])
def test_resume_mid_epoch(table: Any, tmp_path: Any, before: int, after: int, stop: int) -> None:
    root, _ = table

    def loader(w: int) -> StreamingDataLoader:
        ds = StreamingDataset(
            streams=[pq_stream(root, str(tmp_path / "c"))], batch_size=16, shuffle=True
        )
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
    rest = [b["label"].tolist() for b in ld2]
    assert first + rest == full


def test_mixed_mds_and_parquet_stream_same_columns(table: Any, tmp_path: Any) -> None:
    root, _ = table
    mds = str(tmp_path / "mds")
    cols = {"label": "int", "img": "bytes", "tok": "ndarray:uint16", "txt": "str"}
    with MDSWriter(out=mds, columns=cols, size_limit=20000) as w:
        for r in big_rows(60, seed=9):
            w.write({**r, "label": 1000 + r["label"]})

    def ds() -> StreamingDataset:
        pqs = Stream(remote=root, local=str(tmp_path / "c"), format="parquet", proportion=0.5)
        streams = [Stream(local=mds, proportion=0.5), pqs]
        return StreamingDataset(streams=streams, batch_size=8, shuffle=True, epoch_size=120)

    samples = list(ds())
    got = list(ds().batches(ragged="offsets"))
    assert len(got) == 15
    labels = np.concatenate([b["label"] for b in got]).tolist()
    assert sum(x >= 1000 for x in labels) == 60 and sum(x < 1000 for x in labels) == 60
    for batch, chunk in zip(got, chunks(samples, 8)):
        check(batch, chunk, "offsets")


def test_nulls_and_types_without_a_column_form_are_refused(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    os.makedirs(root)
    t = pa.table(
        {
            "a": pa.array(list(range(12)), pa.int64()),
            "n": pa.array([None if i == 9 else i for i in range(12)], pa.int32()),
            "l": pa.array([[1, None] if i == 5 else [i] for i in range(12)], pa.list_(pa.int64())),
            "nest": pa.array([[[i]] for i in range(12)], pa.list_(pa.list_(pa.int64()))),
        }
    )
    pq.write_table(t, os.path.join(root, "a.parquet"), row_group_size=6)

    def ds(columns: list[str], bs: int = 4) -> StreamingDataset:
        return StreamingDataset(
            streams=[Stream(local=root, format="parquet", columns=columns)], batch_size=bs
        )

    # a batch without the null row is served; the one holding it names the column and row
    it = ds(["a", "n"]).batches()
    assert next(it)["n"].tolist() == [0, 1, 2, 3]
    assert next(it)["n"].tolist() == [4, 5, 6, 7]
    with pytest.raises(ConfigError, match=r"column 'n' is null in row 3 of row group 1"):
        next(it)
    with pytest.raises(ConfigError, match=r"column 'l' is a list holding a null in row 5"):
        list(ds(["a", "l"], bs=6).batches())
    with pytest.raises(ConfigError, match=r"column 'nest' .* is Arrow list<.*no column form"):
        list(ds(["nest"]).batches())
    # the sample path serves all of them
    assert len(list(ds(["a", "n", "l", "nest"]))) == 12
