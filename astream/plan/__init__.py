"""Predict a run before launching it: downloads, cache high-water, first batch, stalls.

Theory of operation
-------------------
Everything a run will read is known from the index and the order plan alone, so
:func:`simulate` reads no data. For each shuffle asked for (no shuffle, ``"astream"``, and the
reference's ``"py1e"``, ``"py1br"``, ``"py1s"``, ``"py2s"``, ``"naive"``), each cache policy,
each physical node and each epoch:

1. **Reads**, in one of two models (``model``; the result's ``model`` says which ran):

   - *exact*: the node's ``(tick, shard)`` reads, step window by step window
     (:func:`astream.core.eviction.step_uses`: the same plan and dealing the runtime uses, one
     pair per rank batch and shard of the batch). Work and memory O(samples of the node).
   - *runs*: per canonical node of the order, the shards each stretch of its sequence reads,
     from the piece layout alone (no sample id is computed): with a shuffle, every shard with
     samples in a shuffle block is read over the whole block's steps (the block permutes its
     samples); without, each piece is read over its own positions. A node reads canonical node
     ``c`` when ``c = node (mod gcd(ncn, nodes))``; a run is ``(first step, last step,
     shard)``, runs of one shard that touch are merged. Work O(pieces + blocks), not samples.
     What it rounds: a shard is taken as read at every step of its block (a node with only a
     few of the shard's samples in the block may in fact not read it, or read it at fewer
     steps), and reads within a step are not ordered. Only for ``batching_method="random"``
     with ``none``/``astream`` (the reference's orders are one O(epoch) permutation anyway,
     and the per-stream methods interleave chunks).

   ``model="auto"`` (default) runs *exact* up to :data:`EXACT_MAX_NODE_SAMPLES` samples per
   node and epoch and *runs* above, where available; ``"runs"`` uses runs wherever available;
   ``"exact"`` never does. Nodes whose reads come out identical (every node when
   ``num_canonical_nodes=1`` under runs) are replayed once.
2. **Cache.** The reads are replayed with the runtime's eviction rule
   (:func:`astream.core.eviction.victim_key`): :class:`astream.core.cachesim.CacheReplay`
   (exact) or :class:`~astream.core.cachesim.RunReplay` (runs). Downloads, bytes, re-downloads,
   evictions, high-water mark, occupancy per step. The cache carries over between epochs. In
   the exact model a shard read at step ``u`` stays pinned over the next ``workers - 1`` steps
   (each DataLoader worker pins the batch it decodes; the workers decode consecutive steps at
   once); when only pinned shards are left, the pin of the first of them in victim order is
   waited for and that shard evicted (as ``CacheSpace._evict`` does).
   *Interleavings* (``interleavings=N``, exact model, with a ``cache_limit``): that replay is
   one fixed interleaving of the node's consumers, without their prefetchers; the real ones
   race, and a prefetch into free room can cost a demand read an eviction (under LRU of the
   unread prefetched shard, downloaded again later). Each epoch is replayed ``N`` more times
   under seeded interleavings (:func:`timed_reads`: per consumer a start offset of up to
   ``workers x 2`` steps, each read at a random point of its step, a prefetch try that takes
   free room only ``lookahead`` steps before each read; :meth:`CacheReplay.epoch_timed`), each
   with its own cache across epochs; ``bytes_range``/``downloads_range`` are (min, median,
   max) over those and the fixed replay.
3. **Time** (with ``bandwidth_mbps``): the node's link moves the bytes at the bandwidth.
   *Opening*: every consumer starts at once, asking for its first batch and announcing its
   prefetch window (``lookahead`` steps: ``predownload`` samples per worker), so the downloads
   of steps ``0 .. max(workers, lookahead) - 1``, as many in step order as fit in
   ``cache_limit`` together, share the link and arrive together after one ``latency_ms``:
   time to first batch is that latency plus those bytes over the bandwidth. *After it*: one
   download at a time, each request paying ``latency_ms`` unless it overlaps an earlier
   transfer; downloads of step ``u`` start when the consumer is ``lookahead`` steps before
   ``u``; step ``u`` starts when the previous step has run ``step_ms`` and its shards are in.
   The stall share is the time later steps waited for data over the epoch's time (which
   starts with the first batch's wait). How the opening really shares the link is a race
   (a worker that starts late leaves step 0's downloads alone on it), so
   ``first_batch_alone_s`` gives the other end: one latency plus step 0's bytes alone. A
   model: process start-up, decode time and the DataLoader's hand-off are not in it.
4. **Quality** (:mod:`astream.core.quality`) of rank 0's first ``quality_samples`` samples
   of epoch 0: distance from index order (0: index order, ~1: a full random permutation) and
   distinct shards per device batch.

Cost: the reference algorithms build their O(epoch) permutation per epoch (as the reference
does; see docs/order.md); only one epoch's plan is held at a time.

Modules: ``options`` (argument checks, the order arguments of a planned dataset), ``reads``
(the two read models), ``replay`` (the cache replays and interleavings), ``timing`` (the time
model), ``synthetic`` (in-memory indexes); this one runs them. May import: core, errors, and
the runtime lazily (the dataset's configuration checks, reading an index by URL).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from astream.core.cachesim import CacheReplay, RunReplay
from astream.core.eviction import node_steps
from astream.core.index import Index
from astream.core.order import StreamSpec, plan_epoch
from astream.core.quality import index_order_score, shards_per_window
from astream.core.world import World
from astream.errors import ConfigError
from astream.plan.options import (
    MODELS,
    REFERENCE_SHUFFLES,
    SHUFFLES,
    check_args,
    config_args,
)
from astream.plan.reads import (
    EXACT_MAX_NODE_SAMPLES,
    merge_runs,
    node_reads,
    node_runs,
    pick_model,
    reads_digest,
)
from astream.plan.replay import EpochFigures, interleave, replay_epoch
from astream.plan.synthetic import synthetic_index

__all__ = [
    "EXACT_MAX_NODE_SAMPLES",
    "MODELS",
    "REFERENCE_SHUFFLES",
    "SHUFFLES",
    "EpochFigures",
    "PlanResult",
    "PlanStream",
    "merge_runs",
    "node_runs",
    "simulate",
    "simulate_index",
    "synthetic_index",
]

RUNS_OVERCOMMIT = (
    "runs model: cache_limit is below the working set (the shards of the blocks read at once), "
    "so the run will re-download within blocks and these downloads are too low; use "
    "model='exact', a larger cache_limit or a smaller shuffle_block_size"
)
EXACT_OVERCOMMIT = (
    "cache_limit is smaller than the shards read at one moment: the replay went {:,} bytes "
    "over it (the runtime then waits for room and re-downloads); raise cache_limit"
)
PIN_WAITS = (
    "cache_limit is below the shards of the batches the workers decode at once: consumers "
    "wait for each other's pins {:,} times, and which one gets room first depends on timing, "
    "so real downloads vary from run to run and have measured up to ~1.8x these (docs/plan.md); "
    "raise cache_limit"
)
RUNS_NO_SPREAD = (
    "interleavings: the runs model gives one figure per epoch (no spread over the consumers' "
    "interleavings); use model='exact' for the range"
)


@dataclass(frozen=True)
class PlanStream:
    """One stream of the planned dataset: its index and its weight (at most one)."""

    index: Index
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None


@dataclass
class PlanResult:
    """The figures of one shuffle and cache policy."""

    shuffle: str
    policy: str
    epochs: list[EpochFigures]
    quality: dict[str, float]
    model: str = "exact"  # the reads model that ran: "exact" or "runs"
    notes: list[str] = field(default_factory=list)  # caveats on these figures

    def total(self, name: str, epoch: int | None = None) -> int:
        """Sum of an integer figure over nodes (of one epoch, or all)."""
        return sum(getattr(f, name) for f in self.epochs if epoch is None or f.epoch == epoch)

    def span(self, name: str, epoch: int | None = None) -> tuple[int, int, int] | None:
        """(min, median, max) of ``"bytes"`` or ``"downloads"`` over the interleavings, summed
        over nodes (each node's own min, median, max: a bound for the node total) of one
        epoch or all; None without interleavings."""
        figs = [f for f in self.epochs if epoch is None or f.epoch == epoch]
        got = [getattr(f, f"{name}_range") for f in figs]
        if not got or any(g is None for g in got):
            return None
        return (sum(g[0] for g in got), sum(g[1] for g in got), sum(g[2] for g in got))


def simulate(
    url: str,
    *,
    split: str | None = None,
    storage_options: dict[str, Any] | None = None,
    **kwargs: Any,
) -> list[PlanResult]:
    """:func:`simulate_index` on the index.json of a dataset directory or remote URL."""
    from astream.runtime.locate import join_split, read_index

    index = read_index(join_split(url, split), **(storage_options or {}))
    return simulate_index(index, **kwargs)


@dataclass
class _Setup:
    """What every shuffle's simulation shares: the world, the streams' shards and the link."""

    world: World
    policies: list[str]
    epochs: int
    specs: list[StreamSpec]
    wire: Any  # per shard: bytes downloaded (the zip when there is one)
    footprint: Any  # per shard: bytes held in the cache
    counts: Any  # per shard: samples
    base: dict[str, Any]  # the dataset's order arguments
    bw: float | None  # bytes per second
    latency: float  # seconds
    step: float  # seconds
    predownload: int | None
    quality_samples: int
    interleavings: int
    model: str


def simulate_index(
    index: Index | Sequence[PlanStream],
    *,
    batch_size: int,
    nodes: int = 1,
    ranks_per_node: int = 1,
    workers: int = 1,
    epochs: int = 1,
    cache_limit: int | str | None = None,
    cache_policy: str | Sequence[str] = "next_use",
    shuffles: Sequence[str] | None = None,
    model: str = "auto",
    keep_zip: bool = False,
    bandwidth_mbps: float | None = None,
    latency_ms: float = 0.0,
    step_ms: float = 0.0,
    predownload: int | None = None,
    quality_samples: int = 1 << 16,
    interleavings: int = 0,
    **order: Any,
) -> list[PlanResult]:
    """Figures for every shuffle in ``shuffles`` and policy in ``cache_policy``.

    ``index``: one dataset's index, or several :class:`PlanStream` (a mix). ``shuffles``:
    default every name in :data:`SHUFFLES` (the reference's algorithms take the reference's
    default ``num_canonical_nodes`` for ``nodes`` when it is not given). ``order``: the dataset's
    order arguments (``shuffle_seed``, ``num_canonical_nodes``, ``shuffle_block_size``,
    ``epoch_size``, ``sampling_method``, ...), checked as the dataset checks them.
    ``interleavings``: with a ``cache_limit``, replay each epoch that many more times under
    seeded interleavings of the consumers, with their prefetches (module docstring), and give
    the spread as ``bytes_range``/``downloads_range`` (exact model only; a note says when the
    runs model left them out).
    """
    world = World(nodes, ranks_per_node, workers)
    policies, shuffles = check_args(
        cache_policy=cache_policy, shuffles=shuffles, model=model, order=order,
        bandwidth_mbps=bandwidth_mbps, latency_ms=latency_ms, step_ms=step_ms, epochs=epochs,
        interleavings=interleavings, quality_samples=quality_samples,
    )  # fmt: skip
    streams = [PlanStream(index)] if isinstance(index, Index) else list(index)
    if not streams:
        raise ConfigError("simulate: need at least one stream")
    specs = []
    raw_parts, zip_parts = [], []
    for st in streams:
        table = st.index.table
        specs.append(StreamSpec(table.samples.copy(), st.proportion, st.repeat, st.choose))
        raw_parts.append(np.asarray(table.raw_bytes, np.int64))
        zb = table.zip_bytes
        zip_parts.append(np.zeros(len(table), np.int64) if zb is None else np.maximum(zb, 0))
    raw, zipped = np.concatenate(raw_parts), np.concatenate(zip_parts)
    wire = np.where(zipped > 0, zipped, raw)
    footprint = raw + (zipped if keep_zip else 0)
    counts = np.concatenate([s.shard_sizes for s in specs])
    setup = _Setup(
        world, policies, epochs, specs, wire, footprint, counts,
        dict(order, batch_size=batch_size, cache_limit=cache_limit),
        None if bandwidth_mbps is None else bandwidth_mbps * 1e6 / 8, latency_ms / 1e3,
        step_ms / 1e3, predownload, quality_samples, interleavings, model,
    )  # fmt: skip
    return [r for shuffle in shuffles for r in _simulate_shuffle(setup, shuffle)]


def _simulate_shuffle(setup: _Setup, shuffle: str) -> list[PlanResult]:
    """One result per cache policy for ``shuffle``: every epoch planned, then replayed."""
    from astream.runtime.config import DatasetConfig

    world, workers, nodes = setup.world, setup.world.workers_per_rank, setup.world.num_nodes
    counts, policies = setup.counts, setup.policies
    avg = max(1, int(counts.sum()) // max(1, len(counts)))
    cfg = DatasetConfig.build(**config_args(setup.base, shuffle, nodes))
    kwargs = cfg.plan_kwargs()
    ahead = setup.predownload if setup.predownload is not None else max(8 * cfg.batch_or_1, avg)
    lookahead = max(1, ahead // cfg.batch_or_1) * workers
    per: dict[str, list[EpochFigures]] = {p: [] for p in policies}
    states: dict[str, list[Any]] = {}  # policy -> per node: its (shared) replay
    # policy -> per node, per interleaving: its own replay (module docstring)
    spreads: dict[str, list[list[CacheReplay]]] = {}
    spread = setup.interleavings if cfg.cache_limit is not None else 0
    quality: dict[str, float] = {}
    used = "exact"
    for e in range(setup.epochs):
        plan = plan_epoch(setup.specs, epoch=e, **kwargs)
        if e == 0:
            quality = _quality(plan, world, setup.quality_samples, int(counts.sum()))
            used = pick_model(plan, world, setup.model)
        if used == "runs":  # small: all nodes at once, identical ones replayed once
            runs = [node_reads(plan, world, q, model=used) for q in range(nodes)]
            keys = [reads_digest(r) for r in runs]
            reads: Any = runs.__getitem__
        else:  # O(samples) per node: one node's reads at a time, each its own group
            keys = [q.to_bytes(8, "little") for q in range(nodes)]
            reads = functools.partial(node_reads, plan, world, model=used)
        ticks = 1 if used == "runs" else plan.batch_size
        steps = node_steps(plan, world)
        for policy in policies:
            if policy not in states:
                if used == "runs":
                    first: Any = RunReplay(setup.footprint, cfg.cache_limit, policy)
                else:  # the other workers' batches, decoded at once, hold their pins
                    hold = (workers - 1) * plan.batch_size
                    first = CacheReplay(setup.footprint, cfg.cache_limit, policy, hold)
                states[policy] = [first] * nodes
            figs = replay_epoch(
                states[policy], reads, keys, e, steps, ticks, setup.wire, setup.bw,
                setup.latency, setup.step, lookahead, cfg.cache_limit, max(workers, lookahead),
            )  # fmt: skip
            if spread and used == "exact":
                interleave(
                    figs, spreads, policy, plan, world, e, spread, setup.footprint, setup.wire,
                    cfg.cache_limit, lookahead,
                )  # fmt: skip
            per[policy].extend(figs)
        del plan, reads, keys
    return [
        PlanResult(shuffle, p, figs, quality, used, _notes(figs, spread, used))
        for p in policies
        for figs in [sorted(per[p], key=lambda f: (f.epoch, f.node))]
    ]


def _notes(figs: list[EpochFigures], spread: int, used: str) -> list[str]:
    """The caveats on one result's figures."""
    notes = []
    if spread and used == "runs":
        notes.append(RUNS_NO_SPREAD)
    over = max((f.overcommit for f in figs), default=0)
    if over and used == "runs":
        notes.append(RUNS_OVERCOMMIT)
    elif over:
        notes.append(EXACT_OVERCOMMIT.format(over))
    waits = sum(f.waits for f in figs)
    if waits:
        notes.append(PIN_WAITS.format(waits))
    return notes


def _quality(plan: Any, world: World, samples: int, num_ids: int) -> dict[str, float]:
    """Rank 0's first ``samples`` samples: mean |consecutive id difference| over its
    expectation for ids drawn uniformly from the ``num_ids`` ids of the dataset (~0: index
    order, ~1: fully random), and
    the mean distinct shards per device batch."""
    ids = []
    got = 0
    for batch in plan.worker_batches(World(world.num_nodes, world.ranks_per_node, 1), 0, 0):
        ids.append(batch)
        got += len(batch)
        if got >= samples:
            break
    seq = np.concatenate(ids)[:samples] if ids else np.zeros(0, np.int64)
    shards = plan.shard_of(seq)
    return {
        "index_order": round(index_order_score(seq, num_ids), 4),
        "shards_per_batch": round(shards_per_window(shards, plan.batch_size).mean, 3),
    }
