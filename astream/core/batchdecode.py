"""Columnar decode of MDS samples: a planned batch becomes one array per column.

Theory of operation
-------------------
An MDS sample is ``u32 lengths of the variable-size columns | column values in column
order``. Where each column's value lies follows from the sample offsets and those lengths, so
it is computed with numpy for **every sample of a shard at once**, the first time a batch
touches that shard (:func:`shard_table`): the length headers by one gather, every column's
start by cumulative sums, the header of each dynamic-shape ndarray parsed vectorised, and the
values of small fixed-size columns (scalars) copied out. A sample that fails a check is not an
error yet: it is flagged, and only a batch that contains it raises (with the message the
sample-by-sample checks give, :func:`check_group`).

The tables of the shards in use live in one :class:`RowStore` (rows of all of them back to
back), so a batch, whatever the number of shards it spans, is one array of row numbers. Then
decoding is two phases, so that the output can be allocated once at its final size by the
caller's allocator (private numpy memory, or a worker's shared-memory slot):

1. :class:`ColumnBatch` (locate): the batch's rows, and which mapped shard each one reads.
2. :meth:`ColumnBatch.finish`: lengths in batch order give each output's shape; the allocator
   is asked for every array; a scalar column is one ``np.take`` from the table, any other
   column one offsets-driven copy: a loop of ``memcpy``\\ s (memoryview slices), one per
   sample, with no Python object per sample kept.

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

import math
import os
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from astream.core.encodings import NDARRAY_DTYPE_CODES, get_coder
from astream.errors import ConfigError, FormatError

__all__ = [
    "POOL",
    "Alloc",
    "BufferPool",
    "ColumnBatch",
    "ColumnSpec",
    "PREAD",
    "Layout",
    "RowStore",
    "batch_rows",
    "check_group",
    "column_specs",
    "np_alloc",
    "shard_table",
]

I64 = np.ndarray[Any, np.dtype[np.int64]]
U8 = np.ndarray[Any, np.dtype[np.uint8]]
Alloc = Callable[[tuple[int, ...], np.dtype[Any]], np.ndarray[Any, Any]]
RAGGED = ("pad", "offsets")
_CODE_DTYPES = {code: np.dtype(name) for name, code in NDARRAY_DTYPE_CODES.items()}
_CODE_ITEMSIZE = np.zeros(256, np.int64)  # 0: not a dtype code
for _code, _dt in _CODE_DTYPES.items():
    _CODE_ITEMSIZE[_code] = _dt.itemsize
_SCALARS = {
    "int": np.dtype("<i8"),
    **{n: np.dtype(n).newbyteorder("<") for n in (
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
        "float16", "float32", "float64")},
}  # fmt: skip
_SMALL_FIXED = 16  # fixed columns of at most this many bytes are copied into the table
_SMALL = 64  # mean bytes per segment at or below which one fancy-index copy beats a loop
PREAD = 16384  # mean bytes per segment from which values are read with preadv, not the map


def np_alloc(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Private numpy memory, a fresh allocation per array."""
    return np.empty(shape, dtype)


_ALIGN = 64


