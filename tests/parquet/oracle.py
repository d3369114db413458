"""pyarrow's own reading of a Parquet file as the oracle for astream's sample values.

:func:`expected` turns a row of ``pq.read_table(...).to_pylist()`` into the value astream is
documented to give for it (docs/parquet.md, "Types and nulls"): the same, except a list of
numbers without a null element, which is a NumPy array of the element type. :func:`same`
compares exactly: types, NumPy dtypes, NaN where NaN, the sign of zero."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def numeric_list(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` gives NumPy arrays (a list of integers, float32/64)."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    v = t.value_type
    return bool(pa.types.is_integer(v) or (pa.types.is_floating(v) and not pa.types.is_float16(v)))


def expected(value: Any, t: pa.DataType) -> Any:
    """What astream gives for the pyarrow value ``value`` of a column of type ``t``."""
    if value is None or not numeric_list(t) or any(v is None for v in value):
        return value
    v = t.value_type if not pa.types.is_dictionary(t) else t.value_type.value_type
    return np.asarray(value, dtype=np.dtype(v.to_pandas_dtype()))


def rows_of(paths: list[str], columns: list[str] | None = None) -> list[dict[str, Any]]:
    """pyarrow's rows of the files ``paths`` in that order, as astream gives them."""
    out: list[dict[str, Any]] = []
    for p in paths:
        table = pq.read_table(p, columns=columns)
        types = {f.name: f.type for f in table.schema}
        out += [{k: expected(v, types[k]) for k, v in r.items()} for r in table.to_pylist()]
    return out


def _same_float(g: float, w: float) -> bool:
    if math.isnan(w):
        return math.isnan(g)
    return g == w and math.copysign(1.0, g) == math.copysign(1.0, w)


def same(got: Any, want: Any) -> bool:
    """Exactly equal (see the module docstring)."""
    if isinstance(want, np.ndarray):
        if not isinstance(got, np.ndarray) or got.dtype != want.dtype or got.shape != want.shape:
            return False
        if want.dtype.kind == "f":
            return all(_same_float(float(g), float(w)) for g, w in zip(got, want))
        return bool(np.array_equal(got, want))
    if type(got) is not type(want):
        return False
    if isinstance(want, float):
        return _same_float(got, want)
    if isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return list(got) == list(want) and all(same(got[k], want[k]) for k in want)
    if getattr(want, "tzinfo", None) is not None and got.tzinfo != want.tzinfo:
        return False
    return bool(got == want)


def same_row(got: dict[str, Any], want: dict[str, Any]) -> bool:
    return set(got) == set(want) and all(same(got[k], want[k]) for k in want)
