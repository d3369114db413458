"""Property: every sample astream serves from a Parquet table equals pyarrow's own reading of
it (``oracle.expected``), value by value, for generated tables over every type astream
documents -- integers of each width at their extremes, floats with NaN and -0.0, bool,
strings (dictionary-encoded too), binary, lists and nested lists, structs, timestamps, dates,
decimals -- with nulls anywhere (rows, list elements, struct fields), written by pyarrow with
varied row groups (zero-row ones and zero-row files too), dictionary encoding, compression,
data page version and page size; read in place and through the cache, by iteration and by
``ds[i]``, whole or projected."""

from __future__ import annotations

import datetime as dt
import decimal
import os
import tempfile
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from astream import StreamingDataset
from astream.errors import FormatError
from astream.parquet.io_pages import PageRows, decode_rows, layout_of, page_ranges

from .oracle import expected, rows_of, same_row

Strategy = st.SearchStrategy[Any]

_INTS = {
    pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64,
    pa.uint8(): -8, pa.uint16(): -16, pa.uint32(): -32, pa.uint64(): -64,
}  # fmt: skip


def _int(bits: int) -> Strategy:
    if bits < 0:  # unsigned
        return st.integers(0, 2**-bits - 1)
    return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)


def _dec(precision: int, scale: int) -> Strategy:
    top = 10**precision - 1
    exact = decimal.Context(prec=precision)
    return st.integers(-top, top).map(lambda n: decimal.Decimal(n).scaleb(-scale, exact))


_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=6)
_F32 = st.floats(width=32)  # NaN, infinities, -0.0 and subnormals included
_F64 = st.floats()
_EPOCH = dt.datetime(1970, 1, 1)


def _leaf_kinds() -> dict[str, tuple[pa.DataType, Strategy]]:
    """Scalar kinds: name -> (Arrow type, values)."""
    out: dict[str, tuple[pa.DataType, Strategy]] = {
        str(t): (t, _int(bits)) for t, bits in _INTS.items()
    }
    out |= {
        "float16": (pa.float16(), st.floats(width=16).map(np.float16)),
        "float32": (pa.float32(), _F32),
        "float64": (pa.float64(), _F64),
        "bool": (pa.bool_(), st.booleans()),
        "string": (pa.string(), _TEXT),
        "large_string": (pa.large_string(), _TEXT),
        "binary": (pa.binary(), st.binary(max_size=6)),
        "large_binary": (pa.large_binary(), st.binary(max_size=6)),
        "fixed_binary": (pa.binary(3), st.binary(min_size=3, max_size=3)),
        "ts_ms": (pa.timestamp("ms"), st.integers(-(2**40), 2**40)),
        "ts_us_utc": (pa.timestamp("us", tz="UTC"), st.integers(-(2**55), 2**55)),
        "ts_ns": (pa.timestamp("ns"), st.integers(-(2**62), 2**62)),
        "date32": (pa.date32(), st.dates().map(lambda d: (d - _EPOCH.date()).days)),
        "time_us": (pa.time64("us"), st.integers(0, 86_400 * 10**6 - 1)),
        "decimal_9_3": (pa.decimal128(9, 3), _dec(9, 3)),
        "decimal_38_0": (pa.decimal128(38, 0), _dec(38, 0)),
        "decimal256_45_5": (pa.decimal256(45, 5), _dec(45, 5)),
    }
    return out


LEAVES = _leaf_kinds()
_LIST_OF = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
            "float32", "float64", "string", "bool", "float16"]  # fmt: skip


def _maybe(s: Strategy) -> Strategy:
    return st.none() | s