class BufferPool:
    """Reused private buffers for the batches decoded in this process (the default of
    :meth:`ColumnBatch.finish`): a batch is laid out in one buffer (each array 64-byte
    aligned), and the buffer goes back to the pool when the batch's last array -- or anything
    viewing it, a torch tensor included -- is garbage-collected (a ``weakref.finalize`` on the
    buffer's base array, which every view keeps alive; numpy stops collapsing a view's base at
    the non-array buffer). A batch the consumer keeps is never overwritten: the pool then makes
    a new buffer. Reuse spares the page faults of fresh memory (about 800 per 3 MB batch) and
    the allocator's work; at most ``keep`` free buffers are kept. Batches under ``min_bytes``
    take fresh numpy memory: the C allocator recycles such sizes without new page faults, and
    the pool's per-array bookkeeping would cost more than it saves."""

    def __init__(self, keep: int = 2, min_bytes: int = 1 << 20) -> None:
        self.keep = keep
        self.min_bytes = min_bytes  # smaller batches: fresh numpy memory (malloc recycles it)
        self.free: list[bytearray] = []
        self.made = 0  # buffers made so far (tests)

    def finish(self, cb: ColumnBatch) -> dict[str, np.ndarray[Any, Any]]:
        need = cb.nbytes_bound()
        if need < self.min_bytes:
            return cb.finish(np_alloc)
        buf = None
        for k, b in enumerate(self.free):
            if len(b) >= need:
                buf = self.free.pop(k)
                break
        if buf is None:
            buf = bytearray(need + need // 4 + 4096)
            self.made += 1
        base: np.ndarray[Any, Any] = np.frombuffer(buf, np.uint8)
        at = [0]

        def alloc(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
            start = at[0]
            n = math.prod(shape) * dtype.itemsize
            if start + n > len(buf):  # pragma: no cover - nbytes_bound is an upper bound
                return np.empty(shape, dtype)
            at[0] = -(-(start + n) // _ALIGN) * _ALIGN
            return base[start : start + n].view(dtype).reshape(shape)

        out = cb.finish(alloc)
        weakref.finalize(base, self._back, buf)
        return out

    def _back(self, buf: bytearray) -> None:
        """A batch's buffer is free again: keep the ``keep`` largest free buffers."""
        free = self.free
        free.append(buf)
        if len(free) > self.keep:
            free.remove(min(free, key=len))


POOL = BufferPool()


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


def _gather(buf: U8, starts: I64, width: int) -> U8:
    """``(n, width)`` bytes of ``buf`` from each start."""
    out: U8 = buf[starts[:, None] + np.arange(width, dtype=np.int64)]
    return out


def _at(buf: U8, starts: I64, k: int) -> np.ndarray[Any, Any]:
    """The little-endian ``k``-byte unsigned int (k in 1, 2, 4, 8) at each start of ``buf``:
    one index into an overlapping view of ``buf`` (element ``i`` = the ``k`` bytes from byte
    ``i``), no ``(n, k)`` index matrix as :func:`_gather` builds."""
    if len(buf) < k:
        return _gather(buf, starts, k).view(f"<u{k}").reshape(-1)
    every = np.ndarray((len(buf) - k + 1,), f"<u{k}", buf, 0, (1,))
    out: np.ndarray[Any, Any] = every[starts]
    return out


def _le_uint(b: U8) -> I64:
    """Little-endian unsigned ints from an ``(n, k)`` byte matrix (k in 1, 2, 4, 8)."""
    k = b.shape[1]
    return np.ascontiguousarray(b).view(f"<u{k}")[:, 0].astype(np.int64)


class ShardTable:
    """Per-sample table of one shard (see :func:`shard_table`)."""

    __slots__ = ("bad", "code", "lens", "n", "small", "start")

    def __init__(
        self, n: int, small: list[U8], start: I64, lens: I64, code: U8, bad: np.ndarray[Any, Any]
    ) -> None:
        self.n = n
        self.small = small  # per small fixed column: (n, size) raw bytes
        self.start = start  # (n, nstart): byte start of each other column's payload
        self.lens = lens  # (n, nvar): payload bytes of each variable column
        self.code = code  # (n, ncode): dtype code of each untyped ndarray column
        self.bad = bad  # (n,) bool: the sample fails a check (check_group says which)


def shard_table(layout: Layout, buf: U8, offsets: I64) -> ShardTable:
    """Where every column of every sample of a shard lies (``offsets``: the shard's ``n + 1``
    sample offsets, already checked to be increasing and inside ``buf``)."""
    n = len(offsets) - 1
    size = len(buf)
    begin = offsets[:-1].astype(np.int64, copy=False)
    length = offsets[1:] - begin
    nvar = layout.nvar
    bad = np.zeros(n, bool)
    if nvar:
        bad |= length < 4 * nvar
        if size < 4 * nvar:
            bad[:] = True
        at = np.where(bad, 0, begin)
        lens = np.empty((n, nvar), np.int64)
        for j in range(nvar):
            lens[:, j] = _at(buf, at + 4 * j, 4)
        lens[bad] = 0
    else:
        lens = np.zeros((n, 0), np.int64)
    bad |= (4 * nvar + layout.fixed + lens.sum(axis=1)) != length
    lens[bad] = 0
    start = np.zeros((n, layout.nstart), np.int64)
    code = np.zeros((n, layout.ncode), np.uint8)
    small: list[U8] = []
    pos = begin + 4 * nvar
    for k, c in enumerate(layout.specs):
        fixed = c.var_index < 0
        nb = np.full(n, c.size, np.int64) if fixed else lens[:, c.var_index].copy()
        if c.kind == "array":
            hsize = _array_header(c, buf, pos, nb, bad, code, layout.code[k])
            start[:, layout.start[k]] = pos + hsize
            lens[:, c.var_index] = np.where(bad, 0, nb - hsize)
        elif layout.small[k] >= 0:
            width = int(c.size or 0)
            if width == 0 or size < width:
                small.append(np.zeros((n, width), np.uint8))
            else:
                at = np.where(bad | (pos + width > size), 0, pos)
                if width in (1, 2, 4, 8):
                    small.append(_at(buf, at, width).view(np.uint8).reshape(n, width))
                else:
                    small.append(_gather(buf, at, width))
        else:
            start[:, layout.start[k]] = pos
        pos = pos + nb
    start[bad] = 0
    lens[bad] = 0
    return ShardTable(n, small, start, lens, code, bad)


def _array_header(
    c: ColumnSpec, buf: U8, pos: I64, nb: I64, bad: np.ndarray[Any, Any], code: U8, ci: int
) -> I64:
    """Header bytes of a dynamic-shape ndarray column for every sample; samples whose value is
    not a 1-D array of the column's dtype filling its bytes are flagged in ``bad``."""
    n = len(pos)
    untyped = c.dtype is None
    bad |= nb < 2 + untyped
    head = np.where(bad, 0, pos)
    if untyped:
        codes = buf[head] if n else np.zeros(0, np.uint8)
        code[:, ci] = codes
        item = _CODE_ITEMSIZE[codes]
        bad |= item == 0
        head = head + 1
    else:
        assert c.dtype is not None
        item = np.full(n, c.dtype.itemsize, np.int64)
    shape_byte = buf[np.where(bad, 0, head)] if n else np.zeros(0, np.uint8)
    bad |= (shape_byte >> 2) != 1
    width = (shape_byte & 3).astype(np.int64)
    hsize = (head - pos) + 1 + (1 << width)
    bad |= hsize > nb
    counts = np.zeros(n, np.int64)
    for w in np.flatnonzero(np.bincount(width[~bad], minlength=4)).tolist():
        sel = (width == w) & ~bad
        counts[sel] = _at(buf, head[sel] + 1, 1 << w)
    bad |= counts * item != nb - hsize
    return np.where(bad, 0, hsize)


def check_group(layout: Layout, buf: U8, offsets: I64, locals_: I64, source: str) -> None:
    """Raise the error of the first failing check over samples ``locals_`` of a shard, in the
    order a sample-by-sample reader meets them (the slow path, run only for a batch holding a
    sample that :func:`shard_table` flagged)."""
    begin = offsets[locals_]
    length = offsets[locals_ + 1] - begin
    nvar = layout.nvar
    if nvar:
        if bool((length < 4 * nvar).any()):
            raise FormatError(f"a sample is shorter than its {nvar} length fields", source)
        lens = np.ascontiguousarray(_gather(buf, begin, 4 * nvar)).view("<u4").astype(np.int64)
    else:
        lens = np.empty((len(begin), 0), np.int64)
    want = 4 * nvar + layout.fixed + lens.sum(axis=1)
    if not np.array_equal(want, length):
        k = int(np.argmax(want != length))
        raise FormatError(
            f"sample is {int(length[k])} bytes but its column lengths add up to {int(want[k])}",
            source,
        )
    pos = begin + 4 * nvar
    for c in layout.specs:
        nb = np.full(len(begin), c.size, np.int64) if c.var_index < 0 else lens[:, c.var_index]
        if c.kind == "array" and len(pos):
            _check_array(c, buf, pos, nb, source)
        pos = pos + nb


def _check_array(c: ColumnSpec, buf: U8, pos: I64, nb: I64, source: str) -> None:
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
    if bool(((shape_byte >> 2) != 1).any()):
        raise ConfigError(
            f"column {c.name!r} ({c.encoding!r}): only 1-D dynamic-shape arrays can be "
            "batched (fix the shape in the encoding, e.g. 'ndarray:int32:4,8', or iterate "
            "samples)"
        )
    width = (shape_byte & 3).astype(np.int64)
    hsize = (head - pos) + 1 + (1 << width)
    if bool((hsize > nb).any()):
        raise FormatError(f"column {c.name!r}: ndarray shape does not fill its value", source)
    counts = np.empty(len(pos), np.int64)
    for w in np.flatnonzero(np.bincount(width, minlength=4)).tolist():
        sel = width == w
        counts[sel] = _le_uint(_gather(buf, head[sel] + 1, 1 << w))
    if not np.array_equal(counts * dt.itemsize, nb - hsize):
        raise FormatError(f"column {c.name!r}: ndarray shape does not fill its value", source)


class RowStore:
    """The tables of the shards in use, back to back: shard ``s``'s samples are rows
    ``base[s] .. base[s] + n``. Grows by doubling; when more than ``max_shards`` shards are
    held, the least recently used half is dropped and the rest compacted (between batches)."""

    def __init__(self, layout: Layout, max_shards: int = 64) -> None:
        self.layout = layout
        self.max_shards = max_shards
        self.base: dict[int, int] = {}
        self.count: dict[int, int] = {}
        self.used: dict[int, int] = {}  # shard -> last batch that touched it
        self.nbad = 0  # flagged rows held
        self.rows = 0
        self.tick = 0
        lay = layout
        self.small = [np.zeros((0, int(c.size or 0)), np.uint8)
                      for c, k in zip(lay.specs, lay.small) if k >= 0]  # fmt: skip
        self.start = np.zeros((0, lay.nstart), np.int64)
        self.lens = np.zeros((0, lay.nvar), np.int64)
        self.code = np.zeros((0, lay.ncode), np.uint8)
        self.bad = np.zeros(0, bool)
        self._cols: Any = None  # columns(): None until asked, False when not lean

    def next_batch(self) -> None:
        """Called before a batch's shards are looked up: the only time rows may move."""
        self.tick += 1
        if len(self.base) > self.max_shards:
            keep = sorted(self.base, key=self.used.__getitem__)[-(self.max_shards // 2) :]
            parts = [(s, self.base[s], self.count[s]) for s in keep]
            idx = (np.concatenate([np.arange(b, b + k) for _, b, k in parts])
                   if parts else np.zeros(0, np.int64))  # fmt: skip
            self.small = [a[idx] for a in self.small]
            self.start, self.lens = self.start[idx], self.lens[idx]
            self.code, self.bad = self.code[idx], self.bad[idx]
            self.base, self.count, at = {}, {}, 0
            for s, _, k in parts:
                self.base[s], self.count[s] = at, k
                at += k
            self.used = {s: self.used[s] for s in keep}
            self.rows = at
            if self._cols is not False:
                self._cols = None
            self.nbad = int(self.bad.sum())

    def columns(self) -> list[tuple[str, int, Any, Any, np.dtype[Any]]] | None:
        """Per column, what :meth:`ColumnBatch._lean` reads: ``(name, 0, typed table column,
        None, dtype)`` for a scalar, ``(name, 1, payload bytes column, start column, dtype)``
        for a variable column (bytes, typed 1-D ndarray); None when some column is neither.
        Views of the current tables (remade after they grow or are compacted)."""
        if self._cols is False:
            return None
        if self._cols is None:
            lay = self.layout
            cols: list[tuple[str, int, Any, Any, np.dtype[Any]]] = []
            for k, c in enumerate(lay.specs):
                si = lay.small[k]
                if c.kind == "fixed" and si >= 0 and not c.shape and c.dtype is not None:
                    if c.size != c.dtype.itemsize:
                        break
                    cols.append((c.name, 0, self.small[si].view(c.dtype)[:, 0], None, c.dtype))
                elif c.kind in ("bytes", "array") and c.dtype is not None and c.var_index >= 0:
                    start = self.start[:, lay.start[k]]
                    cols.append((c.name, 1, self.lens[:, c.var_index], start, c.dtype))
                else:
                    break
            else:
                self._cols = cols
                return cols
            self._cols = False
            return None
        out: list[tuple[str, int, Any, Any, np.dtype[Any]]] = self._cols
        return out

    def base_of(self, s: int) -> int | None:
        b = self.base.get(s)
        if b is not None:
            self.used[s] = self.tick
        return b

    def add(self, s: int, t: ShardTable) -> int:
        at, need = self.rows, self.rows + t.n
        if need > len(self.bad):
            cap = max(need, 2 * len(self.bad), 1024)

            def grow(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
                out = np.zeros((cap, *a.shape[1:]), a.dtype)
                out[:at] = a[:at]
                return out

            self.small = [grow(a) for a in self.small]
            self.start, self.lens = grow(self.start), grow(self.lens)
            self.code, self.bad = grow(self.code), grow(self.bad)
            if self._cols is not False:
                self._cols = None
        for dst, src in zip(self.small, t.small):
            dst[at:need] = src
        self.start[at:need] = t.start
        self.lens[at:need] = t.lens
        self.code[at:need] = t.code
        self.bad[at:need] = t.bad
        self.nbad += int(t.bad.sum())
        self.rows = need
        self.base[s], self.count[s], self.used[s] = at, t.n, self.tick
        return at


def _copy(
    dst: memoryview,
    dsts: list[int],
    srcs: list[int],
    nbytes: list[int],
    which: list[int] | None,
    bufs: Sequence[memoryview],
) -> None:
    """``dst[d:d+k] = bufs[w][s:s+k]`` for each segment (``which`` None: all from ``bufs[0]``)."""
    if which is None:
        b = bufs[0]
        for d, s, k in zip(dsts, srcs, nbytes):
            dst[d : d + k] = b[s : s + k]
    else:
        for d, s, k, w in zip(dsts, srcs, nbytes, which):
            dst[d : d + k] = bufs[w][s : s + k]


def _pread(
    dst: memoryview,
    dsts: list[int],
    srcs: list[int],
    nbytes: list[int],
    which: list[int] | None,
    files: Sequence[Any],
) -> None:
    """The same as :func:`_copy`, read from the files (``files[w].fileno()``) with one
    ``preadv`` per segment: the page cache is copied straight into ``dst``, and the shard's
    pages are never mapped into this process (no page faults, no file pages in its PSS)."""
    fds = [f.fileno() for f in files]
    fdl = [fds[0]] * len(dsts) if which is None else [fds[w] for w in which]
    _pread_run(dst, fdl, dsts, srcs, nbytes)


def _pread_run(
    dst: memoryview, fds: list[int], dsts: list[int], srcs: list[int], nbytes: list[int]
) -> None:
    preadv = os.preadv
    for fd, d, s, k in zip(fds, dsts, srcs, nbytes):
        got = preadv(fd, [dst[d : d + k]], s)
        while got < k:  # short read: go on from where it stopped; 0 means the file shrank
            more = preadv(fd, [dst[d + got : d + k]], s + got)
            if more <= 0:
                raise FormatError(f"shard file ended inside a sample ({s + got} of {s + k})")
            got += more


def _copy_small(dst: U8, dsts: I64, src: U8, srcs: I64, nbytes: I64) -> None:
    """The same from one buffer as a single fancy-index copy (tiny segments)."""
    total = int(nbytes.sum())
    if total == 0:
        return
    before = np.cumsum(nbytes) - nbytes
    step = np.arange(total, dtype=np.int64)
    dst[np.repeat(dsts - before, nbytes) + step] = src[np.repeat(srcs - before, nbytes) + step]


class ColumnBatch:
    """One located batch: ``rows`` of ``store`` in batch order, row ``j`` read from mapped
    shard ``bufs[which[j]]`` (``which`` None: one shard). :meth:`finish` decodes it."""

    def __init__(
        self,
        store: RowStore | None,
        size: int,
        ragged: str,
        rows: I64 | None = None,
        which: list[int] | None = None,
        bufs: list[U8] | None = None,
        files: Sequence[Any] | None = None,
    ) -> None:
        if ragged not in RAGGED:
            raise ConfigError(f"ragged must be 'pad' or 'offsets', got {ragged!r}")
        self.store = store
        self.size = size
        self.ragged = ragged
        self.rows = rows if rows is not None else np.zeros(0, np.int64)
        self.which = which
        self.bufs = bufs or []
        self.files = files or []  # per buffer: what has ``fileno()`` (None: copy from bufs)
        self._views: list[memoryview] | None = None
        self._lens: dict[int, I64] = {}
        self._sums: dict[int, int] = {}
        # the planned chunk this batch is samples span[0]:span[1] of (reader.Chunk), if any:
        # the lean path then slices values computed once for the chunk (chunk_values)
        self.chunk: Any = None
        self.span = (0, 0)

    @property
    def specs(self) -> list[ColumnSpec]:
        return self.store.layout.specs if self.store is not None else []

    def _nbytes(self, k: int) -> I64:
        """Payload bytes of column ``k`` (variable or array) in batch order."""
        got = self._lens.get(k)
        if got is None:
            assert self.store is not None
            vi = self.store.layout.specs[k].var_index
            got = self._lens[k] = self.store.lens[self.rows, vi]
        return got

    def _dtype_of(self, k: int, c: ColumnSpec) -> np.dtype[Any]:
        if c.kind != "array":
            return np.dtype(np.uint8)
        if c.dtype is not None:
            return c.dtype
        assert self.store is not None
        codes = self.store.code[self.rows, self.store.layout.code[k]]
        if not len(codes):
            return np.dtype(np.uint8)
        first = int(codes[0])
        if bool((codes != first).any()):
            raise ConfigError(
                f"column {c.name!r} ({c.encoding!r}): the values of one batch have "
                "different dtypes; batch output needs one dtype per column"
            )
        return _CODE_DTYPES[first]

    def nbytes_bound(self) -> int:
        """At least the bytes :meth:`finish` asks its allocator for (each array rounded up to
        64 bytes): what a shared-memory slot must hold."""
        total = 0
        n = self.size
        for k, c in enumerate(self.specs):
            if c.kind == "fixed":
                total += n * (c.size or 0) + 64
            elif c.kind in ("str_int", "str_float"):
                total += 8 * n + 64
            elif c.kind != "str" and self.ragged == "offsets":
                total += self._total(k) + 8 * (n + 1) + 128
            else:
                most = int(self._nbytes(k).max()) if n else 0
                if c.kind == "str":
                    total += 4 * n * max(1, most) + 64
                else:
                    total += n * most + 8 * n + 128
        return total

    def _total(self, k: int) -> int:
        """Payload bytes of column ``k`` (variable or array) in the batch."""
        got = self._sums.get(k)
        if got is None:
            got = self._sums[k] = int(self._nbytes(k).sum())
        return got

    # -- phase 2 ------------------------------------------------------------------------------
    def finish(self, alloc: Alloc | None = None) -> dict[str, np.ndarray[Any, Any]]:
        """The batch's arrays, each from ``alloc`` (None: one reused buffer of this process's
        :data:`POOL` for the whole batch)."""
        if alloc is None:
            lean = self._lean()
            return lean if lean is not None else POOL.finish(self)
        out: dict[str, np.ndarray[Any, Any]] = {}
        for k, c in enumerate(self.specs):
            if c.kind == "fixed":
                out[c.name] = self._fixed(k, c, alloc)
            elif c.kind in ("str", "str_int", "str_float"):
                out[c.name] = self._strings(k, c, alloc)
            else:
                self._ragged(k, c.name, self._dtype_of(k, c), alloc, out)
        return out

    def _lean(self) -> dict[str, np.ndarray[Any, Any]] | None:
        """The batch in fresh numpy memory, for the common layouts, with the fewest numpy calls
        (about one per column plus the copy loop); None where :meth:`finish`'s general path is
        needed: ``pad``, string or fixed non-scalar columns, untyped ndarrays, tiny or large
        values (one fancy-index copy, ``preadv``), or a batch the pool should hold (at least
        ``POOL.min_bytes``). Same arrays as the general path with :func:`np_alloc`."""
        store = self.store
        if store is None or self.ragged != "offsets":
            return None
        cols = store.columns()
        if cols is None:
            return None
        rows, n = self.rows, self.size
        if n == 0:
            return None
        if self.chunk is not None:
            whole = chunk_values(self.chunk, store, cols)
            if whole is not None:
                return self._lean_chunk(cols, whole)
        out: dict[str, np.ndarray[Any, Any]] = {}
        copies = []
        bound = 0
        for name, kind, col, start, dt in cols:
            if kind == 0:  # a scalar: its typed table column
                out[name] = col[rows]
                continue
            out[name] = out[f"{name}_offsets"] = None  # type: ignore[assignment]  # key order
            nbytes = col[rows]
            offs = np.empty(n + 1, np.int64)
            offs[0] = 0
            if dt.itemsize == 1:
                nbytes.cumsum(out=offs[1:])
            else:
                (nbytes // dt.itemsize).cumsum(out=offs[1:])
            total = int(offs[n]) * dt.itemsize
            if (self.which is None and total <= _SMALL * n) or (self.files and total >= PREAD * n):
                return None  # one fancy-index copy, or preadv: the general path
            bound += total
            copies.append((name, nbytes, start, dt, offs, total))
        if bound >= POOL.min_bytes:
            return None
        which = self.which
        for name, nbytes, start, dt, offs, total in copies:
            srcs = start[rows]
            values = np.empty(total // dt.itemsize, dt)
            dst = memoryview(values.view(np.uint8))  # type: ignore[arg-type]
            ends = (srcs + nbytes).tolist()
            d = (offs if dt.itemsize == 1 else offs * dt.itemsize).tolist()
            if which is None:
                b = self._views_of()[0]
                for d0, d1, s0, s1 in zip(d, d[1:], srcs.tolist(), ends):
                    dst[d0:d1] = b[s0:s1]
            else:
                views = self._views_of()
                for d0, d1, s0, s1, w in zip(d, d[1:], srcs.tolist(), ends, which):
                    dst[d0:d1] = views[w][s0:s1]
            out[name], out[f"{name}_offsets"] = values, offs
        return out

    def _lean_chunk(
        self, cols: list[tuple[str, int, Any, Any, np.dtype[Any]]], whole: list[Any]
    ) -> dict[str, np.ndarray[Any, Any]] | None:
        """:meth:`_lean` from the values of the whole chunk (:func:`chunk_values`): slices."""
        lo, hi = self.span
        n = hi - lo
        out: dict[str, np.ndarray[Any, Any]] = {}
        copies = []
        bound = 0
        for (name, kind, _col, _start, dt), got in zip(cols, whole):
            if kind == 0:
                out[name] = got[lo:hi].copy()
                continue
            ends, srcs, ends_b = got
            offs = ends[lo : hi + 1] - ends[lo]
            total = int(offs[n]) * dt.itemsize
            if (self.which is None and total <= _SMALL * n) or (self.files and total >= PREAD * n):
                return None  # one fancy-index copy, or preadv: the general path
            bound += total
            out[name] = out[f"{name}_offsets"] = None  # type: ignore[assignment]  # key order
            copies.append((name, offs, total, srcs[lo:hi], ends_b[lo:hi], dt))
        if bound >= POOL.min_bytes:
            return None
        which = self.which
        for name, offs, total, srcl, endl, dt in copies:
            values = np.empty(total // dt.itemsize, dt)
            dst = memoryview(values.view(np.uint8))  # type: ignore[arg-type]
            d = (offs if dt.itemsize == 1 else offs * dt.itemsize).tolist()
            if which is None:
                b = self._views_of()[0]
                for d0, d1, s0, s1 in zip(d, d[1:], srcl, endl):
                    dst[d0:d1] = b[s0:s1]
            else:
                views = self._views_of()
                for d0, d1, s0, s1, w in zip(d, d[1:], srcl, endl, which):
                    dst[d0:d1] = views[w][s0:s1]
            out[name], out[f"{name}_offsets"] = values, offs
        return out

    def _views_of(self) -> list[memoryview]:
        if self._views is None:
            self._views = [memoryview(b) for b in self.bufs]  # type: ignore[arg-type]
        return self._views

    def _fill(self, flat: U8, dsts: I64, k: int, nbytes: I64) -> None:
        """Copy column ``k``'s payloads of every row to ``flat[dsts[j]:]``."""
        assert self.store is not None
        srcs = self.store.start[self.rows, self.store.layout.start[k]]
        n = len(srcs)
        if n == 0:
            return
        total = self._total(k) if nbytes is self._lens.get(k) else int(nbytes.sum())
        if self.which is None and total <= _SMALL * n:
            _copy_small(flat, dsts, self.bufs[0], srcs, nbytes)
            return
        args = (dsts.tolist(), srcs.tolist(), nbytes.tolist(), self.which)
        dst = memoryview(flat)  # type: ignore[arg-type]
        if self.files and total >= PREAD * n:
            _pread(dst, *args, self.files)
        else:
            _copy(dst, *args, self._views_of())

    def _fixed(self, k: int, c: ColumnSpec, alloc: Alloc) -> np.ndarray[Any, Any]:
        assert c.dtype is not None and c.size is not None and self.store is not None
        n = self.size
        arr = alloc((n, *c.shape), c.dtype)
        flat = arr.reshape(-1).view(np.uint8)
        si = self.store.layout.small[k]
        if si >= 0:
            np.take(self.store.small[si], self.rows, axis=0, out=flat.reshape(n, c.size))
        else:
            dsts = np.arange(n, dtype=np.int64) * c.size
            self._fill(flat, dsts, k, np.full(n, c.size, np.int64))
        return arr

    def _ragged(
        self,
        k: int,
        name: str,
        dt: np.dtype[Any],
        alloc: Alloc,
        out: dict[str, np.ndarray[Any, Any]],
    ) -> None:
        nbytes = self._nbytes(k)
        item = dt.itemsize
        count = nbytes // item if item != 1 else nbytes
        if self.ragged == "offsets":
            offs = alloc((self.size + 1,), np.dtype(np.int64))
            offs[0] = 0
            np.cumsum(count, out=offs[1:])
            values = alloc((int(offs[-1]),), dt)
            self._fill(values.view(np.uint8), offs[:-1] * item, k, nbytes)
            out[name], out[f"{name}_offsets"] = values, offs
            return
        width = int(count.max()) if self.size else 0
        padded = alloc((self.size, width), dt)
        padded.fill(0)
        dsts = np.arange(self.size, dtype=np.int64) * (width * item)
        self._fill(padded.reshape(-1).view(np.uint8), dsts, k, nbytes)
        ln = alloc((self.size,), np.dtype(np.int64))
        ln[:] = count
        out[name], out[f"{name}_len"] = padded, ln

    def _strings(self, k: int, c: ColumnSpec, alloc: Alloc) -> np.ndarray[Any, Any]:
        nbytes = self._nbytes(k)
        width = max(1, int(nbytes.max()) if self.size else 1)
        raw = np.zeros((self.size, width), np.uint8)
        self._fill(raw.reshape(-1), np.arange(self.size, dtype=np.int64) * width, k, nbytes)
        as_bytes = raw.view(f"S{width}")[:, 0]
        try:
            if c.kind == "str_int":
                res: np.ndarray[Any, Any] = as_bytes.astype(np.int64)
            elif c.kind == "str_float":
                res = as_bytes.astype(np.float64)
            else:
                res = np.char.decode(as_bytes, "utf-8")
        except (ValueError, OverflowError, UnicodeDecodeError) as exc:
            msg = f"column {c.name!r}: cannot decode value ({exc})"
            raise FormatError(msg, "<batch>") from None
        arr = alloc(res.shape, res.dtype)
        arr[...] = res
        return arr


def chunk_values(
    chunk: Any, store: RowStore, cols: list[tuple[str, int, Any, Any, np.dtype[Any]]]
) -> list[Any] | None:
    """What :meth:`ColumnBatch._lean` needs of every sample of a planned chunk
    (``reader.Chunk``: each sample's shard and index in it), read from ``store`` in one pass
    once all the chunk's shards are in it (None before; asked again only after shards were
    added): per column, a scalar's values, or a variable column's cumulative element counts
    (``n + 1``) and each value's start and end bytes in its shard (lists). Values, not row
    numbers: they stay right when the store is compacted."""
    cache = chunk.cache  # (store, shards in the store when last tried, values or None)
    if (
        cache is not None
        and cache[0] is store
        and (cache[2] is not None or cache[1] == len(store.base))
    ):
        got: list[Any] | None = cache[2]
        return got
    base = store.base
    held = len(base)
    uniq, inv = np.unique(chunk.shards, return_inverse=True)
    bases = [base.get(s) for s in uniq.tolist()]
    if None in bases:
        chunk.cache = (store, held, None)
        return None
    rows = np.asarray(bases, np.int64)[inv] + chunk.local
    whole: list[Any] = []
    for _name, kind, col, start, dt in cols:
        if kind == 0:
            whole.append(col[rows])
            continue
        nbytes = col[rows]
        srcs = start[rows]
        ends = np.zeros(len(rows) + 1, np.int64)
        (nbytes if dt.itemsize == 1 else nbytes // dt.itemsize).cumsum(out=ends[1:])
        whole.append((ends, srcs.tolist(), (srcs + nbytes).tolist()))
    chunk.cache = (store, held, whole)
    return whole


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
