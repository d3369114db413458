"""Shared helpers for the order tests: strategies, and the DataLoader round-robin rule."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import numpy as np
from hypothesis import strategies as st

from astream.core.order import EpochPlan, StreamSpec, plan_epoch
from astream.core.world import World

# Worlds of 8 ranks (plus the 1-rank world with an 8x batch): same global batch size.
WORLDS_8 = [World(1, 8, 2), World(2, 4, 4), World(4, 2, 8), World(8, 1, 1), World(1, 8, 1)]

shard_sizes = st.lists(st.integers(0, 40), min_size=1, max_size=12).filter(lambda s: sum(s) > 0)


def plan(sizes: list[int], **kw: object) -> EpochPlan:
    args: dict[str, object] = dict(
        seed=0, epoch=0, num_canonical_nodes=1, batch_size=1, shuffle=True
    )
    args.update(kw)
    return plan_epoch([StreamSpec(np.array(sizes, np.int64))], **args)  # type: ignore[arg-type]


def round_robin(plan: EpochPlan, world: World, rank: int, start: int = 0) -> Iterator[np.ndarray]:
    """What torch's DataLoader yields for an IterableDataset: batch i from worker i % W,
    skipping workers that are exhausted."""
    its = [plan.worker_batches(world, rank, w, start) for w in range(world.workers_per_rank)]
    alive = list(range(len(its)))
    while alive:
        for w in list(alive):
            try:
                yield next(its[w])
            except StopIteration:
                alive.remove(w)


def global_batches(plan: EpochPlan, world: World, start: int = 0) -> list[Counter[int]]:
    """Multiset of ids of each global batch, assembled from every worker of every rank."""
    per_rank = [list(round_robin(plan, world, r, start)) for r in range(world.num_ranks)]
    assert len({len(b) for b in per_rank}) == 1
    out = []
    for j in range(len(per_rank[0])):
        c: Counter[int] = Counter()
        for r in range(world.num_ranks):
            assert len(per_rank[r][j]) == plan.batch_size
            c.update(per_rank[r][j].tolist())
        out.append(c)
    return out


def planned_rank_sequence(plan: EpochPlan, world: World, rank: int, start: int = 0) -> list[int]:
    """The rank's planned sequence straight from global positions (no workers involved)."""
    nb = plan.rank_num_samples(world, rank, start) // plan.batch_size
    pos = [plan.rank_positions(world, rank, j, start) for j in range(nb)]
    return plan.ids_at(np.concatenate(pos)).tolist() if pos else []
