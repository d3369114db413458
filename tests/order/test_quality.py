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


def test_the_measures_apply_to_every_reference_algorithm():
    """docs/order.md's claims, on 8 shards of 2,500: py1e/py1br/naive mix like a permutation at
    the reference's default block; py1s/py2s keep each batch inside one shard."""
    from astream.core.order import StreamSpec, plan_epoch

    sizes = np.full(8, 2500, np.int64)
    bounds = np.cumsum(sizes)
    for algo in ("py1e", "py1br", "naive", "py1s", "py2s"):
        p = plan_epoch(
            [StreamSpec(sizes)], seed=17, epoch=0, num_canonical_nodes=1, batch_size=32,
            shuffle=True, shuffle_algo=algo,
        )  # fmt: skip
        ids = p.global_ids(0, p.num_samples)
        assert sorted(ids.tolist()) == list(range(20_000)), algo
        shards = np.searchsorted(bounds, ids, side="right")
        batch = shards_per_window(shards, 32)
        if algo in ("py1s", "py2s"):
            assert index_order_score(ids) < 0.2, algo
            assert max_live_shards(shards) == 1, algo
            assert batch.max <= 2, algo
        else:
            assert 0.95 < index_order_score(ids) < 1.05, algo
            assert 0.95 < displacement_score(ids) < 1.05, algo
            assert max_live_shards(shards) == 8, algo
            assert batch.mean > 7, algo
