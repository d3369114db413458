"""Spark SQL types -> MDS encodings: inference, and checking the columns a user gives.

Theory of operation
-------------------
Inference follows the reference's table exactly (so ``dataframe_to_mds`` without ``columns``
writes the same shards as ``streaming``): ByteType ``uint8``, ShortType ``uint16``, IntegerType
``int32``, LongType ``int64``, FloatType ``float32``, DoubleType ``float64``, DecimalType
``str_decimal``, StringType ``str``, BinaryType ``bytes``, and arrays of Short/Integer/Long/
Float/Double as ``ndarray:int16/int32/int64/float32/float64``. Every other type (booleans,
dates, timestamps, intervals, maps, structs, other arrays) has no inferred encoding and is a
ConfigError naming the column, raised on the driver before any job runs.

Given columns are checked against the schema: each must exist, be a valid encoding, and be one
a value of that Spark type can be stored as -- the inferred one, ``int`` for integral types,
``ndarray:DTYPE[:SHAPE]`` of the inferred dtype for arrays, ``json`` for JSON-compatible types
(strings, ints, floats, booleans, null, and arrays/maps/structs of them), ``pkl`` for any type,
and ``bytes``/``pil``/``png``/``jpeg``/``jpeg_array`` for binary data. The reference is stricter
(it refuses ``int`` for a LongType); what it accepts is accepted here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from astream.core.encodings import is_encoding
from astream.errors import ConfigError

__all__ = ["check_columns", "infer_columns"]

_SCALARS = {
    "ByteType": "uint8",
    "ShortType": "uint16",
    "IntegerType": "int32",
    "LongType": "int64",
    "FloatType": "float32",
    "DoubleType": "float64",
    "DecimalType": "str_decimal",
    "StringType": "str",
    "BinaryType": "bytes",
}
_ARRAYS = {
    "ShortType": "ndarray:int16",
    "IntegerType": "ndarray:int32",
    "LongType": "ndarray:int64",
    "FloatType": "ndarray:float32",
    "DoubleType": "ndarray:float64",
}
_INTEGRAL = {"ByteType", "ShortType", "IntegerType", "LongType"}
_JSON_LEAVES = {"StringType", "IntegerType", "FloatType", "BooleanType", "NullType"}
_BINARY_ENCODINGS = {"bytes", "pil", "png", "jpeg", "jpeg_array", "jpegarray"}


def _kind(dtype: Any) -> str:
    return type(dtype).__name__


def mapped(dtype: Any) -> str | None:
    """The inferred encoding of a Spark type, or None if it has none."""
    kind = _kind(dtype)
    if kind == "ArrayType":
        return _ARRAYS.get(_kind(dtype.elementType))
    return _SCALARS.get(kind)


def _json_ok(dtype: Any) -> bool:
    kind = _kind(dtype)
    if kind == "StructType":
        return all(_json_ok(f.dataType) for f in dtype.fields)
    if kind == "ArrayType":
        return _json_ok(dtype.elementType)
    if kind == "MapType":
        return _json_ok(dtype.keyType) and _json_ok(dtype.valueType)
    return kind in _JSON_LEAVES


def infer_columns(schema: Any) -> dict[str, str]:
    """Column name -> encoding for every field of a Spark ``StructType``."""
    out: dict[str, str] = {}
    for field in schema.fields:
        enc = mapped(field.dataType)
        if enc is None:
            raise ConfigError(
                f"column {field.name!r}: Spark type {field.dataType.simpleString()} has no MDS "
                "encoding; cast it, or give mds_kwargs['columns'] (json/pkl) for it"
            )
        out[field.name] = enc
    return out


def _allowed(dtype: Any, enc: str) -> bool:
    if enc == "pkl":
        return True
    if enc == "json":
        return _json_ok(dtype)
    kind = _kind(dtype)
    if kind == "BinaryType":
        return enc in _BINARY_ENCODINGS
    base = mapped(dtype)
    if base is None:
        return False
    if enc == base or (enc == "int" and kind in _INTEGRAL):
        return True
    return base.startswith("ndarray:") and enc.startswith(base + ":")


def check_columns(schema: Any, columns: Mapping[str, str]) -> dict[str, str]:
    """Check user-given ``columns`` against ``schema``; the columns as a plain dict."""
    if not isinstance(columns, Mapping) or not columns:
        raise ConfigError(f"mds_kwargs['columns'] must be a non-empty dict, got {columns!r}")
    fields = {f.name: f.dataType for f in schema.fields}
    for name, enc in columns.items():
        if name not in fields:
            raise ConfigError(
                f"mds_kwargs['columns']: {name!r} is not a column of the DataFrame "
                f"(it has {list(fields)})"
            )
        if not isinstance(enc, str) or not is_encoding(enc):
            raise ConfigError(f"mds_kwargs['columns']: {name!r} has unknown encoding {enc!r}")
        if not _allowed(fields[name], enc):
            raise ConfigError(
                f"mds_kwargs['columns']: column {name!r} of Spark type "
                f"{fields[name].simpleString()} cannot be stored as {enc!r}"
            )
    return dict(columns)
