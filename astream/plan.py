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
"""

from __future__ import annotations

import bisect
import copy
import functools
import hashlib
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from astream.core.cachesim import CacheReplay, EpochReplay, RunReplay
from astream.core.eviction import check_policy, node_steps, rank_uses, step_uses
from astream.core.index import Index
from astream.core.order import StreamSpec, plan_epoch
from astream.core.quality import shards_per_window
from astream.core.world import World
from astream.errors import ConfigError

__all__ = [
    "EXACT_MAX_NODE_SAMPLES",
    "MODELS",
    "REFERENCE_SHUFFLES",
    "SHUFFLES",
    "EpochFigures",
    "PlanResult",
    "PlanStream",
    "node_runs",
    "simulate",
    "simulate_index",
    "synthetic_index",
]

I64 = NDArray[np.int64]
REFERENCE_SHUFFLES = ("py1e", "py1br", "py1s", "py2s", "naive")
# "none" is shuffle=False; the others are the shuffle_algo values astream implements
SHUFFLES = ("none", "astream", *REFERENCE_SHUFFLES)
MODELS = ("auto", "exact", "runs")
EXACT_MAX_NODE_SAMPLES = 1 << 22  # model="auto": exact up to this many samples per node
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
_WINDOW_SAMPLES = 1 << 22  # node samples per step_uses call (bounds memory)
SUBTICKS = 64  # clock units per tick in the interleaving replays (room for the jitter)
DATALOADER_PREFETCH = 2  # batches a DataLoader worker may run ahead (torch's prefetch_factor)


@dataclass(frozen=True)
class PlanStream:
    """One stream of the planned dataset: its index and its weight (at most one)."""

    index: Index
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None


@dataclass
class EpochFigures:
    """One node, one epoch."""

    node: int
    epoch: int
    steps: int  # rank batches
    downloads: int  # shard downloads (re-downloads included)
    bytes: int  # bytes downloaded
    distinct_shards: int  # shards read at least once
    redownloads: int  # downloads of a shard already downloaded this epoch
    evictions: int
    high_water: int  # most bytes in the cache at once
    overcommit: int  # bytes over the limit when every cached shard was being read
    waits: int = 0  # evictions that waited for a consumer's pin (see cachesim)
    # (min, median, max) over the fixed interleaving and ``interleavings`` seeded ones
    # (module docstring, "Interleavings"); None when not asked for (or the runs model ran)
    bytes_range: tuple[int, int, int] | None = None
    downloads_range: tuple[int, int, int] | None = None
    first_batch_s: float | None = None
    # the first batch if step 0's downloads had the link alone (no peer's prefetch sharing
    # it): the low end of the first batch over the interleavings (module docstring, 3)
    first_batch_alone_s: float | None = None
    stall_share: float | None = None
    bytes_by_step: I64 = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)
    occupancy_by_step: I64 = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)


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
    from astream.cli.common import join_split, read_index

    index = read_index(join_split(url, split), **(storage_options or {}))
    return simulate_index(index, **kwargs)


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
    from astream.runtime.config import DatasetConfig

    world = World(nodes, ranks_per_node, workers)
    policies = [cache_policy] if isinstance(cache_policy, str) else list(cache_policy)
    if not policies:
        raise ConfigError("cache_policy: give at least one policy")
    for p in policies:
        check_policy(p)
    if shuffles is None:
        shuffles = SHUFFLES
    if isinstance(shuffles, str) or not shuffles:
        raise ConfigError(f"shuffles: need a list of names from {', '.join(SHUFFLES)}")
    for s in shuffles:
        if s not in SHUFFLES:
            raise ConfigError(f"shuffles: unknown shuffle {s!r} (known: {', '.join(SHUFFLES)})")
    if model not in MODELS:
        raise ConfigError(f"model must be one of {', '.join(MODELS)}, got {model!r}")
    for name in ("shuffle", "shuffle_algo"):
        if name in order:
            raise ConfigError(f"simulate: pass the orders to compare as shuffles=, not {name}=")
    if bandwidth_mbps is not None and not bandwidth_mbps > 0:
        raise ConfigError(f"bandwidth_mbps must be > 0, got {bandwidth_mbps}")
    if not latency_ms >= 0:
        raise ConfigError(f"latency_ms must be >= 0, got {latency_ms}")
    if not step_ms >= 0:
        raise ConfigError(f"step_ms must be >= 0, got {step_ms}")
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"epochs must be an int >= 1, got {epochs!r}")
    if isinstance(interleavings, bool) or not isinstance(interleavings, int) or interleavings < 0:
        raise ConfigError(f"interleavings must be an int >= 0, got {interleavings!r}")
    if quality_samples < 1:
        raise ConfigError(f"quality_samples must be >= 1, got {quality_samples}")
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
    avg = max(1, int(counts.sum()) // max(1, len(counts)))
    base = dict(order, batch_size=batch_size, cache_limit=cache_limit)
    bw = None if bandwidth_mbps is None else bandwidth_mbps * 1e6 / 8
    results = []
    for shuffle in shuffles:
        cfg = DatasetConfig.build(**_config_args(base, shuffle, nodes))
        kwargs = cfg.plan_kwargs()
        ahead = predownload if predownload is not None else max(8 * cfg.batch_or_1, avg)
        lookahead = max(1, ahead // cfg.batch_or_1) * workers
        per = {p: [] for p in policies}  # type: dict[str, list[EpochFigures]]
        states: dict[str, list[Any]] = {}  # policy -> per node: its (shared) replay
        # policy -> per node, per interleaving: its own replay (module docstring)
        spreads: dict[str, list[list[CacheReplay]]] = {}
        spread = interleavings if cfg.cache_limit is not None else 0
        quality: dict[str, float] = {}
        used = "exact"
        for e in range(epochs):
            plan = plan_epoch(specs, epoch=e, **kwargs)
            if e == 0:
                quality = _quality(plan, world, quality_samples, int(counts.sum()))
                used = _pick_model(plan, world, model)
            if used == "runs":  # small: all nodes at once, identical ones replayed once
                runs = [_node_reads(plan, world, q, model=used) for q in range(nodes)]
                keys = [_digest(r) for r in runs]
                reads: Any = runs.__getitem__
            else:  # O(samples) per node: one node's reads at a time, each its own group
                keys = [q.to_bytes(8, "little") for q in range(nodes)]
                reads = functools.partial(_node_reads, plan, world, model=used)
            ticks = 1 if used == "runs" else plan.batch_size
            steps = node_steps(plan, world)
            for policy in policies:
                if policy not in states:
                    if used == "runs":
                        first: Any = RunReplay(footprint, cfg.cache_limit, policy)
                    else:  # the other workers' batches, decoded at once, hold their pins
                        hold = (workers - 1) * plan.batch_size
                        first = CacheReplay(footprint, cfg.cache_limit, policy, hold)
                    states[policy] = [first] * nodes
                figs = _replay_epoch(
                    states[policy], reads, keys, e, steps, ticks, wire, bw,
                    latency_ms / 1e3, step_ms / 1e3, lookahead, cfg.cache_limit,
                    max(workers, lookahead),
                )  # fmt: skip
                if spread and used == "exact":
                    _interleave(
                        figs, spreads, policy, plan, world, e, spread, footprint, wire,
                        cfg.cache_limit, lookahead,
                    )  # fmt: skip
                per[policy].extend(figs)
            del plan, reads, keys
        for policy in policies:
            figs = sorted(per[policy], key=lambda f: (f.epoch, f.node))
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
            results.append(PlanResult(shuffle, policy, figs, quality, used, notes))
    return results


def synthetic_index(
    samples: int, shards: int, shard_bytes: int | None = None, *, bytes_per_sample: int = 1024
) -> Index:
    """An index of ``shards`` shards holding ``samples`` samples in all (as even as possible),
    built in memory (no file; for planning "what if" datasets and the planner's scale tests).
    Each shard takes ``shard_bytes`` (default: its samples x ``bytes_per_sample``)."""
    from astream.core.index import parse_index
    from astream.core.shard_table import ShardTable

    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise ConfigError(f"shards must be an int >= 1, got {shards!r}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < shards:
        raise ConfigError(f"samples must be an int >= shards ({shards}), got {samples!r}")
    q, r = divmod(samples, shards)
    counts = np.full(shards, q, np.int64)
    counts[:r] += 1
    size = counts * bytes_per_sample if shard_bytes is None else np.full(shards, shard_bytes)
    one = {
        "column_encodings": ["bytes"], "column_names": ["x"], "column_sizes": [None],
        "compression": None, "format": "mds", "hashes": [], "samples": int(counts[0]),
        "size_limit": 1 << 26, "version": 2, "zip_data": None,
        "raw_data": {"basename": "shard.00000.mds", "bytes": int(size[0]), "hashes": {}},
    }  # fmt: skip
    template = parse_index(
        json.dumps({"version": 2, "shards": [one]}).encode(), "synthetic"
    ).shards[0]
    table = ShardTable(
        templates=[template],
        kind=np.zeros(shards, np.int32),
        samples=counts,
        raw_names=[f"shard.{i:05}.mds" for i in range(shards)],
        raw_bytes=np.asarray(size, np.int64),
        raw_hashes=[{}] * shards,
    )
    return Index(table)


def _config_args(base: dict[str, Any], shuffle: str, nodes: int = 1) -> dict[str, Any]:
    args = dict(base)
    args["shuffle"] = shuffle != "none"
    args["shuffle_algo"] = "astream" if shuffle == "none" else shuffle
    if args.get("num_canonical_nodes") is None and shuffle in REFERENCE_SHUFFLES:
        # the reference's default, from the planned World (the dataset takes it from the
        # World it starts on): 64 x nodes for py1s/py2s, the node count otherwise
        from astream.core.refshuffle import default_num_canonical_nodes

        args["num_canonical_nodes"] = default_num_canonical_nodes(shuffle, nodes)
    defaults: dict[str, Any] = {
        "download_retry": 2,
        "download_timeout": 60,
        "validate_hash": None,
        "epoch_size": None,
        "predownload": None,
        "cache_limit": None,
        "sampling_method": "balanced",
        "sampling_granularity": 1,
        "partition_algo": "relaxed",
        "num_canonical_nodes": None,
        "shuffle_algo": "astream",
        "shuffle_seed": 9176,
        "shuffle_block_size": None,
        "batching_method": "random",
        "replication": None,
    }
    unknown = sorted(set(args) - set(defaults) - {"batch_size", "shuffle"})
    if unknown:
        raise ConfigError(f"simulate: unknown order argument(s) {', '.join(unknown)}")
    defaults.update(args)
    return defaults


def _pick_model(plan: Any, world: World, model: str) -> str:
    runs_ok = not plan.reference and plan.batching_method == "random"
    if model == "exact" or not runs_ok:
        return "exact"
    if model == "runs":
        return "runs"
    return "runs" if plan.num_samples // world.num_nodes > EXACT_MAX_NODE_SAMPLES else "exact"


def _node_reads(plan: Any, world: World, node: int, *, model: str) -> tuple[I64, I64, I64]:
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


def timed_reads(
    reads: list[tuple[I64, I64]],
    batch_size: int,
    workers: int,
    steps: int,
    rng: np.random.Generator,
    lookahead: int,
    skew: int,
) -> tuple[I64, I64, NDArray[np.bool_], int]:
    """One seeded interleaving of a node's consumers (module docstring, "Interleavings"):
    (times, shards, tries, span) for :meth:`CacheReplay.epoch_timed`, sorted by time, on a
    clock of :data:`SUBTICKS` per tick. ``reads``: per local rank, its (tick, shard) reads
    (:func:`rank_reads`). Each consumer (rank, worker) starts at a random offset of up to
    ``skew`` steps; its reads happen at their tick (not before its start), each at a random
    point of its step; it tries to prefetch each read's shard ``lookahead`` steps before it
    (the tries of its first ``lookahead`` steps all at its start, in deadline order)."""
    bs, sub = batch_size, SUBTICKS
    times, shards, tries = [], [], []
    for tick, shard in reads:
        worker = (tick // bs) % workers
        for w in range(workers):
            mine = worker == w
            t, s = tick[mine], shard[mine]
            if not len(t):
                continue
            start = int(rng.integers(0, skew * bs * sub + 1))
            read_at = np.maximum(t * sub, start) + rng.integers(0, bs * sub, len(t))
            lead = t - lookahead * bs
            try_at = np.where(
                lead < 0,
                start + np.arange(len(t)),
                lead * sub + rng.integers(0, bs * sub, len(t)),
            )
            times += [read_at, try_at]
            shards += [s, s]
            tries += [np.zeros(len(t), bool), np.ones(len(t), bool)]
    span = steps * bs * sub
    if not times:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0, bool), span
    tm, sh, tr = np.concatenate(times), np.concatenate(shards), np.concatenate(tries)
    by = np.lexsort((sh, tm))
    return tm[by], sh[by], tr[by], span


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


def _digest(reads: tuple[I64, I64, I64]) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in reads:
        h.update(np.ascontiguousarray(a).tobytes())
        h.update(b"|")
    return h.digest()


def _replay_epoch(
    state: list[Any],
    reads: Callable[[int], tuple[I64, I64, I64]],
    keys: list[bytes],
    epoch: int,
    steps: int,
    ticks: int,
    wire: I64,
    bw: float | None,
    latency: float,
    step: float,
    lookahead: int,
    limit: int | None = None,
    opening: int = 1,
) -> list[EpochFigures]:
    """One epoch of every node: nodes with the same cache so far and the same reads (equal
    ``keys``) are replayed once; ``reads(node)`` gives a node's reads. ``state[node]``: its
    replay object, shared by such nodes (updated here)."""
    groups: dict[tuple[int, bytes], list[int]] = {}
    for q, k in enumerate(keys):
        groups.setdefault((id(state[q]), k), []).append(q)
    owners: dict[int, int] = {}  # id(replay) -> groups still to run from it
    for rid, _ in groups:
        owners[rid] = owners.get(rid, 0) + 1
    out = []
    for (rid, _), members in groups.items():
        replay = state[members[0]]
        owners[rid] -= 1
        if owners[rid] > 0:  # another group starts from the same state: run on a copy
            replay = copy.deepcopy(replay)
        first, last, shard = reads(members[0])
        if isinstance(replay, RunReplay):
            rep = replay.epoch(first, last, shard, steps)
        else:
            rep = replay.epoch(first, shard, steps * ticks)
        fig = _figures(rep, steps, ticks, epoch, wire)
        if bw is not None:
            fig.first_batch_s, fig.stall_share = _timeline(
                fig.bytes_by_step, bw, latency, step, lookahead, limit, opening
            )
            head = int(fig.bytes_by_step[0]) if len(fig.bytes_by_step) else 0
            fig.first_batch_alone_s = latency + head / bw if head else 0.0
        for q in members:
            state[q] = replay
            out.append(_copy_for(fig, q))
    return out


def _interleave(
    figs: list[EpochFigures],
    spreads: dict[str, list[list[CacheReplay]]],
    policy: str,
    plan: Any,
    world: World,
    epoch: int,
    count: int,
    footprint: I64,
    wire: I64,
    limit: int | None,
    lookahead: int,
) -> None:
    """Replay each node's epoch under ``count`` seeded interleavings (each its own cache,
    carried across epochs) and set ``bytes_range``/``downloads_range`` on its figures."""
    workers, bs = world.workers_per_rank, plan.batch_size
    hold = (workers - 1) * bs * SUBTICKS
    chains = spreads.setdefault(policy, [])
    steps = node_steps(plan, world)
    skew = workers * DATALOADER_PREFETCH
    for fig in figs:
        q = fig.node
        while len(chains) <= q:
            chains.append([])
        mine = chains[q]
        while len(mine) < count:
            mine.append(CacheReplay(footprint, limit, policy, hold))
        reads = rank_reads(plan, world, q)
        nbytes, downloads = [fig.bytes], [fig.downloads]
        for k, replay in enumerate(mine):
            rng = np.random.default_rng([k, epoch, q])
            rep = replay.epoch_timed(*timed_reads(reads, bs, workers, steps, rng, lookahead, skew))
            nbytes.append(int(wire[rep.dl_shards].sum()) if len(rep.dl_shards) else 0)
            downloads.append(rep.downloads)
        fig.bytes_range = _three(nbytes)
        fig.downloads_range = _three(downloads)


def _three(values: list[int]) -> tuple[int, int, int]:
    return (min(values), int(np.median(values)), max(values))


def _copy_for(fig: EpochFigures, node: int) -> EpochFigures:
    f = copy.copy(fig)  # the per-step arrays are shared, not copied
    f.node = node
    return f


def _figures(rep: EpochReplay, steps: int, ticks: int, epoch: int, wire: I64) -> EpochFigures:
    dl_shards = rep.dl_shards
    by_step = np.zeros(steps, np.int64)
    if len(rep.dl_steps):
        np.add.at(by_step, rep.dl_steps // ticks, wire[dl_shards])
    occ = rep.occupancy[ticks - 1 :: ticks][:steps] if len(rep.occupancy) else by_step * 0
    distinct_dl = len(np.unique(dl_shards))
    return EpochFigures(
        node=-1,
        epoch=epoch,
        steps=steps,
        downloads=rep.downloads,
        bytes=int(wire[dl_shards].sum()),
        distinct_shards=rep.distinct,
        redownloads=rep.downloads - distinct_dl,
        evictions=rep.evictions,
        high_water=rep.high_water,
        overcommit=rep.overcommit,
        waits=rep.waits,
        bytes_by_step=by_step,
        occupancy_by_step=np.asarray(occ, np.int64),
    )


def _timeline(
    by_step: I64,
    bandwidth: float,
    latency: float,
    step: float,
    lookahead: int,
    limit: int | None = None,
    opening: int = 1,
) -> tuple[float, float]:
    """(time to first batch, stall share) of the model in the module docstring (3).

    The opening: at the start every consumer (DataLoader worker) asks for its first batch and
    announces its whole prefetch window at once, so the downloads of the node's steps
    ``0 .. opening-1`` -- as many, in step order, as the cache holds together (prefetches take
    free room only) -- are on the link together. They share it: step 0's shards come in with
    the rest, after one latency and all those bytes over the bandwidth."""
    need = np.flatnonzero(by_step)
    marks: list[int] = [0]  # steps whose start time is known exactly; between them, no stall
    starts: list[float] = [0.0]
    burst = 0  # bytes of the opening downloads
    opened = 0  # steps 0 .. opened-1 are in the opening
    for nbytes in by_step[: max(1, opening)].tolist():
        if limit is not None and burst and burst + nbytes > limit:
            break
        burst += nbytes
        opened += 1
    burst_done = latency + burst / bandwidth if burst else 0.0
    link = 0.0
    stall = 0.0
    first = 0.0

    def start_of(x: int) -> float:
        k = bisect.bisect_right(marks, x) - 1
        return starts[k] + (x - marks[k]) * step

    for u in need.tolist():
        if u < opened:
            ready = burst_done  # on the link together with the other opening downloads
        else:
            issue = start_of(u - lookahead) if u - lookahead > 0 else 0.0
            size = float(by_step[u]) / bandwidth
            ready = max(link + size, issue + latency + size)
        link = max(link, ready)
        due = start_of(u)
        if u == 0:
            first = ready
            marks[0], starts[0] = 0, ready
            continue
        if ready > due:
            stall += ready - due
            marks.append(u)
            starts.append(ready)
    total = start_of(len(by_step) - 1) + step if len(by_step) else 0.0
    return first, (stall / total if total > 0 else 0.0)


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
    n = num_ids
    spread = float(np.abs(np.diff(seq)).mean() / ((n + 1) / 3)) if len(seq) > 1 else 0.0
    return {
        "index_order": round(spread, 4),
        "shards_per_batch": round(shards_per_window(shards, plan.batch_size).mean, 3),
    }