def _kinds() -> dict[str, tuple[pa.DataType, Strategy]]:
    """Every column kind: the scalars, lists of them (elements nullable), a large list, a
    nested list, a struct with a list inside, a dictionary-encoded string (marked by type)."""
    out = dict(LEAVES)
    for name in _LIST_OF:
        t, s = LEAVES[name]
        out[f"list<{name}>"] = (pa.list_(t), st.lists(_maybe(s), max_size=5))
    t16, s16 = LEAVES["int16"]
    out["large_list<int16>"] = (pa.large_list(t16), st.lists(_maybe(s16), max_size=5))
    i64 = LEAVES["int64"][1]
    out["list<list<int64>>"] = (
        pa.list_(pa.list_(pa.int64())),
        st.lists(_maybe(st.lists(_maybe(i64), max_size=3)), max_size=3),
    )
    rec = pa.struct([("a", pa.int32()), ("b", pa.list_(pa.float64())), ("c", pa.string())])
    out["struct"] = (
        rec,
        st.fixed_dictionaries({
            "a": _maybe(_int(32)), "b": _maybe(st.lists(_maybe(_F64), max_size=3)),
            "c": _maybe(_TEXT),
        }),
    )  # fmt: skip
    out["dict<string>"] = (pa.dictionary(pa.int32(), pa.string()), _TEXT)
    return out


KINDS = _kinds()


def _array(t: pa.DataType, values: list[Any]) -> pa.Array:
    if pa.types.is_dictionary(t):
        return pa.array(values, t.value_type).dictionary_encode()
    return pa.array(values, t)


@st.composite
def tables(draw: Callable[..., Any]) -> tuple[pa.Table, list[int]]:
    """A table of 1-5 columns (some not nullable) and 0-14 rows, and the row counts of the
    files it is cut into (a zero count: a file of no rows)."""
    names = draw(st.lists(st.sampled_from(sorted(KINDS)), min_size=1, max_size=5, unique=True))
    n = draw(st.integers(0, 14))
    fields, arrays = [], []
    for k, name in enumerate(names):
        t, values = KINDS[name]
        nullable = draw(st.booleans()) or k == 0
        vals = draw(st.lists(_maybe(values) if nullable else values, min_size=n, max_size=n))
        fields.append(pa.field(f"c{k}", t, nullable=nullable))
        arrays.append(_array(t, vals))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=2)))
    counts = [b - a for a, b in zip([0, *cuts], [*cuts, n])]
    return table, counts


_WRITER = st.fixed_dictionaries({
    "use_dictionary": st.booleans(),
    "compression": st.sampled_from(["none", "snappy", "zstd", "gzip"]),
    "data_page_version": st.sampled_from(["1.0", "2.0"]),
    "data_page_size": st.sampled_from([1 << 20, 16]),  # 16 bytes: a page every few values
    "write_page_index": st.booleans(),
})  # fmt: skip


@pytest.fixture(scope="module")
def work() -> Any:
    with tempfile.TemporaryDirectory(prefix="pq-values-") as d:
        yield d


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    drawn=tables(),
    writer=_WRITER,
    rg=st.sampled_from([1, 2, 3, 5, 64]),
    empty_group=st.booleans(),
    through_cache=st.booleans(),
    data=st.data(),
)
def test_samples_equal_pyarrows_reading(
    work: str, drawn: tuple[pa.Table, list[int]], writer: dict[str, Any], rg: int,
    empty_group: bool, through_cache: bool, data: st.DataObject,
) -> None:  # fmt: skip
    table, counts = drawn
    root = tempfile.mkdtemp(dir=work)
    empty_group = empty_group and counts[0] > 0
    paths = _write(os.path.join(root, "t"), table, counts, writer, rg, empty_group)
    names = table.column_names
    columns = None
    if data.draw(st.booleans(), label="project"):
        columns = data.draw(st.permutations(names), label="order")[
            : data.draw(st.integers(1, len(names)), label="width")
        ]
    if not table.num_rows:
        return  # an empty table: EmptyDatasetError, as an empty MDS dataset (test_values.py)
    want = _pyarrows_reading(paths, columns, table)
    kw: dict[str, Any] = {"format": "parquet", "batch_size": 3, "columns": columns}
    if through_cache:
        ds = StreamingDataset(remote=os.path.join(root, "t"), local=os.path.join(root, "c"),
                              **kw)  # fmt: skip
    else:
        ds = StreamingDataset(local=os.path.join(root, "t"), **kw)
    order = data.draw(st.permutations(range(table.num_rows)), label="ds[i] order")
    try:
        got = list(ds)
        by_index = {i: ds[i] for i in order}
    except FormatError:
        assert want is None, "astream refused a file that pyarrow reads as written"
        return  # pyarrow misreads that file: refusing it is right
    assert want is not None, "pyarrow misreads this file, and astream served it"
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert same_row(g, w), (i, g, w)
    for i in order:
        assert same_row(by_index[i], want[i]), (i, by_index[i], want[i])
    if writer["write_page_index"]:
        _by_pages(ds, os.path.join(root, "t"), want, data)


