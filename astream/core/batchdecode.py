"""Columnar decode of MDS samples: a planned batch becomes one array per column.

Theory of operation
-------------------
An MDS sample is ``u32 lengths of the variable-size columns | column values in column
order``. For a set of samples of one shard (a *group*), everything about where each column's
value lies follows from the sample offsets and those lengths, so it is computed for all the
samples at once with numpy: one gather reads the length headers, cumulative sums give every
column's start. Nothing is decoded per sample.

Decoding a batch is two phases so that the output can be allocated once, at its final size,
by the caller's allocator (private numpy memory, or a worker's shared-memory slot):

1. :meth:`ColumnBatch.add` (per group): locate each column's bytes in the group's shard buffer
   -- starts and byte lengths, and for ndarray columns with a shape header, the payload after
   it (header parsed vectorised, its counts checked against the lengths).
2. :meth:`ColumnBatch.finish`: lengths in batch order give each output's shape; the allocator
   is asked for every array; then one offsets-driven copy per column and group fills them.
   A fixed-size column is that same copy with a constant length (a gather).

Column kinds and what a batch holds (``ragged`` = ``"pad"`` or ``"offsets"``):

- fixed numerics (``int``, ``int8``..``float64``, ``ndarray:DTYPE:SHAPE``): ``(n, *shape)`` of
  the column's dtype (``int`` is int64).
- variable (``bytes``, dynamic 1-D ``ndarray``, and every encoding that has no array form --
  ``json``, ``jpeg``, ``png``, ``pil``, ``pkl``, ``list[...]``, ``jpeg_array``,
  ``str_decimal`` -- as their stored bytes, never unpickled or decoded): with ``"pad"``,
  ``(n, max)`` padded with zeros plus ``<col>_len`` (int64, elements); with ``"offsets"``, the
  flat values plus ``<col>_offsets`` (int64, ``n + 1``, elements).
- ``str``: a numpy unicode array ``(n,)`` (``<U{max}``), either way (numpy strings cannot
  end in NUL characters: trailing ``"\\x00"`` are lost). ``str_int``/``str_float``: int64 /
  float64 ``(n,)``.

Pure: stdlib + numpy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from astream.core.encodings import NDARRAY_DTYPE_CODES, get_coder
from astream.errors import ConfigError, FormatError

__all__ = ["Alloc", "ColumnBatch", "ColumnSpec", "batch_rows", "column_specs", "np_alloc"]

I64 = np.ndarray[Any, np.dtype[np.int64]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]
Alloc = Callable[[tuple[int, ...], np.dtype[Any]], np.ndarray[Any, Any]]
RAGGED = ("pad", "offsets")
_CODE_DTYPES = {code: np.dtype(name) for name, code in NDARRAY_DTYPE_CODES.items()}
_SCALARS = {
    "int": np.dtype("<i8"),
    **{n: np.dtype(n).newbyteorder("<") for n in (
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64")},
}  # fmt: skip
_SMALL = 64  # mean bytes per segment at or below which one fancy-index copy beats a loop


def np_alloc(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """The default allocator: private numpy memory."""
    return np.empty(shape, dtype)


class ColumnSpec:
    """How one column of a shard layout is batched (see the module docstring)."""

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


def _gather(buf: U8, starts: I64, width: int) -> U8:
    """``(n, width)`` bytes of ``buf`` from each start."""
    out: U8 = buf[starts[:, None] + np.arange(width, dtype=np.int64)]
    return out


def _le_uint(b: U8) -> I64:
    """Little-endian unsigned ints from an ``(n, k)`` byte matrix (k in 1, 2, 4, 8)."""
    k = b.shape[1]
    return np.ascontiguousarray(b).view(f"<u{k}")[:, 0].astype(np.int64)


def copy_segments(dst: U8, dst_starts: I64, src: U8, src_starts: I64, nbytes: I64) -> None:
    """``dst[d:d+k] = src[s:s+k]`` for every (d, s, k): one fancy-index copy when segments are
    small, else one slice copy each (a memcpy)."""
    n = len(nbytes)
    if n == 0:
        return
    total = int(nbytes.sum())
    if total == 0:
        return
    if total <= _SMALL * n:
        before = np.cumsum(nbytes) - nbytes
        step = np.arange(total, dtype=np.int64)
        src_idx = np.repeat(src_starts - before, nbytes) + step
        dst_idx = np.repeat(dst_starts - before, nbytes) + step
        dst[dst_idx] = src[src_idx]
        return
    for d, s, k in zip(dst_starts.tolist(), src_starts.tolist(), nbytes.tolist()):
        dst[d : d + k] = src[s : s + k]


class _Group:
    __slots__ = ("buf", "codes", "lens", "positions", "source", "starts")

    def __init__(self, buf: U8, positions: I64, source: str) -> None:
        self.buf = buf
        self.positions = positions
        self.source = source
        self.starts: list[I64] = []  # per column: byte start of the payload
        self.lens: list[I64] = []  # per column: payload bytes
        self.codes: list[int | None] = []  # per column: the dtype code of an untyped ndarray


class ColumnBatch:
    """One batch being decoded: :meth:`add` each shard group, then :meth:`finish`."""

    def __init__(self, specs: list[ColumnSpec], size: int, ragged: str) -> None:
        if ragged not in RAGGED:
            raise ConfigError(f"ragged must be 'pad' or 'offsets', got {ragged!r}")
        self.specs = specs
        self.size = size
        self.ragged = ragged
        self.nvar = sum(1 for c in specs if c.var_index >= 0)
        self.fixed = sum(c.size or 0 for c in specs)
        self.groups: list[_Group] = []

    def add(self, buf: U8, offsets: I64, positions: I64, locals_: I64, source: str) -> None:
        """Locate every column of samples ``locals_`` (batch slots ``positions``) in ``buf``."""
        g = _Group(buf, positions, source)
        begin = offsets[locals_]
        length = offsets[locals_ + 1] - begin
        nvar = self.nvar
        if nvar:
            if bool((length < 4 * nvar).any()):
                raise FormatError(f"a sample is shorter than its {nvar} length fields", source)
            lens = np.ascontiguousarray(_gather(buf, begin, 4 * nvar)).view("<u4").astype(np.int64)
        else:
            lens = np.empty((len(begin), 0), np.int64)
        want = 4 * nvar + self.fixed + lens.sum(axis=1)
        if not np.array_equal(want, length):
            k = int(np.argmax(want != length))
            raise FormatError(
                f"sample is {int(length[k])} bytes but its column lengths add up to {int(want[k])}",
                source,
            )
        pos = begin + 4 * nvar
        for c in self.specs:
            nb = np.full(len(begin), c.size, np.int64) if c.var_index < 0 else lens[:, c.var_index]
            start, code = pos, None
            if c.kind == "array":
                start, nb, code = self._array_payload(c, buf, pos, nb, source)
            g.starts.append(start)
            g.lens.append(nb)
            g.codes.append(code)
            pos = pos + (int(c.size or 0) if c.var_index < 0 else lens[:, c.var_index])
        self.groups.append(g)

    @staticmethod
    def _array_payload(
        c: ColumnSpec, buf: U8, pos: I64, nb: I64, source: str
    ) -> tuple[I64, I64, int | None]:
        """Payload starts/bytes of a dynamic-shape ndarray column (1-D values only)."""
        n = len(pos)
        if n == 0:
            return pos, nb, None
        code = None
        if bool((nb < 2 + (c.dtype is None)).any()):
            raise FormatError(f"column {c.name!r}: ndarray value too short", source)
        head = pos
        dt = c.dtype
        if dt is None:
            codes = buf[pos]
            code = int(codes[0])
            if bool((codes != code).any()) or code not in _CODE_DTYPES:
                raise ConfigError(
                    f"column {c.name!r} ({c.encoding!r}): the values of one batch have "
                    "different or unknown dtypes; batch output needs one dtype per column "
                    "(iterate samples instead)"
                )
            dt = _CODE_DTYPES[code]
            head = pos + 1
        shape_byte = buf[head]
        ndim = shape_byte >> 2
        if bool((ndim != 1).any()):
            raise ConfigError(
                f"column {c.name!r} ({c.encoding!r}): only 1-D dynamic-shape arrays can be "
                "batched (fix the shape in the encoding, e.g. 'ndarray:int32:4,8', or iterate "
                "samples)"
            )
        width = shape_byte & 3
        counts = np.empty(n, np.int64)
        for w in np.unique(width).tolist():
            sel = width == w
            counts[sel] = _le_uint(_gather(buf, head[sel] + 1, 1 << w))
        hsize = (head - pos) + 1 + (1 << width.astype(np.int64))
        payload = nb - hsize
        if not np.array_equal(counts * dt.itemsize, payload):
            raise FormatError(f"column {c.name!r}: ndarray shape does not fill its value", source)
        return pos + hsize, payload, code

    def nbytes_bound(self) -> int:
        """At least the bytes :meth:`finish` asks its allocator for (each array rounded up to
        64 bytes): what a shared-memory slot must hold."""
        total = 0
        n = self.size
        for k, c in enumerate(self.specs):
            if c.kind == "fixed":
                total += n * (c.size or 0) + 64
                continue
            nbytes = self._lengths(k)
            most = int(nbytes.max()) if n else 0
            if c.kind == "str":
                total += 4 * n * max(1, most) + 64
            elif c.kind in ("str_int", "str_float"):
                total += 8 * n + 64
            elif self.ragged == "offsets":
                total += int(nbytes.sum()) + 8 * (n + 1) + 128
            else:
                total += n * most + 8 * n + 128
        return total

    # -- phase 2 ------------------------------------------------------------------------------
    def finish(self, alloc: Alloc = np_alloc) -> dict[str, np.ndarray[Any, Any]]:
        out: dict[str, np.ndarray[Any, Any]] = {}
        for k, c in enumerate(self.specs):
            if c.kind == "fixed":
                out[c.name] = self._fixed(k, c, alloc)
            elif c.kind in ("str", "str_int", "str_float"):
                out[c.name] = self._strings(k, c, alloc)
            else:
                dt = c.dtype
                if c.kind == "array" and dt is None:
                    codes = {g.codes[k] for g in self.groups if len(g.positions)}
                    if len(codes) > 1:
                        raise ConfigError(
                            f"column {c.name!r} ({c.encoding!r}): the values of one batch have "
                            "different dtypes; batch output needs one dtype per column"
                        )
                    one = codes.pop() if codes else None
                    dt = _CODE_DTYPES[one] if one is not None else np.dtype(np.uint8)
                assert dt is not None
                self._ragged(k, c.name, dt, alloc, out)
        return out

    def _fixed(self, k: int, c: ColumnSpec, alloc: Alloc) -> np.ndarray[Any, Any]:
        assert c.dtype is not None and c.size is not None
        arr = alloc((self.size, *c.shape), c.dtype)
        flat = arr.reshape(-1).view(np.uint8)
        for g in self.groups:
            nb = g.lens[k]
            copy_segments(flat, g.positions * c.size, g.buf, g.starts[k], nb)
        return arr

    def _lengths(self, k: int) -> I64:
        """Byte lengths of column ``k`` in batch order."""
        lens = np.zeros(self.size, np.int64)
        for g in self.groups:
            lens[g.positions] = g.lens[k]
        return lens

    def _ragged(
        self,
        k: int,
        name: str,
        dt: np.dtype[Any],
        alloc: Alloc,
        out: dict[str, np.ndarray[Any, Any]],
    ) -> None:
        nbytes = self._lengths(k)
        item = dt.itemsize
        count = nbytes // item
        if self.ragged == "offsets":
            offs = alloc((self.size + 1,), np.dtype(np.int64))
            offs[0] = 0
            np.cumsum(count, out=offs[1:])
            values = alloc((int(offs[-1]),), dt)
            flat = values.view(np.uint8)
            for g in self.groups:
                copy_segments(flat, offs[g.positions] * item, g.buf, g.starts[k], g.lens[k])
            out[name], out[f"{name}_offsets"] = values, offs
            return
        width = int(count.max()) if self.size else 0
        padded = alloc((self.size, width), dt)
        padded.fill(0)
        flat = padded.reshape(-1).view(np.uint8)
        for g in self.groups:
            copy_segments(flat, g.positions * (width * item), g.buf, g.starts[k], g.lens[k])
        ln = alloc((self.size,), np.dtype(np.int64))
        ln[:] = count
        out[name], out[f"{name}_len"] = padded, ln

    def _strings(self, k: int, c: ColumnSpec, alloc: Alloc) -> np.ndarray[Any, Any]:
        nbytes = self._lengths(k)
        width = max(1, int(nbytes.max()) if self.size else 1)
        raw = np.zeros((self.size, width), np.uint8)
        flat = raw.reshape(-1)
        for g in self.groups:
            copy_segments(flat, g.positions * width, g.buf, g.starts[k], g.lens[k])
        as_bytes = raw.view(f"S{width}")[:, 0]
        try:
            if c.kind == "str_int":
                res: np.ndarray[Any, Any] = as_bytes.astype(np.int64)
            elif c.kind == "str_float":
                res = as_bytes.astype(np.float64)
            else:
                res = np.char.decode(as_bytes, "utf-8")
        except (ValueError, OverflowError, UnicodeDecodeError) as exc:
            src = self.groups[0].source if self.groups else "<batch>"
            raise FormatError(f"column {c.name!r}: cannot decode value ({exc})", src) from None
        arr = alloc(res.shape, res.dtype)
        arr[...] = res
        return arr


def batch_rows(batch: dict[str, Any]) -> int:
    """Samples in a batch dict built here: the rows of a column that is not the flat values of
    an ``offsets`` pair (``len(<col>_offsets) - 1`` if every column is)."""
    for key, v in batch.items():
        if f"{key}_offsets" in batch:
            continue
        if key.endswith("_offsets") and key[: -len("_offsets")] in batch:
            return int(v.shape[0]) - 1
        return int(v.shape[0])
    return 0
