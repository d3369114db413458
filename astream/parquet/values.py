"""What a decoded Parquet column gives as sample values, and which Arrow types are read at all.

May import: numpy, pyarrow (lazily, inside functions), ``astream.errors``. No I/O.

Values
------
:func:`column_values` turns one decoded column (a row group's, dictionaries decoded) into a
sequence that ``[i]`` indexes, whose items equal pyarrow's own ``to_pylist()`` of that row,
with one documented exception: a list of numbers is a NumPy array of the element type.

- Numbers (every integer width, ``float32``/``float64``): Python ``int``/``float``, read from
  the data buffer (exact: ``uint64`` and ``int64`` extremes, NaN, ``-0.0``); nulls ``None``.
- ``binary``/``large_binary``: ``bytes``; ``string``/``large_string``: ``str``, sliced from
  the data buffer when the row is read.
- ``list<number>``/``large_list<number>`` (integers, ``float32``, ``float64``): a NumPy view
  of the row group's values, of the element dtype. A row holding a null *element* has no exact
  NumPy form (an integer array has no null; a float array's NaN is a value, not a null), so
  that row -- and only it -- is a Python ``list`` of the elements, ``None`` at the nulls, as
  ``to_pylist`` gives it. A null row is ``None``.
- Every other accepted type goes through pyarrow's ``to_pylist`` as is.

Types
-----
:func:`unsupported` says why an Arrow type is not read (None: it is): the accepted types are
those whose values above are tested against pyarrow's reading; anything else (unions,
run-end encoded arrays, intervals: none of them comes out of a Parquet file today) is refused
when the dataset is built (:func:`check_columns`), naming the column and its type. A
nanosecond timestamp or duration is accepted when pandas is installed: pyarrow gives those
values as ``pandas.Timestamp``/``Timedelta`` (without pandas it fails on any value that is not
a whole microsecond, so it is refused up front instead of in the middle of an epoch).
"""

from __future__ import annotations

from typing import Any

from astream.errors import ConfigError

__all__ = [
    "check_columns",
    "column_values",
    "flat_values",
    "list_offsets",
    "unsupported",
    "validity",
]


# -- per-row values ----------------------------------------------------------------------------


def validity(arr: Any) -> list[bool] | None:
    """Per row, whether it is not null (None when no row is), from the validity bitmap."""
    import numpy as np

    if not arr.null_count:
        return None
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    flags = np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)]
    return flags.astype(bool).tolist()  # type: ignore[no-any-return]


def _numeric(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or (pa.types.is_floating(t) and not pa.types.is_float16(t)))


def flat_values(arr: Any) -> Any:
    """A numeric array as a NumPy view of its data buffer (no copy; pyarrow's ``to_numpy``
    imports pandas, ~0.3-1 s in each fresh worker). Slots under nulls hold whatever the
    writer left there: callers mask them."""
    import numpy as np

    dtype = np.dtype(arr.type.to_pandas_dtype())
    data = np.frombuffer(arr.buffers()[1], dtype=dtype)
    return data[arr.offset : arr.offset + len(arr)]


def list_offsets(arr: Any) -> list[int]:
    """The ``len(arr) + 1`` value offsets of a list/binary/string array, as ints."""
    import numpy as np
    import pyarrow as pa

    t = arr.type
    wide = pa.types.is_large_list(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)
    o = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32)
    return o[arr.offset : arr.offset + len(arr) + 1].tolist()  # type: ignore[no-any-return]


def _holes(child: Any, offsets: list[int]) -> Any:
    """Per list row, whether it holds a null element (None when no element is null), and the
    elements' validity (``child``'s positions)."""
    import numpy as np

    valid = validity(child)
    if valid is None:
        return None, None
    ok = np.asarray(valid, dtype=bool)
    offs = np.asarray(offsets, dtype=np.int64)
    nulls = np.concatenate([np.zeros(1, np.int64), np.cumsum(~ok, dtype=np.int64)])
    return (nulls[offs[1:]] > nulls[offs[:-1]]).tolist(), ok