def _by_pages(ds: StreamingDataset, root: str, want: list[dict[str, Any]],
              data: st.DataObject) -> None:  # fmt: skip
    """Rows of each row group decoded from their pages alone (what a cold first batch and
    ``ds[i]`` of a large row group do): pyarrow's values too."""
    first = 0
    for entry in ds.engine.catalog.entries:
        lay = layout_of(entry)
        if lay is not None:  # every projected column one leaf, with an offset index
            with open(os.path.join(root, entry.source.key), "rb") as f:
                buf = f.read()
            got = {c.index_range: buf[c.index_range[0] : c.index_range[1]] for c in lay.columns}
            rows = sorted(data.draw(st.sets(st.integers(0, entry.samples - 1), min_size=1),
                                    label="rows by pages"))  # fmt: skip
            need = page_ranges(entry, got, rows)
            assert need is not None
            got.update({r: buf[r[0] : r[1]] for r in need})
            table = decode_rows(entry, got, rows)
            event(f"rows by pages: {'decoded' if table is not None else 'not trusted'}")
            if table is not None:
                pages = PageRows(entry, table, {r: k for k, r in enumerate(rows)})
                for r in rows:
                    assert same_row(pages.sample(r), want[first + r]), (first, r)
        first += entry.samples


def _pyarrows_reading(paths: list[str], columns: list[str] | None,
                      table: pa.Table) -> list[dict[str, Any]] | None:  # fmt: skip
    """The oracle: pyarrow's reading of the files, as astream gives it -- or None where it
    is not the table written (pyarrow's writer emits a data page of no values that its
    reader then misreads, for list<bool> with data page v2 and tiny pages: a row group of one
    row read as none)."""
    written = table.select(columns) if columns is not None else table
    types = {f.name: f.type for f in written.schema}
    wrote = [{k: expected(v, types[k]) for k, v in r.items()} for r in written.to_pylist()]
    try:
        want = rows_of(paths, columns)
    except pa.ArrowException:
        event("pyarrow cannot read the file it wrote")
        return None
    if len(want) != len(wrote) or not all(same_row(g, w) for g, w in zip(want, wrote)):
        event("pyarrow misreads the file it wrote")
        return None
    return want


def _write(root: str, table: pa.Table, counts: list[int], writer: dict[str, Any], rg: int,
               empty_group: bool) -> list[str]:  # fmt: skip
    """The table cut into ``counts`` rows per file (a zero count: a file of no rows), row
    groups of ``rg`` rows; with ``empty_group``, the first file has a row group of no rows
    after its first row. The paths, in key order."""
    os.makedirs(root)
    paths, at = [], 0
    for k, n in enumerate(counts):
        path = os.path.join(root, f"part-{k:02d}.parquet")
        part = table.slice(at, n)
        at += n
        with pq.ParquetWriter(path, table.schema, **writer) as w:
            if empty_group and k == 0:
                w.write_table(part.slice(0, 1), row_group_size=rg)
                w.write_table(part.slice(0, 0))
                part = part.slice(1)
            w.write_table(part, row_group_size=rg)
        paths.append(path)
    return paths
