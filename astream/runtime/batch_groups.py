"""Planned batches grouped by shard: ``(shard, positions in the batch, indices in the shard)``
per shard, in order of first appearance, for one batch (:func:`batch_groups`) or a chunk of
planned batches in one vectorised pass (:func:`chunk_groups`).

May import: core, ``runtime.catalog``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from astream.runtime.catalog import Catalog

__all__ = ["BatchGroups", "Chunk", "Groups", "batch_groups", "chunk_groups"]


# (shard, positions in the batch, indices in the shard): sequences of ints (tuples or ranges,
# which the garbage collector stops scanning; see chunk_groups)
Groups = list[tuple[int, Sequence[int], Sequence[int]]]


class Chunk:
    """The planned batches :func:`chunk_groups` grouped in one pass: each sample's shard and
    index in it, in batch order, for what the columnar path computes once per chunk
    (``row_store.chunk_values``; ``cache`` is its)."""

    __slots__ = ("cache", "local", "shards")

    def __init__(
        self, shards: np.ndarray[Any, np.dtype[Any]], local: np.ndarray[Any, np.dtype[np.int64]]
    ) -> None:
        self.shards = shards
        self.local = local
        self.cache: Any = None


class BatchGroups(Groups):
    """A batch's ids grouped by shard: ``(shard, positions in the batch, indices in the shard)``
    per shard, in order of first appearance. :func:`batch_groups` also sets ``local`` (each
    id's index in its shard, in batch order) and ``which`` (each id's group; None when there is
    a single group), which the columnar path reads instead of walking the lists;
    :func:`chunk_groups` sets ``chunk`` (its :class:`Chunk`) and ``span`` (the batch's samples
    in it). Slotted: the lookahead holds thousands of these, and no ``__dict__`` each means
    fewer objects for every garbage collection to scan."""

    __slots__ = ("chunk", "local", "span", "which")

    def __init__(self, *groups: Any) -> None:
        super().__init__(*groups)
        self.local: np.ndarray[Any, np.dtype[np.int64]] | None = None
        self.which: np.ndarray[Any, np.dtype[np.int64]] | None = None
        self.chunk: Chunk | None = None
        self.span: tuple[int, int] = (0, 0)


def batch_groups(ids: np.ndarray[Any, np.dtype[np.int64]], catalog: Catalog) -> BatchGroups:
    """(shard, positions in the batch, indices in the shard) per shard, first appearance first.

    One vectorised lookup and one stable sort by shard; Python only runs once per group.
    """
    shard_a, local_a = catalog.locate(ids)
    n = len(shard_a)
    out = BatchGroups()
    if not n:
        return out
    local_a = np.asarray(local_a, np.int64)
    out.local = local_a
    s0 = int(shard_a[0])
    if not (shard_a != s0).any():
        out.append((s0, range(n), tuple(local_a.tolist())))
        return out
    order = np.argsort(shard_a, kind="stable")  # positions, grouped by shard, in batch order
    sorted_s = shard_a[order]
    cut = np.flatnonzero(sorted_s[1:] != sorted_s[:-1]) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [n]))
    rank = np.argsort(order[starts])  # runs in order of their first position in the batch
    new_id = np.empty(len(rank), np.int64)
    new_id[rank] = np.arange(len(rank), dtype=np.int64)
    which = np.empty(n, np.int64)
    which[order] = np.repeat(new_id, ends - starts)
    out.which = which
    pos = tuple(order.tolist())  # tuples (see chunk_groups)
    loc = tuple(local_a[order].tolist())
    sh, st, en = sorted_s[starts].tolist(), starts.tolist(), ends.tolist()
    for g in rank.tolist():
        a, b = st[g], en[g]
        out.append((sh[g], pos[a:b], loc[a:b]))
    return out


def chunk_groups(
    chunk: list[np.ndarray[Any, np.dtype[np.int64]]], catalog: Catalog
) -> list[BatchGroups]:
    """:func:`batch_groups` of every batch of ``chunk`` (planned batches in order), in one
    vectorised pass over all of them: one lookup, one stable sort by (batch, shard); Python
    then only runs once per group, slicing lists made once for the chunk."""
    if len(chunk) < 2:
        return [batch_groups(b, catalog) for b in chunk]
    sizes = np.fromiter((len(b) for b in chunk), np.int64, len(chunk))
    n = int(sizes.sum())
    if n == 0:
        return [BatchGroups() for _ in chunk]
    nb = len(chunk)
    shard_a, local_a = catalog.locate(np.concatenate(chunk).astype(np.int64, copy=False))
    local_a = np.asarray(local_a, np.int64)
    bstart = np.zeros(nb + 1, np.int64)
    np.cumsum(sizes, out=bstart[1:])
    bi = np.repeat(np.arange(nb, dtype=np.int64), sizes)  # each position's batch
    key = bi * (int(shard_a.max()) + 1) + shard_a
    order = np.argsort(key, kind="stable")  # positions by (batch, shard), in batch order
    skey = key[order]
    cut = np.flatnonzero(skey[1:] != skey[:-1]) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [n]))
    first = order[starts]  # each run's first position: runs of a batch, first appearance first
    rank = np.argsort(first, kind="stable")
    run_batch = bi[first]
    rstart = np.zeros(nb + 1, np.int64)
    np.cumsum(np.bincount(run_batch, minlength=nb), out=rstart[1:])
    at = np.empty(len(rank), np.int64)
    at[rank] = np.arange(len(rank), dtype=np.int64)
    which = np.empty(n, np.int64)
    which[order] = np.repeat(at - rstart[run_batch], ends - starts)  # group within its batch
    # positions within their batch and indices in their shard, as tuples: the lookahead holds
    # up to ``ahead`` samples of these, and the garbage collector stops scanning a tuple of
    # ints after its first pass (lists were scanned by every collection, on the caller's loop)
    pos = tuple((order - bstart[bi[order]]).tolist())
    loc = tuple(local_a[order].tolist())
    sh, st, en = shard_a[first].tolist(), starts.tolist(), ends.tolist()
    runs, rs, bs_ = rank.tolist(), rstart.tolist(), bstart.tolist()
    whole = Chunk(shard_a, local_a)
    out = []
    for b in range(nb):
        g = BatchGroups()
        lo, hi = bs_[b], bs_[b + 1]
        if hi > lo:
            g.chunk, g.span = whole, (lo, hi)
            g.local = local_a[lo:hi]
            mine = runs[rs[b] : rs[b + 1]]
            if len(mine) == 1:
                r = mine[0]
                g.append((sh[r], range(hi - lo), loc[st[r] : en[r]]))
            else:
                g.which = which[lo:hi]
                for r in mine:
                    a, e = st[r], en[r]
                    g.append((sh[r], pos[a:e], loc[a:e]))
        out.append(g)
    return out
