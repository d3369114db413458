"""The row-group decoder's per-column values against pyarrow's own ``to_pylist``: every type
it reads from the Arrow buffers directly (numbers, ``list<number>``, binary, strings,
dictionary strings), with nulls, sliced arrays and several row groups, and the types it hands
to ``to_pylist`` (nested lists, structs, timestamps, booleans, float16)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream.parquet.values import column_values as _column_values


def _expected(arr: pa.Array) -> list[Any]:
    """What a sample holds: ``to_pylist``, with a list of numbers as a NumPy array of the
    value type (a list holding a null element stays ``to_pylist``'s list: NumPy has no
    integer null, and a float NaN is a value, not a null)."""
    t = arr.type
    if pa.types.is_dictionary(t):
        arr, t = arr.dictionary_decode(), t.value_type
    rows = arr.to_pylist()
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and (
        pa.types.is_integer(t.value_type)
        or (pa.types.is_floating(t.value_type) and not pa.types.is_float16(t.value_type))
    ):
        dtype = np.dtype(t.value_type.to_pandas_dtype())
        return [r if r is None or None in r else np.asarray(r, dtype=dtype) for r in rows]
    return rows


def _same(got: Any, want: list[Any]) -> None:
    assert len(got) == len(want)
    for i, w in enumerate(want):
        g = got[i]
        if isinstance(w, np.ndarray):
            assert isinstance(g, np.ndarray) and g.dtype == w.dtype, (i, g, w)
            np.testing.assert_array_equal(g, w)
        else:
            assert type(g) is type(w) and g == w, (i, g, w)


def _columns() -> dict[str, pa.Array]:
    n = 23
    rng = np.random.default_rng(5)
    ints = {
        t: pa.array([None if i % 4 == 1 else int(i * 7 % 120) for i in range(n)], t)
        for t in (pa.int8(), pa.uint8(), pa.int16(), pa.uint16(), pa.int32(), pa.uint64())
    }
    lists = [None if i % 6 == 5 else rng.integers(0, 60000, i % 5).tolist() for i in range(n)]
    text = [None if i % 5 == 4 else ["", "é", "cat", "ü" * 9][i % 4] for i in range(n)]
    blobs = [None if i % 3 == 2 else bytes([i]) * (i % 4) for i in range(n)]
    return {
        **{f"i_{t}": a for t, a in ints.items()},
        "i64": pa.array(list(range(-n, 0)), pa.int64()),  # no nulls
        "f32": pa.array([None if i % 5 == 0 else i / 8 for i in range(n)], pa.float32()),
        "f64": pa.array([i * 0.25 for i in range(n)], pa.float64()),
        "f16": pa.array(np.arange(n, dtype=np.float16)),
        "flag": pa.array([None if i == 3 else i % 2 == 0 for i in range(n)], pa.bool_()),
        "tok": pa.array(lists, pa.list_(pa.uint16())),
        "tok_large": pa.array(lists, pa.large_list(pa.int64())),
        "tok_null_elem": pa.array(
            [None if i == 2 else [i, None, i + 1] for i in range(n)], pa.list_(pa.int32())
        ),
        "vec": pa.array([[i / 2, i / 3] for i in range(n)], pa.list_(pa.float32())),
        "img": pa.array(blobs, pa.binary()),
        "img_large": pa.array(blobs, pa.large_binary()),
        "txt": pa.array(text, pa.string()),
        "txt_large": pa.array(text, pa.large_string()),
        "txt_dict": pa.array(text, pa.string()).dictionary_encode(),
        "nest": pa.array(
            [[[i], [i, i + 1]] if i % 2 else [] for i in range(n)], pa.list_(pa.list_(pa.int64()))
        ),
        "rec": pa.array([{"a": i, "b": str(i)} for i in range(n)]),
        "when": pa.array([dt.datetime(2020, 1, 1 + i % 28) for i in range(n)], pa.timestamp("us")),
    }


@pytest.mark.parametrize("name", sorted(_columns()))
def test_column_values_equal_to_pylist(name: str, tmp_path: Any) -> None:
    arr = _columns()[name]
    _same(_column_values(arr), _expected(arr))
    for start, length in ((3, 11), (7, 0), (22, 1)):  # sliced: offsets into shared buffers
        part = arr.slice(start, length)
        _same(_column_values(part), _expected(part))
    # through a Parquet file of several row groups, read as the decoder reads them
    path = str(tmp_path / "t.parquet")
    pq.write_table(pa.table({name: arr}), path, row_group_size=8)
    f = pq.ParquetFile(path)
    for g in range(f.num_row_groups):
        col = f.read_row_group(g, use_threads=False).column(name)
        _same(_column_values(col), _expected(col.combine_chunks()))


def test_decoding_imports_no_pandas(tmp_path: Any) -> None:
    """pyarrow's ``to_numpy`` imports pandas (0.3-1 s in each fresh DataLoader worker): the
    decoder's fast paths must not call it."""
    import subprocess
    import sys

    path = str(tmp_path / "t.parquet")
    cols = {k: v for k, v in _columns().items() if k in ("i64", "f64", "tok", "img", "txt_dict")}
    pq.write_table(pa.table(cols), path, row_group_size=8)
    code = (
        "import sys, pyarrow.parquet as pq\n"
        "from astream.parquet.values import column_values as _column_values\n"
        f"t = pq.ParquetFile({path!r}).read_row_group(1)\n"
        "cols = [_column_values(t.column(n)) for n in t.column_names]\n"
        "[c[i] for c in cols for i in range(len(c))]\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_warm_dataset_imports_pyarrow_before_workers_fork(tmp_path: Any, monkeypatch: Any) -> None:
    """A warm start reads no footer, yet the dataset's process imports pyarrow.parquet, so that
    forked DataLoader workers inherit it rather than each importing it before its first row
    group (counted at the one place that imports it)."""
    from astream import StreamingDataset
    from astream.parquet import arrow, io_footers

    from .conftest import write_table

    root, cache = str(tmp_path / "table"), str(tmp_path / "cache")
    write_table(root, [(20, 8)])
    StreamingDataset(remote=root, local=cache, format="parquet", batch_size=1)  # cold
    real, calls = arrow.pyarrow_parquet, []
    monkeypatch.setattr(arrow, "pyarrow_parquet", lambda: calls.append(1) or real())
    monkeypatch.setattr(io_footers, "footer_file", None)  # a footer read would fail
    ds = StreamingDataset(remote=root, local=cache, format="parquet", batch_size=1)  # warm
    assert len(ds) == 20 and calls
