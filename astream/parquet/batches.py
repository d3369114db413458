"""Columnar batches of a decoded row group: column specs, and where each value lies.

Pure (numpy; pyarrow lazily): no store, no cache directory. The columnar batch decoder
(``runtime/batch.py``, ``core/batchdecode.py``) gathers values from one image in memory. A
decoded row group's table has every buffer inside one Arrow IPC image (the mapped decoded file,
or a private buffer serialised once: ``RowGroupHandle.columnar`` of ``parquet/io_rowgroup.py``),
so :func:`row_group_table` gives each value's start and length in that image, exactly what the
MDS batch decoder gathers from. A row holding a null (in any column, or inside a list) has no
column form: it is flagged, and :func:`null_error` names the first null column met.
"""

from __future__ import annotations

from typing import Any

from astream.errors import FormatError
from astream.parquet.arrow import file_metadata
from astream.parquet.table import RowGroupShard
from astream.parquet.values import flat_values, list_offsets, validity

__all__ = ["batch_specs", "np_dtype", "null_error", "row_group_table"]

_SCALAR_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _batch_encoding(t: Any) -> str | None:
    """The MDS encoding a column of Arrow type ``t`` batches as (None: it has no column form):
    numbers as themselves, ``bool`` as ``bool``, binary as ``bytes``, strings as ``str``,
    ``list<number>`` as a dynamic 1-D ``ndarray`` of the element type."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return str(np_dtype(t))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        v = t.value_type
        if pa.types.is_integer(v) or pa.types.is_floating(v):
            return f"ndarray:{np_dtype(v)}"
    return None


def np_dtype(t: Any) -> Any:
    import numpy as np

    return np.dtype(t.to_pandas_dtype())


def batch_specs(entry: RowGroupShard, source: str) -> list[Any]:
    """The columnar decoder's column specs for a row group's projection (from the footer's
    Arrow schema); a column without a column form is a ``ConfigError`` naming it."""
    import numpy as np

    from astream.core.batch_layout import ColumnSpec
    from astream.errors import ConfigError

    assert entry.source is not None
    schema = file_metadata(entry.source).schema.to_arrow_schema()
    specs: list[Any] = []
    nvar = 0
    for name in entry.projection:
        t = schema.field(name).type
        enc = _batch_encoding(t)
        if enc is None:
            raise ConfigError(
                f"batch output: column {name!r} of {source} is Arrow {t}, which has no column "
                "form (numbers, bool, binary, strings and lists of numbers do; project it out "
                "with columns=[...], or iterate samples)"
            )
        if enc == "bool":
            c = ColumnSpec(name, "uint8", 1, -1)
            c.dtype = np.dtype(np.bool_)
        elif enc in ("bytes", "str") or enc.startswith("ndarray:"):
            c = ColumnSpec(name, enc, None, nvar)
            nvar += 1
        else:
            c = ColumnSpec(name, enc, int(np.dtype(enc).itemsize), -1)
        specs.append(c)
    return specs


def _addr(buf: Any, base: int, size: int) -> int:
    """Offset of Arrow buffer ``buf`` in the IPC image at address ``base`` of ``size`` bytes."""
    if not buf.size:
        return 0  # no value has a byte: nothing is read from it
    at = int(buf.address) - base
    if at < 0 or at + int(buf.size) > size:
        raise FormatError("a decoded column lies outside its row group's decoded image")
    return at


def _validity(arr: Any) -> Any:
    """Per row, True where the value is null (None when no row is)."""
    import numpy as np

    if not arr.null_count:
        return None
    valid = validity(arr)
    assert valid is not None
    return ~np.asarray(valid, bool)


def _null_elements(child: Any, offs: Any) -> Any:
    """Per list row (``offs``: its ``n + 1`` offsets into ``child``), its null elements."""
    import numpy as np

    nulls = _validity(child)
    if nulls is None:
        return np.zeros(len(offs) - 1, np.int64)
    cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(nulls, dtype=np.int64)])
    return cum[offs[1:]] - cum[offs[:-1]]


def row_group_table(handle: Any, entry: RowGroupShard, layout: Any) -> Any:
    """The :class:`~astream.core.sample_table.SampleTable` of an open row group: where every
    value of every row lies in its decoded IPC image (``RowGroupHandle.columnar``). A row with
    a null in any column (or inside a list) is flagged; :func:`null_error` says which."""
    import numpy as np

    from astream.core.sample_table import SampleTable

    ipc, table = handle.columnar(entry)
    base, size = int(ipc.address), int(ipc.size)
    n = table.num_rows
    small: list[Any] = []
    start = np.zeros((n, layout.nstart), np.int64)
    lens = np.zeros((n, layout.nvar), np.int64)
    bad = np.zeros(n, bool)
    for k, c in enumerate(layout.specs):
        arr = table.column(c.name).chunk(0)
        nulls = _validity(arr)
        if nulls is not None:
            bad |= nulls
        t = arr.type
        if c.kind == "fixed":
            if c.dtype == np.bool_:
                bits = np.frombuffer(arr.buffers()[1], np.uint8)
                vals = np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + n]
            else:
                if np_dtype(t) != c.dtype:
                    raise FormatError(f"column {c.name!r} is {t}, expected {c.dtype}")
                vals = flat_values(arr)
            small.append(np.ascontiguousarray(vals).view(np.uint8).reshape(n, int(c.size or 0)))
            continue
        offs = np.asarray(list_offsets(arr), np.int64)
        if c.kind == "array":
            child = arr.values
            item = c.dtype.itemsize
            if np_dtype(child.type) != c.dtype:
                raise FormatError(f"column {c.name!r} is {t}, expected {c.dtype} elements")
            if child.null_count:  # a null element flags its row
                bad |= _null_elements(child, offs) > 0
            data = child.buffers()[1]
            at = _addr(data, base, size) + child.offset * item if data is not None else 0
            start[:, layout.start[k]] = at + offs[:-1] * item
            lens[:, c.var_index] = (offs[1:] - offs[:-1]) * item
        else:
            data = arr.buffers()[2]
            at = _addr(data, base, size) if data is not None else 0
            start[:, layout.start[k]] = at + offs[:-1]
            lens[:, c.var_index] = offs[1:] - offs[:-1]
    start[bad] = 0
    lens[bad] = 0
    return SampleTable(n, small, start, lens, np.zeros((n, 0), np.uint8), bad)


def null_error(handle: Any, entry: RowGroupShard, rows: list[int], source: str) -> Any:
    """The error for a batch holding row(s) ``rows`` of this row group flagged by
    :func:`row_group_table`: a ``ConfigError`` naming the first null column met."""
    import numpy as np
    import pyarrow as pa

    from astream.errors import ConfigError

    _, table = handle.columnar(entry)
    for name in table.column_names:
        arr = table.column(name).chunk(0)
        nulls = _validity(arr)
        hit = [] if nulls is None else [r for r in rows if nulls[r]]
        what = "null"
        listy = pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
        if not hit and listy and arr.values.null_count:
            inner = _null_elements(arr.values, np.asarray(list_offsets(arr), np.int64))
            hit = [r for r in rows if inner[r]]
            what = "a list holding a null"
        if hit:
            return ConfigError(
                f"batch output has no form for nulls: column {name!r} is {what} in row "
                f"{hit[0]} of row group {entry.row_group} of {source} (fill the nulls, "
                "project the column out with "
                "columns=[...], or iterate samples)"
            )
    return AssertionError("a flagged row has no null")  # pragma: no cover
