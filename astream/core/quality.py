"""Shuffle-quality metrics: measured, not assumed.

Theory of operation
-------------------
Two questions about a yielded sequence of global sample ids:

1. *How far is it from index order?* :func:`index_order_score` is the mean absolute difference
   between consecutive ids divided by its expectation under a uniformly random permutation of the
   same ``n`` ids (``(n + 1) / 3``). Index order scores ~0; a full random permutation ~1;
   :func:`displacement_score` does the same for ``|id - position|`` (expectation ``(n**2 - 1) /
   (3 n)``), which catches orders that stay near their starting point.
2. *How local is it?* :func:`shards_per_window` counts the distinct shards in each window of
   ``window`` consecutive yielded samples (mean and max): the cache a reader of that sequence
   needs, and, for small windows, how many shards a batch mixes. :func:`max_live_shards` is
   the cache a reader needs if it fetches a shard just before its first use and evicts it just
   after its last: the most shards "open" at any point of the sequence.

All are O(n) numpy over the given ids; they never look at data.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "WindowStats",
    "displacement_score",
    "index_order_score",
    "max_live_shards",
    "shards_per_window",
]


def index_order_score(ids: NDArray[np.integer], num_ids: int | None = None) -> float:
    """Mean |consecutive id difference| / its expectation for a random permutation of
    ``num_ids`` ids (default ``len(ids)``: ``ids`` is the whole sequence; a prefix of a longer
    one is measured against the ids it is drawn from)."""
    ids = np.asarray(ids, np.int64)
    if len(ids) < 2:
        return 0.0
    n = len(ids) if num_ids is None else num_ids
    return float(np.abs(np.diff(ids)).mean() / ((n + 1) / 3))


def displacement_score(ids: NDArray[np.integer]) -> float:
    """Mean |id - rank of position| / its expectation for a random permutation."""
    ids = np.asarray(ids, np.int64)
    n = len(ids)
    if n < 2:
        return 0.0
    ranks = np.argsort(np.argsort(ids, kind="stable"), kind="stable")
    return float(np.abs(ranks - np.arange(n)).mean() / ((n * n - 1) / (3 * n)))


@dataclass(frozen=True)
class WindowStats:
    """Distinct shards per window of consecutive yielded samples."""

    window: int
    mean: float
    max: int


def shards_per_window(shards: NDArray[np.integer], window: int) -> WindowStats:
    """Distinct shard ids in each non-overlapping window of ``window`` consecutive entries."""
    shards = np.asarray(shards, np.int64)
    n = len(shards) // window * window
    if n == 0:
        return WindowStats(window, 0.0, 0)
    rows = np.sort(shards[:n].reshape(-1, window), axis=1)
    distinct = 1 + (np.diff(rows, axis=1) != 0).sum(axis=1)
    return WindowStats(window, float(distinct.mean()), int(distinct.max()))


def max_live_shards(shards: NDArray[np.integer]) -> int:
    """Most shards whose first use is at or before, and last use at or after, one position."""
    shards = np.asarray(shards, np.int64)
    if len(shards) == 0:
        return 0
    _, first = np.unique(shards, return_index=True)
    last = len(shards) - 1 - np.unique(shards[::-1], return_index=True)[1]
    delta = np.zeros(len(shards) + 1, np.int64)
    np.add.at(delta, first, 1)
    np.add.at(delta, last + 1, -1)
    return int(np.cumsum(delta).max())
