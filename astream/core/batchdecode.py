"""Columnar decode of MDS samples: a planned batch becomes one array per column.

Theory of operation
-------------------
An MDS sample is ``u32 lengths of the variable-size columns | column values in column
order``. Where each column's value lies follows from the sample offsets and those lengths, so
it is computed with numpy for **every sample of a shard at once**, the first time a batch
touches that shard (``core/sample_table.py``): the length headers by one gather, every column's
start by cumulative sums, the header of each dynamic-shape ndarray parsed vectorised, and the
values of small fixed-size columns (scalars) copied out. A sample that fails a check is not an
error yet: it is flagged, and only a batch that contains it raises (with the message the
sample-by-sample checks give, ``check_group``).

The tables of the shards in use live in one ``RowStore`` (``core/row_store.py``: rows of all
of them back to back), so a batch, whatever the number of shards it spans, is one array of row
numbers. Then decoding is two phases, so that the output can be allocated once at its final
size by the caller's allocator (private numpy memory, or a worker's shared-memory slot):

1. :class:`ColumnBatch` (locate): the batch's rows, and which mapped shard each one reads.
2. :meth:`ColumnBatch.finish`: lengths in batch order give each output's shape; the allocator
   is asked for every array; a scalar column is one ``np.take`` from the table, any other
   column one offsets-driven copy (``core/batch_copy.py``: a loop of ``memcpy``\\ s, one per
   sample, ``preadv`` for large values, one fancy-index copy for tiny ones), with no Python
   object per sample kept. The common layouts (scalars and variable-size columns, ``offsets``)
   take a lean path with the fewest numpy calls, from the batch's rows or from values computed
   once for its planned chunk (``row_store.chunk_values``); arrays live in fresh numpy memory or
   a reused buffer (``core/batch_pool.py``).

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

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from astream.core.batch_copy import (
    copy_segments,
    copy_small,
    mixed_segments,
    pread_segments,
    strategy,
)
from astream.core.batch_layout import CODE_DTYPES, I64, U8, ColumnSpec
from astream.core.batch_pool import POOL
from astream.core.row_store import RowStore, chunk_values
from astream.errors import ConfigError, FormatError

__all__ = ["RAGGED", "Alloc", "ColumnBatch", "batch_rows"]

Alloc = Callable[[tuple[int, ...], np.dtype[Any]], np.ndarray[Any, Any]]
RAGGED = ("pad", "offsets")


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
        copied: Sequence[bool] | None = None,
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
        # per buffer: its values are read from its file with ``preadv``, never through its
        # map (a shard read by copy); None when every buffer is read through its map
        self.copied = copied if self.files and copied is not None and any(copied) else None
        self._fds: list[int] | None = None
        self._views: list[memoryview] | None = None
        self._lens: dict[int, I64] = {}
        self._sums: dict[int, int] = {}
        # the planned chunk this batch is samples span[0]:span[1] of (batch_groups.Chunk), if any:
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
        return CODE_DTYPES[first]

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
        ``POOL.min_bytes``). Same arrays as the general path with :func:`np_alloc`. Where the
        batch's planned chunk has its values computed (:func:`chunk_values`), they are sliced
        instead of read from the row store."""
        store = self.store
        if store is None or self.ragged != "offsets":
            return None
        cols = store.columns()
        if cols is None or self.size == 0:
            return None
        whole = chunk_values(self.chunk, store, cols) if self.chunk is not None else None
        planned = self._lean_plan(cols, whole)
        if planned is None:
            return None
        out, copies = planned
        which = self.which
        for name, dt, offs, total, srcl, endl in copies:
            values = np.empty(total // dt.itemsize, dt)
            dst = memoryview(values.view(np.uint8))  # type: ignore[arg-type]
            d = (offs if dt.itemsize == 1 else offs * dt.itemsize).tolist()
            if self.copied is not None:
                nb = [e - s for s, e in zip(srcl, endl)]
                mixed_segments(dst, d[:-1], srcl, nb, which, self._views_of(), self._copy_fds())
            elif which is None:
                b = self._views_of()[0]
                for d0, d1, s0, s1 in zip(d, d[1:], srcl, endl):
                    dst[d0:d1] = b[s0:s1]
            else:
                views = self._views_of()
                for d0, d1, s0, s1, w in zip(d, d[1:], srcl, endl, which):
                    dst[d0:d1] = views[w][s0:s1]
            out[name], out[f"{name}_offsets"] = values, offs
        return out

    def _lean_plan(
        self, cols: list[tuple[str, int, Any, Any, np.dtype[Any]]], whole: list[Any] | None
    ) -> tuple[dict[str, Any], list[tuple[Any, ...]]] | None:
        """The lean path's scalar arrays (in ``out``, variable columns holding their key's
        place) and, per variable column, ``(name, dtype, offsets, bytes, source starts, source
        ends)``: from the batch's rows of the store, or sliced from the chunk's values
        ``whole``. None where a column's values take another copy or the pool should hold it."""
        rows, n = self.rows, self.size
        lo, hi = self.span
        out: dict[str, Any] = {}
        copies: list[tuple[Any, ...]] = []
        bound = 0
        for j, (name, kind, col, start, dt) in enumerate(cols):
            got = None if whole is None else whole[j]
            if kind == 0:  # a scalar: its typed table column
                out[name] = col[rows] if got is None else got[lo:hi].copy()
                continue
            if got is None:
                nbytes = col[rows]
                offs = np.empty(n + 1, np.int64)
                offs[0] = 0
                (nbytes if dt.itemsize == 1 else nbytes // dt.itemsize).cumsum(out=offs[1:])
                src: tuple[Any, Any] = (start, nbytes)
            else:
                ends, srcs, ends_b = got
                offs = ends[lo : hi + 1] - ends[lo]
                src = (srcs[lo:hi], ends_b[lo:hi])
            total = int(offs[n]) * dt.itemsize
            how = strategy(total, n, self.which is None, bool(self.files), bool(self.copied))
            if how not in ("copy", "mixed"):
                return None  # one fancy-index copy, or preadv: the general path
            bound += total
            out[name] = out[f"{name}_offsets"] = None  # key order
            copies.append((name, dt, offs, total, src))
        if bound >= POOL.min_bytes:
            return None
        if whole is None:  # source ranges of the batch's rows, once every column qualified
            for i, (name, dt, offs, total, (start, nbytes)) in enumerate(copies):
                srcs = start[rows]
                copies[i] = (name, dt, offs, total, srcs.tolist(), (srcs + nbytes).tolist())
        else:
            copies = [(*c[:4], *c[4]) for c in copies]
        return out, copies

    def _copy_fds(self) -> list[int]:
        """Per buffer: the descriptor its values are read from (read by copy), else -1."""
        if self._fds is None:
            assert self.copied is not None
            self._fds = [f.fileno() if c else -1 for f, c in zip(self.files, self.copied)]
        return self._fds

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
        how = strategy(total, n, self.which is None, bool(self.files), bool(self.copied))
        if how == "small":
            copy_small(flat, dsts, self.bufs[0], srcs, nbytes)
            return
        args = (dsts.tolist(), srcs.tolist(), nbytes.tolist(), self.which)
        dst = memoryview(flat)  # type: ignore[arg-type]
        if how == "pread":
            pread_segments(dst, *args, self.files)
        elif how == "mixed":
            mixed_segments(dst, *args, self._views_of(), self._copy_fds())
        else:
            copy_segments(dst, *args, self._views_of())

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
