"""What a node reads in an epoch, in the planner's two read models (``astream.plan``'s
docstring, 1): *exact* (every rank batch's shards, from the same dealing the runtime uses) and
*runs* (per shard, the stretches of steps it is read over, from the piece layout alone).

May import: core, errors.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from astream.core.eviction import node_steps, rank_uses, step_uses
from astream.core.world import World
from astream.errors import ConfigError

__all__ = [
    "EXACT_MAX_NODE_SAMPLES",
    "merge_runs",
    "node_reads",
    "node_runs",
    "pick_model",
    "rank_reads",
    "reads_digest",
]

I64 = NDArray[np.int64]
EXACT_MAX_NODE_SAMPLES = 1 << 22  # model="auto": exact up to this many samples per node
_WINDOW_SAMPLES = 1 << 22  # node samples per step_uses call (bounds memory)


def pick_model(plan: Any, world: World, model: str) -> str:
    """The read model that runs for ``plan``: ``"exact"`` or ``"runs"`` (``model``: as asked)."""
    runs_ok = not plan.reference and plan.batching_method == "random"
    if model == "exact" or not runs_ok:
        return "exact"
    if model == "runs":
        return "runs"
    return "runs" if plan.num_samples // world.num_nodes > EXACT_MAX_NODE_SAMPLES else "exact"


def node_reads(plan: Any, world: World, node: int, *, model: str) -> tuple[I64, I64, I64]:
    """(first tick, last tick, shard) of the node's reads: exact (first == last, one per rank
    batch and shard, ticks ``step * batch_size + offset``) or runs (steps)."""
    if model == "runs":
        return node_runs(plan, world, node)
    steps = node_steps(plan, world)
    per_window = max(1, _WINDOW_SAMPLES // max(1, plan.batch_size * world.ranks_per_node))
    ticks, shards = [], []
    for j0 in range(0, steps, per_window):
        t, s = step_uses(plan, world, node, j0, min(steps, j0 + per_window))
        ticks.append(t)
        shards.append(s)
    tick = np.concatenate(ticks) if ticks else np.zeros(0, np.int64)
    shard = np.concatenate(shards) if shards else np.zeros(0, np.int64)
    return tick, tick, shard


def rank_reads(plan: Any, world: World, node: int) -> list[tuple[I64, I64]]:
    """Per local rank of ``node``: its (tick, shard) reads of the epoch (``rank_uses``)."""
    steps = node_steps(plan, world)
    per_window = max(1, _WINDOW_SAMPLES // max(1, plan.batch_size))
    out = []
    for local in range(world.ranks_per_node):
        rank = node * world.ranks_per_node + local
        parts = [rank_uses(plan, world, rank, j0, min(steps, j0 + per_window))
                 for j0 in range(0, steps, per_window)]  # fmt: skip
        z = np.zeros(0, np.int64)
        out.append((np.concatenate([t for t, _ in parts]) if parts else z,
                    np.concatenate([s for _, s in parts]) if parts else z))  # fmt: skip
    return out


def node_runs(plan: Any, world: World, node: int) -> tuple[I64, I64, I64]:
    """(first step, last step, shard) of every run of ``node`` in one epoch, sorted by first
    step (the *runs* model of the module docstring). ``plan``: an astream-order (or unshuffled)
    plan with ``batching_method="random"``."""
    if plan.reference or plan.batching_method != "random":
        raise ConfigError("node_runs: only for shuffle 'none'/'astream', batching 'random'")
    sub = plan._subs[0]  # the one SubPlan of batching_method="random"
    ncn, pn = sub.ncn, world.num_nodes
    g = math.gcd(ncn, pn)
    m = pn // g  # a node reads every m-th position of each canonical node it reads
    gb = plan.batch_size * world.num_ranks
    steps = node_steps(plan, world)
    firsts, lasts, shards = [], [], []
    for c in range(node % g, ncn, g):
        length = int(sub.node_len(c))
        if length == 0:
            continue
        starts, part = sub._node(c)
        lo, hi = starts[:-1], starts[1:]  # piece order ranges [lo, hi)
        keep = part.length > 0
        lo, hi, shard = lo[keep], hi[keep], part.shard[keep]
        if sub.shuffle:  # each block reads each shard with a piece in it, over the whole block
            bsz = sub.block_size
            b0, b1 = lo // bsz, (hi - 1) // bsz
            cnt = b1 - b0 + 1
            row = np.repeat(np.arange(len(lo)), cnt)
            off = np.arange(len(row)) - np.repeat(np.cumsum(cnt) - cnt, cnt)
            blk = b0[row] + off
            t_lo, t_hi, shard = blk * bsz, np.minimum((blk + 1) * bsz, length) - 1, shard[row]
        else:
            t_lo, t_hi = lo, hi - 1
        # node positions t of c read by this node: t * ncn + c = node (mod nodes)
        t0 = next(t for t in range(m) if (t * ncn + c - node) % pn == 0)
        read = t_lo + (t0 - t_lo) % m <= t_hi
        firsts.append((t_lo[read] * ncn + c) // gb)
        lasts.append((t_hi[read] * ncn + c) // gb)
        shards.append(shard[read])
    if not firsts:
        z = np.zeros(0, np.int64)
        return z, z, z
    f = np.minimum(np.concatenate(firsts), steps - 1)
    la = np.minimum(np.concatenate(lasts), steps - 1)
    s = np.concatenate(shards).astype(np.int64)
    return merge_runs(f, la, s)


def merge_runs(first: I64, last: I64, shard: I64) -> tuple[I64, I64, I64]:
    """Runs of one shard that overlap or touch (consecutive steps) merged; sorted by first
    step, then shard."""
    if not len(first):
        return first, last, shard
    by = np.lexsort((first, shard))
    f, la, s = first[by], last[by], shard[by]
    span = int(la.max()) + 2
    reach = np.maximum.accumulate(s * span + la) - s * span  # furthest last so far, per shard
    new = np.ones(len(f), bool)
    new[1:] = (s[1:] != s[:-1]) | (f[1:] > reach[:-1] + 1)
    head = np.flatnonzero(new)
    ends = np.r_[head[1:], len(f)] - 1
    f, la, s = f[head], reach[ends], s[head]
    by = np.lexsort((s, f))
    return f[by], la[by], s[by]


def reads_digest(reads: tuple[I64, I64, I64]) -> bytes:
    """A key equal for equal reads: nodes with equal reads (and cache) are replayed once."""
    h = hashlib.blake2b(digest_size=16)
    for a in reads:
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.digest()
