"""The planner's runs model against its exact model, and the reference orders in the planner."""

from __future__ import annotations

import numpy as np
import pytest

from astream.core.eviction import node_steps, step_uses
from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError
from astream.plan import (
    RUNS_OVERCOMMIT,
    SHUFFLES,
    merge_runs,
    node_runs,
    simulate_index,
    synthetic_index,
)


def test_merge_runs_joins_touching_runs_of_one_shard() -> None:
    f = np.array([0, 3, 2, 9, 5, 4], np.int64)
    la = np.array([2, 4, 2, 9, 7, 4], np.int64)
    s = np.array([1, 1, 2, 1, 1, 3], np.int64)
    got = merge_runs(f, la, s)
    # shard 1: [0,2] + [3,4] touch, + [5,7] touches; [9,9] is apart
    assert [a.tolist() for a in got] == [[0, 2, 4, 9], [7, 2, 4, 9], [1, 2, 3, 1]]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize(("nodes", "ncn"), [(2, 1), (2, 4), (4, 2), (3, 2)])
def test_runs_cover_every_exact_read(shuffle: bool, nodes: int, ncn: int) -> None:
    """Each read of the exact model lies inside a run of its shard on that node, and a node's
    runs read exactly the shards its exact reads do (shards are large: no short piece)."""
    sizes = np.full(60, 300, np.int64)
    plan = plan_epoch([StreamSpec(sizes)], seed=7, epoch=1, num_canonical_nodes=ncn,
                      batch_size=8, shuffle=shuffle, shuffle_block_size=700)  # fmt: skip
    world = World(nodes, 2, 2)
    steps = node_steps(plan, world)
    union = set()
    for q in range(nodes):
        tick, shard = step_uses(plan, world, q, 0, steps)
        first, last, rshard = node_runs(plan, world, q)
        assert set(rshard.tolist()) == set(shard.tolist())
        union |= set(rshard.tolist())
        step = tick // plan.batch_size
        for s in np.unique(shard).tolist():
            m = rshard == s
            at = step[shard == s]
            inside = (at[:, None] >= first[m][None, :]) & (at[:, None] <= last[m][None, :])
            assert inside.any(axis=1).all(), (q, s)
        assert (np.diff(first) >= 0).all() and (last >= first).all()
    assert union == set(range(60))


@pytest.mark.parametrize("limit_shards", [40, 100])
def test_runs_model_matches_exact_downloads(limit_shards: int) -> None:
    index = synthetic_index(400_000, 200)  # 2,000 samples, 2 MB per shard
    kw = dict(batch_size=16, nodes=2, ranks_per_node=2, workers=2, epochs=2,
              cache_limit=limit_shards * 2_048_000, cache_policy=("next_use", "lru"),
              bandwidth_mbps=2000, latency_ms=10, step_ms=5,
              shuffles=("none", "astream"))  # fmt: skip
    exact = simulate_index(index, model="exact", **kw)
    runs = simulate_index(index, model="runs", **kw)
    assert [r.model for r in runs] == ["runs"] * 4 and [r.model for r in exact] == ["exact"] * 4
    for a, b in zip(exact, runs):
        assert (a.shuffle, a.policy) == (b.shuffle, b.policy)
        assert b.notes == []
        for e in range(2):
            want, got = a.total("bytes", e), b.total("bytes", e)
            assert abs(got - want) <= 0.03 * want, (a.shuffle, a.policy, e, got, want)
            assert b.total("high_water", e) == a.total("high_water", e)
        assert b.epochs[0].first_batch_s == pytest.approx(a.epochs[0].first_batch_s, rel=0.35)


def test_runs_model_flags_a_cache_below_the_working_set() -> None:
    index = synthetic_index(400_000, 200)
    res = simulate_index(index, batch_size=16, ranks_per_node=2, cache_limit=3 * 2_048_000,
                         shuffles=["astream"], model="runs")  # fmt: skip
    assert res[0].notes == [RUNS_OVERCOMMIT]
    assert res[0].total("overcommit") > 0


def test_auto_model_switches_on_node_samples() -> None:
    from astream.plan import reads as planmod  # where model='auto' reads the threshold

    index = synthetic_index(40_000, 20)
    res = simulate_index(index, batch_size=8, nodes=2, shuffles=["astream"])
    assert res[0].model == "exact"
    old = planmod.EXACT_MAX_NODE_SAMPLES
    planmod.EXACT_MAX_NODE_SAMPLES = 10_000
    try:
        res = simulate_index(index, batch_size=8, nodes=2, shuffles=["astream", "py1e"],
                             num_canonical_nodes=2)  # fmt: skip
    finally:
        planmod.EXACT_MAX_NODE_SAMPLES = old
    assert [r.model for r in res] == ["runs", "exact"]  # the reference orders have no runs


def test_every_shuffle_side_by_side_reads_what_the_plan_deals() -> None:
    """Without a cache limit each node downloads exactly the shards its ranks' workers yield,
    under every algorithm (the reference's included)."""
    index = synthetic_index(12_000, 30)
    world = World(2, 2, 2)
    res = simulate_index(index, batch_size=8, nodes=2, ranks_per_node=2, workers=2,
                         num_canonical_nodes=2, shuffle_block_size=900)  # fmt: skip
    assert [r.shuffle for r in res] == list(SHUFFLES)
    for r in res:
        shuffle = r.shuffle != "none"
        algo = r.shuffle if shuffle else "astream"
        plan = plan_epoch([StreamSpec(index.sample_counts())], seed=9176, epoch=0,
                          num_canonical_nodes=2, batch_size=8, shuffle=shuffle,
                          shuffle_algo=algo, shuffle_block_size=900)  # fmt: skip
        for q in range(2):
            ids = [b for rank in (2 * q, 2 * q + 1) for w in range(2)
                   for b in plan.worker_batches(world, rank, w)]  # fmt: skip
            want = set(plan.shard_of(np.concatenate(ids)).tolist())
            fig = r.epochs[q]
            assert fig.downloads == fig.distinct_shards == len(want), (r.shuffle, q)
            assert fig.bytes == int(index.table.raw_bytes[sorted(want)].sum())


def test_reference_shuffle_default_canonical_nodes_and_errors() -> None:
    index = synthetic_index(4_000, 20)
    # without num_canonical_nodes the reference's orders take its default for the planned
    # nodes (the node count; 64 x nodes for py1s/py2s), as the dataset does; never runs
    kw = dict(batch_size=4, nodes=2, ranks_per_node=2, cache_limit=4 * 200_000)
    for algo, ncn in (("py1e", 2), ("py2s", 128)):
        (a,) = simulate_index(index, shuffles=[algo], model="runs", **kw)
        (b,) = simulate_index(index, shuffles=[algo], num_canonical_nodes=ncn, **kw)
        (c,) = simulate_index(index, shuffles=[algo], num_canonical_nodes=2 * ncn, **kw)
        figs = [[(f.bytes, f.downloads, f.high_water) for f in r.epochs] for r in (a, b, c)]
        assert a.model == "exact" and figs[0] == figs[1] and a.quality == b.quality
        assert (figs[0], a.quality) != (figs[2], c.quality)
    with pytest.raises(ConfigError, match="shuffles="):
        simulate_index(index, batch_size=4, shuffle=False)
    with pytest.raises(ConfigError, match="model"):
        simulate_index(index, batch_size=4, model="fast")
    with pytest.raises(ConfigError, match="unknown shuffle 'py1b'"):
        simulate_index(index, batch_size=4, shuffles=["py1b"])
