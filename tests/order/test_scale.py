"""Laziness: a billion-sample epoch plans in O(shards) and serves any worker at any position."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World
from astream.errors import ConfigError

from .helpers import round_robin


def test_billion_sample_epoch_is_lazy():
    sizes = np.full(250_000, 4000, np.int64)
    tracemalloc.start()
    try:
        t0 = time.perf_counter()
        p = plan_epoch(
            [StreamSpec(sizes)], seed=5, epoch=1, num_canonical_nodes=8, batch_size=32, shuffle=True
        )
        world = World(8, 8, 8)
        start = 700_000_000 - 700_000_000 % 2048
        batches = p.worker_batches(world, 45, 6, start)
        got = np.concatenate([next(batches) for _ in range(40)])
        elapsed = time.perf_counter() - t0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert p.num_samples == 1_000_000_000 and len(got) == 40 * 32
    assert len(set(got.tolist())) == len(got)
    # same ids as the global sequence at the dealt positions, computed independently
    pos = np.concatenate([p.rank_positions(world, 45, j, start) for j in range(6, 6 + 8 * 40, 8)])
    assert got.tolist() == p.global_ids(0, 0).tolist() + p.ids_at(pos).tolist()
    assert peak < 200e6, peak  # nothing O(epoch): 1e9 int64 ids would be 8 GB
    assert elapsed < 20, elapsed  # generous for a loaded CI box; ~0.2 s here


@pytest.mark.parametrize("ncn", [10**7, 10**9])
def test_planning_cost_does_not_grow_with_num_canonical_nodes(ncn):
    """More canonical nodes than samples: each sample is its own canonical node; only the
    nodes a position touches are ever cut (this took 60 s at 10**7 and hung at 10**9)."""
    sizes = np.full(20, 100, np.int64)
    t0 = time.perf_counter()
    p = plan_epoch(
        [StreamSpec(sizes)], seed=2, epoch=0, num_canonical_nodes=ncn, batch_size=16, shuffle=True
    )
    world = World(1, 2, 2)
    got = [np.concatenate(list(round_robin(p, world, r))) for r in range(2)]
    elapsed = time.perf_counter() - t0
    assert [len(g) for g in got] == [1000, 1000]
    assert sorted(np.concatenate(got).tolist()) == list(range(2000))
    # interleaving 2000 one-sample canonical nodes is the run layout itself
    assert p.global_ids(0, 2000).tolist() == plan_epoch(
        [StreamSpec(sizes)], seed=2, epoch=0, num_canonical_nodes=2000, batch_size=16,
        shuffle=True,
    ).global_ids(0, 2000).tolist()  # fmt: skip
    assert elapsed < 10, elapsed  # ~0.3 s here


@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
def test_huge_num_canonical_nodes_per_stream_methods(method):
    sizes = [StreamSpec(np.full(10, 100, np.int64), proportion=p) for p in (0.5, 0.5)]
    t0 = time.perf_counter()
    kw = dict(seed=2, epoch=0, num_canonical_nodes=10**9, batch_size=4, shuffle=True)
    if method == "device_per_stream":  # a node holds one sample: no whole device batch
        with pytest.raises(ConfigError, match="canonical node 0 of num_canonical_nodes=10000"):
            plan_epoch(sizes, batching_method=method, **kw)
        # 1,000 samples a stream over 300 nodes: nodes 0..99 hold 4 of each, the rest 3
        with pytest.raises(ConfigError, match="canonical node 100 of num_canonical_nodes=300 "):
            plan_epoch(sizes, batching_method=method, **{**kw, "num_canonical_nodes": 300})
    else:
        p = plan_epoch(sizes, batching_method=method, global_batch_size=8, **kw)
        got = np.concatenate(list(round_robin(p, World(1, 2, 1), 1)))
        assert len(got) == 1000 and len(set(got.tolist())) == 1000
    assert time.perf_counter() - t0 < 10
