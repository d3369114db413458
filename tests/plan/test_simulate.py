"""The pure eviction rule, the node future and the planner's replay (no I/O)."""

from __future__ import annotations

import numpy as np
import pytest

from astream.core.cachesim import CacheReplay
from astream.core.eviction import NEVER, NodeFuture, eviction_order, rank_uses, step_uses
from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError
from astream.plan import simulate_index

SIZES = np.full(20, 200, np.int64)


def _plan(epoch: int = 0, block: int | None = 400):
    return plan_epoch([StreamSpec(SIZES)], seed=9176, epoch=epoch, num_canonical_nodes=1,
                      batch_size=8, shuffle=True, shuffle_block_size=block)  # fmt: skip


def test_eviction_order_furthest_first_then_lru() -> None:
    nxt = [5, NEVER, 9, NEVER]
    last = [1.0, 3.0, 2.0, 0.5]
    assert eviction_order("next_use", nxt, last) == [3, 1, 2, 0]
    assert eviction_order("lru", nxt, last) == [3, 0, 2, 1]


def test_node_future_is_the_next_read_of_the_plan() -> None:
    plan, world = _plan(), World(1, 2, 2)
    ticks, shards = step_uses(plan, world, 0, 0, 10**6)
    fut = NodeFuture(plan, world, 0, horizon_samples=64)  # small windows: slides many times
    for now in (0, 17, 333, 1000):
        got = fut.next_use(np.arange(20), [now, now])
        for s in range(20):
            later = ticks[(shards == s) & (ticks >= now)]
            assert got[s] == (later[0] - now if len(later) else NEVER) or (
                got[s] == NEVER and later[0] - now >= fut.horizon * 8 // 2
            )
    assert fut.windows > 2


def test_rank_uses_cover_every_sample_of_the_rank() -> None:
    plan, world = _plan(), World(1, 2, 1)
    seen = set()
    for rank in range(2):
        _t, s = rank_uses(plan, world, rank, 0, 10**6)
        ids = np.concatenate(list(plan.worker_batches(world, rank, 0)))
        assert set(s.tolist()) == set(plan.shard_of(ids).tolist())
        seen |= set(s.tolist())
    assert seen == set(range(20))


def test_replay_next_use_never_worse_than_lru_and_limit_held() -> None:
    world = World(1, 2, 2)
    sizes = np.full(20, 1000, np.int64)
    got = {}
    for policy in ("next_use", "lru"):
        rep = CacheReplay(sizes, 10_000, policy)
        per = []
        for e in range(3):
            plan = _plan(e)
            t, s = step_uses(plan, world, 0, 0, 10**6)
            r = rep.epoch(t, s, 10**6)
            assert r.high_water <= 10_000 and r.overcommit == 0
            per.append(r.downloads)
        got[policy] = per
    assert got["next_use"][0] == 20  # the first epoch reads every shard once
    assert sum(got["next_use"][1:]) < sum(got["lru"][1:])
    assert got["next_use"][1] <= 12  # half the dataset cached: about half is downloaded again


def test_simulate_without_limit_downloads_each_shard_once() -> None:
    from astream.core.index import parse_index
    from astream.testing import __name__ as _  # noqa: F401

    shards = [
        {"column_encodings": ["int"], "column_names": ["x"], "column_sizes": [8],
         "compression": None, "format": "mds", "hashes": [], "samples": 200,
         "size_limit": 1 << 20, "version": 2, "zip_data": None,
         "raw_data": {"basename": f"shard.{i:05}.mds", "bytes": 1000 + i, "hashes": {}}}
        for i in range(20)
    ]  # fmt: skip
    import json

    index = parse_index(json.dumps({"version": 2, "shards": shards}).encode(), "index.json")
    res = simulate_index(index, batch_size=8, ranks_per_node=2, epochs=2, shuffle_block_size=400)
    # every order astream has; the reference's take their default canonical nodes (1 node)
    assert [r.shuffle for r in res] == ["none", "astream", "py1e", "py1br", "py1s", "py2s", "naive"]
    for r in res:
        assert [f.bytes for f in r.epochs] == [sum(1000 + i for i in range(20)), 0]
        assert r.epochs[0].high_water == sum(1000 + i for i in range(20))
    with pytest.raises(ConfigError, match="cache_policy"):
        simulate_index(index, batch_size=8, cache_policy="fifo")


def test_quality_scores_a_prefix_against_the_whole_dataset() -> None:
    """``index_order`` of the first ``quality_samples`` samples is measured against the ids of
    the whole dataset, not of the prefix: in index order each step is 1 id."""
    from astream.plan import synthetic_index

    index = synthetic_index(10_000, 10)
    res = simulate_index(index, batch_size=10, shuffles=["none"], quality_samples=1000)
    assert res[0].quality["index_order"] == round(3 / 10_001, 4) == 0.0003
