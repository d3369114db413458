"""The sample tables of the shards in use, back to back, so that a batch spanning any number
of shards is one array of row numbers (:class:`RowStore`); and the values of a whole planned
chunk read from it once (:func:`chunk_values`).

Pure: stdlib + numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from astream.core.batch_layout import Layout
from astream.core.sample_table import SampleTable

__all__ = ["RowStore", "chunk_values"]


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

    def add(self, s: int, t: SampleTable) -> int:
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


def chunk_values(
    chunk: Any, store: RowStore, cols: list[tuple[str, int, Any, Any, np.dtype[Any]]]
) -> list[Any] | None:
    """What :meth:`ColumnBatch._lean` needs of every sample of a planned chunk
    (``batch_groups.Chunk``: each sample's shard and index in it), read from ``store`` in one pass
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
