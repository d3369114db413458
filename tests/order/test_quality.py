"""Shuffle-quality metrics: exact on small cases, and they rank orders as they should."""

from __future__ import annotations

import numpy as np

from astream.core.quality import (
    displacement_score,
    index_order_score,
    max_live_shards,
    shards_per_window,
)

from .helpers import plan


def test_exact_small_cases():
    assert index_order_score(np.arange(10)) == 1 / (11 / 3)
    assert displacement_score(np.arange(10)) == 0.0
    assert displacement_score(np.array([2, 1, 0])) == (4 / 3) / (8 / 9)
    w = shards_per_window(np.array([0, 0, 1, 2, 2, 2, 3]), 3)
    assert (w.window, w.mean, w.max) == (3, 1.5, 2)
    assert max_live_shards(np.array([0, 1, 0, 2, 2, 1, 3])) == 2  # {0,1} then {1,2}
    assert max_live_shards(np.array([0, 1, 2, 0, 1, 2])) == 3
    assert max_live_shards(np.array([5, 5, 6, 6])) == 1


def test_metrics_rank_index_order_block_shuffle_and_full_permutation():
    sizes = [500] * 40
    bounds = np.cumsum(sizes)
    index = np.arange(20_000)
    blocky = plan(sizes, shuffle_block_size=2000).global_ids(0, 20_000)
    full = np.random.default_rng(1).permutation(20_000)
    scores = [index_order_score(x) for x in (index, blocky, full)]
    assert scores[0] < 0.001 < scores[1] and 0.97 < scores[2] < 1.03
    live = [
        max_live_shards(np.searchsorted(bounds, x, side="right")) for x in (index, blocky, full)
    ]
    assert live[0] == 1 and live[1] <= 2 * 2000 // 500 + 4 and live[2] == 40
