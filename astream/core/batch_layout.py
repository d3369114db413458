"""How the columns of one MDS shard layout are batched: their kinds, and where a sample's
table keeps each column (the column-batch decoder of ``core/batchdecode.py``).

Pure: stdlib + numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from astream.core.encodings import NDARRAY_DTYPE_CODES, get_coder

__all__ = ["CODE_DTYPES", "CODE_ITEMSIZE", "I64", "U8", "ColumnSpec", "Layout", "column_specs"]

I64 = np.ndarray[Any, np.dtype[np.int64]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]
CODE_DTYPES = {code: np.dtype(name) for name, code in NDARRAY_DTYPE_CODES.items()}
CODE_ITEMSIZE = np.zeros(256, np.int64)  # 0: not a dtype code
for _code, _dt in CODE_DTYPES.items():
    CODE_ITEMSIZE[_code] = _dt.itemsize
_SCALARS = {
    "int": np.dtype("<i8"),
    **{n: np.dtype(n).newbyteorder("<") for n in (
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64")},
}  # fmt: skip
_SMALL_FIXED = 16  # fixed columns of at most this many bytes are copied into the table


class ColumnSpec:
    """How one column of a shard layout is batched (see ``core/batchdecode.py``)."""

    __slots__ = ("dtype", "encoding", "kind", "name", "shape", "size", "var_index")

    def __init__(self, name: str, encoding: str, size: int | None, var_index: int) -> None:
        self.name = name
        self.encoding = encoding
        self.size = size  # bytes per value when fixed
        self.var_index = var_index  # index among the u32 lengths, -1 when fixed
        self.shape: tuple[int, ...] = ()
        self.dtype: np.dtype[Any] | None = np.dtype(np.uint8)
        base, _, config = encoding.partition(":")
        if encoding in _SCALARS:
            self.kind, self.dtype = "fixed", _SCALARS[encoding]
        elif base == "ndarray":
            args = config.split(":") if config else []
            dt = np.dtype(args[0]).newbyteorder("<") if args else None
            if len(args) == 2:
                self.kind, self.dtype = "fixed", dt
                self.shape = tuple(int(d) for d in args[1].split(","))
            else:
                self.kind, self.dtype = "array", dt  # None: the dtype code is in each value
        elif encoding in ("str", "str_int", "str_float"):
            self.kind = encoding
        else:
            get_coder(encoding)  # a known encoding: batched as its stored bytes
            self.kind = "bytes"


def column_specs(
    names: list[str], encodings: list[str], sizes: list[int | None]
) -> list[ColumnSpec]:
    out, nvar = [], 0
    for name, enc, size in zip(names, encodings, sizes):
        out.append(ColumnSpec(name, enc, size, -1 if size is not None else nvar))
        nvar += size is None
    return out


class Layout:
    """The columns of one shard layout and where each keeps its per-sample table entries:
    ``small[k]`` (index into the small-value tables) for fixed columns of at most
    ``_SMALL_FIXED`` bytes, else ``start[k]`` (column of the start table), and for untyped
    ndarray columns ``code[k]`` (column of the dtype-code table)."""

    def __init__(self, specs: list[ColumnSpec]) -> None:
        self.specs = specs
        self.nvar = sum(1 for c in specs if c.var_index >= 0)
        self.fixed = sum(c.size or 0 for c in specs)
        self.small: list[int] = []
        self.start: list[int] = []
        self.code: list[int] = []
        ns = nst = nc = 0
        for c in specs:
            if c.kind == "fixed" and (c.size or 0) <= _SMALL_FIXED:
                self.small.append(ns)
                self.start.append(-1)
                ns += 1
            else:
                self.small.append(-1)
                self.start.append(nst)
                nst += 1
            if c.kind == "array" and c.dtype is None:
                self.code.append(nc)
                nc += 1
            else:
                self.code.append(-1)
        self.nsmall, self.nstart, self.ncode = ns, nst, nc
