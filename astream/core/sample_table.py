"""The per-sample table of one MDS shard: where every column of every sample lies.

Where each column's value lies follows from the sample offsets and the ``u32`` lengths that
start each sample, so it is computed with numpy for **every sample of a shard at once**
(:func:`sample_table`): the length headers by one gather, every column's start by cumulative
sums, the header of each dynamic-shape ndarray parsed vectorised, and the values of small
fixed-size columns (scalars) copied out. A sample that fails a check is not an error yet: it
is flagged, and only a batch that contains it raises, with the message the sample-by-sample
checks give (:func:`check_group`).

Pure: stdlib + numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from astream.core.batch_layout import CODE_DTYPES, CODE_ITEMSIZE, I64, U8, ColumnSpec, Layout
from astream.errors import ConfigError, FormatError

__all__ = ["SampleTable", "check_group", "sample_table"]


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


class SampleTable:
    """Per-sample table of one shard (see :func:`sample_table`)."""

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


def sample_table(layout: Layout, buf: U8, offsets: I64) -> SampleTable:
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
    return SampleTable(n, small, start, lens, code, bad)


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
        item = CODE_ITEMSIZE[codes]
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
    sample that :func:`sample_table` flagged)."""
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
        if bool((codes != code).any()) or code not in CODE_DTYPES:
            raise ConfigError(
                f"column {c.name!r} ({c.encoding!r}): the values of one batch have "
                "different or unknown dtypes; batch output needs one dtype per column "
                "(iterate samples instead)"
            )
        dt = CODE_DTYPES[code]
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
