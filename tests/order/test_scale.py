"""Laziness: a billion-sample epoch plans in O(shards) and serves any worker at any position."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World


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