class _ListColumn:
    """A ``list<number>`` column: row ``i`` is a NumPy view of the row group's flat values, or,
    when it holds a null element, a Python list with ``None`` there (see the module
    docstring)."""

    __slots__ = ("_holes", "_offsets", "_ok", "_valid", "_values")

    def __init__(self, values: Any, offsets: list[int], valid: list[bool] | None,
                 holes: list[bool] | None, ok: Any) -> None:  # fmt: skip
        self._values, self._offsets, self._valid = values, offsets, valid
        self._holes, self._ok = holes, ok

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Any:
        if self._valid is not None and not self._valid[i]:
            return None
        a, b = self._offsets[i], self._offsets[i + 1]
        if self._holes is not None and self._holes[i]:
            vals = self._values[a:b].tolist()  # exact Python ints/floats, as pyarrow's
            return [v if ok else None for v, ok in zip(vals, self._ok[a:b].tolist())]
        return self._values[a:b]


class _BytesColumn:
    """A binary (``bytes``) or string (``str``) column, sliced from the row group's data buffer
    when a row is read (a shuffle reads each row group's rows in several processes, each only
    its own)."""

    __slots__ = ("_data", "_offsets", "_text", "_valid")

    def __init__(self, data: Any, offsets: list[int], valid: list[bool] | None, text: bool):
        self._data, self._offsets, self._valid, self._text = data, offsets, valid, text

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Any:
        if self._valid is not None and not self._valid[i]:
            return None
        v = self._data[self._offsets[i] : self._offsets[i + 1]]
        return str(v, "utf-8") if self._text else bytes(v)


def column_values(col: Any) -> Any:
    """One column as per-row Python/NumPy values (see the module docstring): a sequence that
    ``[i]`` indexes. Numbers, ``list<number>`` and binary/string columns are read from the
    Arrow buffers directly; other types through ``to_pylist``."""
    import pyarrow as pa

    arr = col
    if isinstance(col, pa.ChunkedArray):  # one chunk per row group: no copy then
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type):
        # the child is the whole values array (a sliced list's child is not sliced): the
        # offsets index it, and so does its validity
        vals = arr.values
        offsets = list_offsets(arr)
        holes, ok = _holes(vals, offsets)
        return _ListColumn(flat_values(vals), offsets, validity(arr), holes, ok)
    if _numeric(t):
        values: list[Any] = flat_values(arr).tolist()
        valid = validity(arr)
        if valid is not None:
            values = [x if ok else None for x, ok in zip(values, valid)]
        return values
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    if text or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        buf = arr.buffers()[2]
        data = memoryview(buf) if buf is not None else memoryview(b"")
        return _BytesColumn(data, list_offsets(arr), validity(arr), text)
    return list(arr.to_pylist())


# -- accepted types ----------------------------------------------------------------------------


def _have_pandas() -> bool:
    import importlib.util

    return importlib.util.find_spec("pandas") is not None


def _is(t: Any, *kinds: str) -> bool:
    """Whether ``t`` is of one of these ``pyarrow.types.is_<kind>`` (a kind this pyarrow does
    not know is none)."""
    import pyarrow as pa

    return any(getattr(pa.types, f"is_{k}", lambda _: False)(t) for k in kinds)


def unsupported(t: Any) -> str | None:
    """Why Arrow type ``t`` is not read (None: it is; see the module docstring)."""
    import pyarrow as pa

    types = pa.types
    if isinstance(t, pa.ExtensionType):  # uuid, json, tensors...: pyarrow's own values
        return unsupported(t.storage_type)
    if types.is_dictionary(t):
        return unsupported(t.value_type)
    if types.is_timestamp(t) or types.is_duration(t):
        if t.unit == "ns" and not _have_pandas():
            return "pyarrow gives nanosecond values as pandas objects: install pandas"
        return None
    if _is(t, "null", "boolean", "integer", "floating", "decimal", "date", "time", "string",
           "large_string", "string_view", "binary", "large_binary", "binary_view",
           "fixed_size_binary"):  # fmt: skip
        return None
    if _is(t, "list", "large_list", "fixed_size_list", "list_view", "large_list_view"):
        return unsupported(t.value_type)
    if types.is_map(t):
        return unsupported(t.key_type) or unsupported(t.item_type)
    if types.is_struct(t):
        for k in range(t.num_fields):
            why = unsupported(t.field(k).type)
            if why is not None:
                return why
        return None
    return "astream does not read this type"


def check_columns(schema: Any, columns: tuple[str, ...] | list[str], source: str) -> None:
    """A ``ConfigError`` naming the first of ``columns`` (fields of the Arrow ``schema`` of
    ``source``, a file's URL) whose type is not read."""
    for name in columns:
        t = schema.field(name).type
        why = unsupported(t)
        if why is not None:
            raise ConfigError(
                f"columns: {name!r} of {source} is Arrow {t}, which astream cannot serve "
                f"({why}); project it out with columns=[...]"
            )
