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
    """Multiset of ids of each global batch, assembled from every worker of every rank (every
    rank yields the same number of batches, of equal sizes; only the last may be partial)."""
    per_rank = [list(round_robin(plan, world, r, start)) for r in range(world.num_ranks)]
    assert len({len(b) for b in per_rank}) == 1
    out = []
    for j in range(len(per_rank[0])):
        c: Counter[int] = Counter()
        sizes = {len(per_rank[r][j]) for r in range(world.num_ranks)}
        assert len(sizes) == 1
        if j < len(per_rank[0]) - 1:
            assert sizes == {plan.batch_size}
        for r in range(world.num_ranks):
            c.update(per_rank[r][j].tolist())
        out.append(c)
    return out


def planned_rank_sequence(plan: EpochPlan, world: World, rank: int, start: int = 0) -> list[int]:
    """The rank's planned sequence straight from global positions (no workers involved)."""
    nb = -(-plan.rank_num_samples(world, rank, start) // plan.batch_size)
    pos = [plan.rank_positions(world, rank, j, start) for j in range(nb)]
    return plan.ids_at(np.concatenate(pos)).tolist() if pos else []


def reference_deal(n: int, world: World, start: int = 0) -> list[list[int]]:
    """Positions each rank yields, written out the way the reference partitions (plain lists):
    physical node ``p`` takes positions ``start + p, start + p + num_nodes, ...``; every node's
    list is padded to ``ranks_per_node * ceil((n - start) / num_ranks)`` with the samples
    ``[L - rpn - u + 1, L - rpn + 1)`` of its own list (``u`` pads, list length ``L``), or by
    tiling the list when it is too short; then dealt round-robin to the node's ranks."""
    pn, rpn = world.num_nodes, world.ranks_per_node
    m = n - start
    per_rank = -(-m // world.num_ranks)
    out: list[list[int]] = [[] for _ in range(world.num_ranks)]
    for node in range(pn):
        seq = list(range(start + node, n, pn))
        u = per_rank * rpn - len(seq)
        if u:
            if not seq:
                seq = [start + (x % m) for x in range(node, node + u * pn, pn)]
                u = per_rank * rpn - len(seq)
                assert u == 0
            elif rpn + u - 1 <= len(seq):
                seq = seq + seq[len(seq) - rpn - u + 1 : len(seq) - rpn + 1]
            else:
                seq = seq + [seq[i % len(seq)] for i in range(u)]
        for local in range(rpn):
            out[node * rpn + local] = seq[local::rpn]
    return out


def expected_global_batches(p, world, start=0):
    """Global batches as the reference's partition deals them (helpers.reference_deal)."""
    ranks = reference_deal(p.num_samples, world, start)
    bs = p.batch_size
    out = []
    for j in range(0, len(ranks[0]), bs):
        pos = np.array([q for r in ranks for q in r[j : j + bs]], np.int64)
        out.append(Counter(p.ids_at(pos).tolist()))
    return out
