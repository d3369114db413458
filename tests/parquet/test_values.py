"""Parquet values exactly as pyarrow reads them, and the files whose rows are not what they
seem: an integer list holding a null element stays integers (that row a Python list with
``None``), zero-row files and row groups are skipped as pyarrow skips them (streaming, random
access, ``astream convert``), a footer whose row count contradicts its row groups is a
``FormatError`` naming the file, and a type astream does not read is refused when the dataset
is built."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from astream import LocalDataset, StreamingDataset
from astream.cli import main as astream_cli
from astream.errors import ConfigError, FormatError
from astream.parquet import thrift
from astream.parquet import values as parquet_values
from astream.parquet.values import unsupported

from .oracle import rows_of, same_row


def _ds(root: str, cache: str | None = None, **kw: Any) -> StreamingDataset:
    if cache is None:
        return StreamingDataset(local=root, format="parquet", batch_size=2, **kw)
    return StreamingDataset(remote=root, local=cache, format="parquet", batch_size=2, **kw)


def _files(root: str) -> list[str]:
    return sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".parquet"))


def _all_ways(root: str, cache: str) -> None:
    """In place and through the cache, iterated and by ``ds[i]``: pyarrow's rows exactly."""
    want = rows_of(_files(root))
    for ds in (_ds(root), _ds(root, cache)):
        assert len(ds) == len(want)
        got = list(ds)
        assert [i for i, (g, w) in enumerate(zip(got, want)) if not same_row(g, w)] == []
        assert len(got) == len(want)
        assert all(same_row(ds[i], want[i]) for i in range(len(want)))


