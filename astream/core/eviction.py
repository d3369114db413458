"""Which cached shard to drop: the one the node needs furthest in the future (Belady's rule).

Theory of operation
-------------------
**Time.** The unit of time is the *step*: rank batch ``j`` (counted from the iteration's
``start``). Data-parallel ranks advance in lockstep (step ``j`` of every rank waits for the
others' step ``j``), and a rank's DataLoader workers serve its batches round-robin (worker ``w``
yields batches ``w, w + W, ...``), so on one node "rank batch ``j`` of every local rank" is one
moment, whichever process reads it. A consumer reads a batch's shards one after the other (in
order of first appearance), so steps are refined into *ticks* ``j * batch_size + offset``,
``offset`` being the shard's first position in the batch.

**The node's future is computed, not shared.** :class:`NodeFuture` gives, for any shard and any
tick ``now``, the first tick ``>= now`` at which any rank of the node reads it. It is a pure
function of (epoch plan, World, node, start): every process of the node computes the same
table from what it already has, so nothing is published, no file can be stale, a dead process
leaves nothing behind and nothing runs on the hot path. The alternative -- each process
publishing "shard -> my next use" tables in the cache directory for an evictor to merge -- needs
a common clock between processes anyway (lockstep again), liveness checks on every table, and a
rewrite per window; it gains only for processes whose order the others cannot compute (another
job on the same cache), whose shards then simply fall back to LRU here.

The table covers a *horizon* of steps ahead of ``now`` (``horizon_samples`` node samples, 2**20
by default: ~50 ms of numpy per window), recomputed when ``now`` passes the window's middle, so
its cost is O(samples) spread over the epoch and paid only by processes that actually evict.
A shard not read within the horizon counts as never read again (:data:`NEVER`).

**The rule** (:func:`eviction_order`, shared by the runtime cache and the planner): drop the
shard whose next use is furthest; among equals (never used again, beyond the horizon, or every
shard under ``policy="lru"``), the least recently used first. Pinned shards (being read) are the
caller's business: the runtime skips them, the planner keeps the shards of the current step.

Pure: numpy only; the plan is asked through its public methods (``rank_positions``,
``rank_num_samples``, ``ids_at``, ``shard_of``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from astream.core.world import World
from astream.errors import ConfigError

__all__ = [
    "NEVER",
    "POLICIES",
    "ConsumerClock",
    "NodeFuture",
    "check_policy",
    "eviction_order",
    "node_steps",
    "rank_uses",
    "step_uses",
    "victim_key",
]

I64 = NDArray[np.int64]
NEVER = np.iinfo(np.int64).max
POLICIES = ("next_use", "lru")
DEFAULT_HORIZON_SAMPLES = 1 << 20


def check_policy(policy: object) -> str:
    """``policy`` if it is a known cache policy, else ConfigError naming ``cache_policy``."""
    if policy not in POLICIES:
        raise ConfigError(f"cache_policy must be 'next_use' or 'lru', got {policy!r}")
    return str(policy)


def victim_key(policy: str, next_use: int, last_used: float) -> tuple[float, float]:
    """Sort key of one cached shard: the smallest is evicted first.

    ``next_use``: step of its next read (:data:`NEVER`: not again), ignored under ``"lru"``;
    ``last_used``: any increasing clock of its last read (mtime, step)."""
    if policy == "lru":
        return (0.0, float(last_used))
    return (-float(next_use), float(last_used))


def eviction_order(policy: str, next_use: Any, last_used: Any) -> list[int]:
    """Indices of candidates, first to evict first: furthest next use, then least recently
    used (by :func:`victim_key`, the rule the planner's replay uses too)."""
    nxt = [int(x) for x in np.asarray(next_use, np.int64).tolist()]
    last = [float(x) for x in last_used]
    return sorted(range(len(last)), key=lambda i: victim_key(policy, nxt[i], last[i]))


def node_steps(plan: Any, world: World, start: int = 0) -> int:
    """Rank batches (steps) of every rank from ``start``: the same for all ranks."""
    n = plan.rank_num_samples(world, 0, start)
    if plan.batching_method == "device_per_stream":
        return int(n // plan.batch_size)
    return int(-(-n // plan.batch_size))


def _rank_positions(plan: Any, world: World, rank: int, j0: int, j1: int, start: int) -> I64:
    """Global positions of rank batches ``[j0, j1)`` of ``rank``, concatenated, with step.
    The plan deals them (its batching method and algorithm decide the layout)."""
    return np.asarray(plan.rank_positions_span(world, rank, j0, j1, start), np.int64)


def rank_uses(
    plan: Any, world: World, rank: int, j0: int, j1: int, start: int = 0
) -> tuple[I64, I64]:
    """(tick, shard) of the first read of each shard in each of ``rank``'s batches
    ``[j0, j1)``, sorted by tick. A *tick* is ``step * batch_size + offset``: a rank reads a
    batch's shards one after the other, in order of first appearance in the batch (see
    ``runtime/batch_groups.batch_groups``), ``offset`` being that first appearance."""
    bs = plan.batch_size
    pos = _rank_positions(plan, world, rank, j0, j1, start)
    if not len(pos):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    shards = plan.shard_of(plan.ids_at(pos))
    ticks = j0 * bs + np.arange(len(pos), dtype=np.int64)
    span = int(shards.max()) + 1
    _, first = np.unique((ticks // bs) * span + shards, return_index=True)
    first.sort()
    return ticks[first], shards[first]


def step_uses(
    plan: Any, world: World, node: int, j0: int, j1: int, start: int = 0
) -> tuple[I64, I64]:
    """(tick, shard) reads of all ranks of ``node`` in steps ``[j0, j1)`` (see
    :func:`rank_uses`), sorted by tick; ranks reading a shard at the same tick give one pair."""
    got = [
        rank_uses(plan, world, node * world.ranks_per_node + local, j0, j1, start)
        for local in range(world.ranks_per_node)
    ]
    got = [(t, s) for t, s in got if len(t)]
    if not got:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    span = 1 + max(int(s.max()) for _, s in got)
    key = np.unique(np.concatenate([t * span + s for t, s in got]))
    return key // span, key % span


class NodeFuture:
    """When the ranks of one node next read any shard (see module docstring).

    Each local rank has its own window of its own reads; :meth:`next_use` takes each rank's
    current tick (they may drift apart: ranks without a process group, DataLoader prefetch)
    and returns the distance, in ticks, to the soonest read by any of them."""

    def __init__(
        self,
        plan: Any,
        world: World,
        node: int,
        start: int = 0,
        *,
        horizon_samples: int = DEFAULT_HORIZON_SAMPLES,
    ) -> None:
        self.plan = plan
        self.world = world
        self.node = node
        self.start = start
        self.bs = plan.batch_size
        self.steps = node_steps(plan, world, start)
        self.ticks = self.steps * self.bs
        self.horizon = max(2, horizon_samples // max(1, self.bs))  # steps, per rank
        self._windows: dict[int, tuple[int, int, I64]] = {}  # local -> (lo, hi, key)
        self.windows = 0  # windows computed (for tests and stats)

    def _window(self, local: int, step: int) -> tuple[int, I64]:
        hit = self._windows.get(local)
        if hit is not None:
            lo, hi, key = hit
            if lo <= step and (step < lo + self.horizon // 2 or hi >= self.steps):
                return hi, key
        lo, hi = step, min(step + self.horizon, self.steps)
        rank = self.node * self.world.ranks_per_node + local
        tick, shard = rank_uses(self.plan, self.world, rank, lo, hi, self.start)
        key = np.sort(shard * (self.ticks + 1) + tick)
        self._windows[local] = (lo, hi, key)
        self.windows += 1
        return hi, key

    def next_use(self, shards: Any, nows: Sequence[int | None]) -> I64:
        """Ticks from now to the soonest read of each of ``shards`` by a rank of the node
        (:data:`NEVER`: none within the horizon, or none again this epoch). ``nows[local]``:
        that rank's current tick (None: unknown, the rank is left out). Shards < 0 (files of
        no known shard) give NEVER."""
        s = np.asarray(shards, np.int64)
        out = np.full(len(s), NEVER, np.int64)
        if not len(s):
            return out
        span = self.ticks + 1
        for local, now in enumerate(nows):
            if now is None or now >= self.ticks:
                continue
            now = max(0, int(now))
            _, key = self._window(local, now // self.bs)
            at = np.searchsorted(key, s * span + now)
            ok = (s >= 0) & (at < len(key))
            hit = np.zeros(len(s), np.int64)
            hit[ok] = key[at[ok]]
            ok &= hit // span == s
            dist = np.where(ok, hit % span - now, NEVER)
            np.minimum(out, dist, out=out)
        return out


class ConsumerClock:
    """One consumer's place in its node's time: worker ``worker`` of ``workers`` reads rank
    batches ``first, first + workers, ...``; its ``k``-th batch is step ``first + k * workers``
    (``first`` counts batches a resumed iteration skipped)."""

    def __init__(self, future: NodeFuture, local: int, first: int, workers: int) -> None:
        self.future = future
        self.local = local  # the consumer's rank within its node
        self.first = first
        self.workers = workers

    @classmethod
    def for_consumer(
        cls, plan: Any, world: World, rank: int, worker: int, start: int = 0, skip: int = 0
    ) -> ConsumerClock:
        """The clock of ``worker`` of ``rank`` reading ``plan`` from ``start``, ``skip``
        samples of its own already yielded (see ``EpochPlan.worker_batches``)."""
        future = NodeFuture(plan, world, world.node_of(rank), start)
        first = worker + (skip // plan.batch_size) * world.workers_per_rank
        return cls(future, rank % world.ranks_per_node, first, world.workers_per_rank)

    def tick(self, k: int, offset: int = 0) -> int:
        """The rank tick of position ``offset`` of this consumer's ``k``-th batch."""
        return int((self.first + k * self.workers) * self.future.bs + offset)