def test_integer_list_with_a_null_element_stays_exact(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    os.makedirs(root)
    big = 2**53 + 1  # not a float64
    pq.write_table(
        pa.table({
            "tok": pa.array([[big, 1], [7, None], None, [], [None]], pa.list_(pa.int64())),
            "u": pa.array([[2**64 - 1], [None, 0], [3], None, []], pa.large_list(pa.uint64())),
            "f": pa.array([[1.5], [float("nan"), None], [-0.0], [], None],
                          pa.list_(pa.float32())),
        }),
        os.path.join(root, "a.parquet"),
    )  # fmt: skip
    ds = _ds(root)
    first, second = ds[0], ds[1]
    assert isinstance(first["tok"], np.ndarray) and first["tok"].dtype == np.int64
    assert first["tok"].tolist() == [big, 1]
    # the row holding a null element: pyarrow's own list, ints stay ints, None stays None
    assert second["tok"] == [7, None] and type(second["tok"][0]) is int
    assert second["u"] == [None, 0] and ds[0]["u"].dtype == np.uint64
    assert ds[0]["u"].tolist() == [2**64 - 1]
    got = second["f"]
    assert isinstance(got, list) and np.isnan(got[0]) and got[1] is None
    assert ds[4]["tok"] == [None] and ds[2]["tok"] is None
    assert ds[3]["tok"].dtype == np.int64 and len(ds[3]["tok"]) == 0
    _all_ways(root, str(tmp_path / "cache"))


def _zero_row_table(root: str) -> None:
    os.makedirs(root)
    schema = pa.schema([("x", pa.int64()), ("s", pa.string()), ("l", pa.list_(pa.int32()))])

    def part(lo: int, hi: int) -> pa.Table:
        xs = list(range(lo, hi))
        return pa.table({"x": xs, "s": [str(x) for x in xs], "l": [[x] * (x % 3) for x in xs]},
                        schema=schema)  # fmt: skip

    pq.write_table(part(0, 0), os.path.join(root, "a.parquet"))  # a zero-row file first
    with pq.ParquetWriter(os.path.join(root, "b.parquet"), schema) as w:
        w.write_table(part(0, 3))
        w.write_table(part(3, 3))  # a row group of no rows in the middle
        w.write_table(part(3, 5))
    pq.write_table(part(5, 5), os.path.join(root, "c.parquet"))
    pq.write_table(part(5, 9), os.path.join(root, "d.parquet"), row_group_size=3)
    with pq.ParquetWriter(os.path.join(root, "e.parquet"), schema):
        pass  # no row group at all


def test_zero_row_files_and_row_groups_are_skipped(tmp_path: Any) -> None:
    root = str(tmp_path / "t")
    _zero_row_table(root)
    assert pq.read_table(root).column("x").to_pylist() == list(range(9))  # pyarrow's reading
    md = pq.read_metadata(os.path.join(root, "b.parquet"))
    assert [md.row_group(g).num_rows for g in range(md.num_row_groups)] == [3, 0, 2]
    _all_ways(root, str(tmp_path / "cache"))
    assert _ds(root).num_shards == 4  # b: 2 groups, d: 2; no shard for an empty one
    out = str(tmp_path / "mds")
    assert astream_cli(["convert", root, out, "--format", "parquet", "--workers", "2"]) == 0
    assert [int(s["x"]) for s in LocalDataset(out)] == list(range(9))


def _tamper(path: str, group: int, rows: int | None, file_rows: int | None) -> None:
    """Rewrite the footer of ``path``: row group ``group`` says ``rows`` rows, and the file
    ``file_rows`` (None: as it was)."""
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[-8:-4], "little")
    meta, _ = thrift.decode(data[-8 - n : -8])
    if rows is not None:
        meta.get_value(4)[1][group].set(3, thrift.I64, rows)  # RowGroup.num_rows
    if file_rows is not None:
        meta.set(3, thrift.I64, file_rows)  # FileMetaData.num_rows
    footer = thrift.encode(meta)
    with open(path, "wb") as f:
        f.write(data[: -8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1")


@pytest.mark.parametrize(
    ("group_rows", "file_rows"),
    [(65, None), (65, 965), (None, 1035)],
    ids=["group-says-65", "group-and-footer-say-965", "footer-says-1035"],
)
def test_footer_rows_contradicting_row_groups_is_a_format_error(
    tmp_path: Any, group_rows: int | None, file_rows: int | None, capsys: Any
) -> None:
    """The footer's rows against its row groups' (the sum), and a row group's against its
    flat columns' values (one level per row): each contradiction is refused, by name."""
    root = str(tmp_path / "t")
    os.makedirs(root)
    path = os.path.join(root, "bad.parquet")
    pq.write_table(pa.table({"x": pa.array(range(1000), pa.int64()),
                             "l": pa.array([[i] for i in range(1000)], pa.list_(pa.int16()))}),
                   path, row_group_size=100)  # fmt: skip
    _tamper(path, 3, group_rows, file_rows)  # the pages hold 1,000 rows
    for make in (lambda: _ds(root), lambda: _ds(root, str(tmp_path / "c"))):
        with pytest.raises(FormatError, match=r"bad\.parquet") as err:
            make()
        assert "rows" in str(err.value)
    assert astream_cli(["convert", root, str(tmp_path / "mds"), "--format", "parquet"]) != 0
    assert "bad.parquet" in capsys.readouterr().err


def test_a_type_astream_does_not_read_is_refused_at_construction(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "t")
    os.makedirs(root)
    pq.write_table(pa.table({"x": [1, 2], "when": pa.array([1, 2], pa.timestamp("ns"))}),
                   os.path.join(root, "a.parquet"))  # fmt: skip
    monkeypatch.setattr(parquet_values, "_have_pandas", lambda: False)
    with pytest.raises(ConfigError, match=r"'when' .*timestamp\[ns\].*pandas"):
        _ds(root)
    assert [s["x"] for s in _ds(root, columns=["x"])] == [1, 2]  # projected out: served
    monkeypatch.undo()
    assert [s["when"].value for s in _ds(root)] == [1, 2]  # pyarrow's pandas.Timestamp
    # what no Parquet file gives today is refused by name too
    union = pa.dense_union([pa.field("a", pa.int32())])
    assert unsupported(union) is not None
    assert unsupported(pa.list_(pa.struct([("u", union)]))) is not None
    assert unsupported(pa.month_day_nano_interval()) is not None
    for t in (pa.map_(pa.string(), pa.list_(pa.int64())), pa.decimal256(40, 2),
              pa.dictionary(pa.int32(), pa.string()), pa.timestamp("us", tz="UTC")):  # fmt: skip
        assert unsupported(t) is None, t


def test_a_file_pyarrow_misreads_is_refused_not_served(tmp_path: Any) -> None:
    """pyarrow writes, for a ``list<bool>`` row group of one empty list with data page v2 and
    tiny pages, a data page of no values first, and then reads the row group as no rows.
    astream decodes with pyarrow, so it cannot do better: it must refuse, never serve the
    rows short (should pyarrow read it right one day, the rows must be the written ones)."""
    root = str(tmp_path / "t")
    os.makedirs(root)
    path = os.path.join(root, "a.parquet")
    table = pa.table({"b": pa.array([[], [True, None]], pa.list_(pa.bool_()))})
    with pq.ParquetWriter(path, table.schema, data_page_version="2.0", data_page_size=16,
                          use_dictionary=False) as w:  # fmt: skip
        w.write_table(table, row_group_size=1)
    ds = _ds(root)
    if pq.ParquetFile(path).read_row_group(0).num_rows == 1:  # pragma: no cover - fixed
        assert [s["b"] for s in ds] == [[], [True, None]]
        return
    with pytest.raises(FormatError, match="row group 0 has 0 rows, index says 1"):
        list(ds)
    with pytest.raises(FormatError, match=r"a\.parquet"):
        ds[0]


def test_null_elements_through_the_shared_decoded_file(tmp_path: Any) -> None:
    """Row groups large enough to be decoded once per node into an Arrow file in the cache
    (mapped by every later reader): the rows holding null elements are the same there."""
    root, cache = str(tmp_path / "t"), str(tmp_path / "cache")
    os.makedirs(root)
    rng = np.random.default_rng(3)
    vals = rng.integers(-(2**62), 2**62, size=(6000, 4)).tolist()
    for i in range(0, 6000, 7):
        vals[i][i % 4] = None
    pq.write_table(pa.table({"tok": pa.array(vals, pa.list_(pa.int64()))}),
                   os.path.join(root, "a.parquet"), row_group_size=3000)  # fmt: skip
    want = rows_of(_files(root))
    first = list(_ds(root, cache))
    sides = [f for f in os.listdir(cache) if f.endswith(".arrow")]
    assert len(sides) == 2  # both row groups decoded into the cache
    again = _ds(root, cache)  # a fresh process state would map them: read them back
    from astream.parquet import io_rowgroup

    io_rowgroup._decoded.clear()
    for got in (first, list(again), [again[i] for i in range(0, 6000, 97)]):
        step = 1 if len(got) == 6000 else 97
        assert all(same_row(g, want[i * step]) for i, g in enumerate(got))
    assert want[7]["tok"][3] is None and want[8]["tok"].dtype == np.int64
