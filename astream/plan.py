"""Predict a run before launching it: downloads, cache high-water, first batch, stalls.

Theory of operation
-------------------
Everything a run will read is known from the index and the order plan alone, so
:func:`simulate` reads no data. For each shuffle astream supports (no shuffle, ``"astream"``),
each cache policy asked for, each physical node and each epoch:

1. **Reads.** The node's ``(tick, shard)`` reads, step window by step window
   (:func:`astream.core.eviction.step_uses`: the same plan and dealing the runtime uses, one
   pair per rank batch and shard, so the work is per shard run of a batch, not per sample).
2. **Cache.** The reads are replayed through :class:`astream.core.cachesim.CacheReplay` with
   the runtime's eviction rule (:func:`astream.core.eviction.victim_key`): downloads, bytes,
   re-downloads, evictions, high-water mark, occupancy over the epoch. The cache carries over
   from epoch to epoch. Without ``cache_limit`` no replay is needed: every distinct shard is
   downloaded once.
3. **Time** (with ``bandwidth_mbps``): the node's link moves one download at a time at the
   bandwidth, each request paying ``latency_ms`` unless it overlaps an earlier transfer;
   downloads of step ``u`` start when the consumer is ``lookahead`` steps before ``u`` (the
   prefetch window); step ``u`` starts when the previous step has run ``step_ms`` and its
   shards are in. Time to first batch is when step 0's shards are in; the stall share is the
   time steps waited for data over the epoch's time. A model: concurrency inside the link,
   decode time and the cache's room for prefetches are not in it.
4. **Quality** (:mod:`astream.core.quality`) of rank 0's first ``quality_samples`` samples:
   distance from index order (0: index order, ~1: a full random permutation) and distinct
   shards per device batch.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from astream.core.cachesim import CacheReplay, EpochReplay
from astream.core.eviction import check_policy, node_steps, step_uses
from astream.core.index import Index
from astream.core.order import StreamSpec, plan_epoch
from astream.core.quality import index_order_score, shards_per_window
from astream.core.world import World
from astream.errors import ConfigError

__all__ = ["EpochFigures", "PlanResult", "SHUFFLES", "simulate", "simulate_index"]

I64 = NDArray[np.int64]
SHUFFLES = ("none", "astream")  # shuffle=False, and every shuffle_algo astream implements
_WINDOW_SAMPLES = 1 << 22  # node samples per step_uses call (bounds memory)


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
    first_batch_s: float | None = None
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

    def total(self, name: str, epoch: int | None = None) -> int:
        """Sum of an integer figure over nodes (of one epoch, or all)."""
        return sum(getattr(f, name) for f in self.epochs if epoch is None or f.epoch == epoch)


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
    index: Index,
    *,
    batch_size: int,
    nodes: int = 1,
    ranks_per_node: int = 1,
    workers: int = 1,
    epochs: int = 1,
    cache_limit: int | str | None = None,
    cache_policy: str | Sequence[str] = "next_use",
    shuffles: Sequence[str] = SHUFFLES,
    keep_zip: bool = False,
    bandwidth_mbps: float | None = None,
    latency_ms: float = 0.0,
    step_ms: float = 0.0,
    predownload: int | None = None,
    quality_samples: int = 1 << 16,
    **order: Any,
) -> list[PlanResult]:
    """Figures for every shuffle in ``shuffles`` and policy in ``cache_policy``.

    ``order``: the dataset's order arguments (``shuffle_seed``, ``num_canonical_nodes``,
    ``shuffle_block_size``, ``sampling_method``, ...), checked as the dataset checks them.
    """
    from astream.runtime.config import DatasetConfig

    world = World(nodes, ranks_per_node, workers)
    policies = [cache_policy] if isinstance(cache_policy, str) else list(cache_policy)
    for p in policies:
        check_policy(p)
    for s in shuffles:
        if s not in SHUFFLES:
            raise ConfigError(f"shuffles: unknown shuffle {s!r} (known: {', '.join(SHUFFLES)})")
    if bandwidth_mbps is not None and not bandwidth_mbps > 0:
        raise ConfigError(f"bandwidth_mbps must be > 0, got {bandwidth_mbps}")
    if not latency_ms >= 0 or not step_ms >= 0:
        raise ConfigError("latency_ms and step_ms must be >= 0")
    if epochs < 1:
        raise ConfigError(f"epochs must be >= 1, got {epochs}")
    base = dict(order, batch_size=batch_size, cache_limit=cache_limit)
    base.setdefault("shuffle", True)
    counts = index.sample_counts()
    raw = np.array([s.raw_data.bytes for s in index.shards], np.int64)
    zipped = np.array(
        [s.zip_data.bytes if s.zip_data is not None else 0 for s in index.shards], np.int64
    )
    wire = np.where(zipped > 0, zipped, raw)
    footprint = raw + (zipped if keep_zip else 0)
    avg = max(1, int(counts.sum()) // max(1, len(counts)))
    results = []
    for shuffle in shuffles:
        cfg = DatasetConfig.build(**_config_args(base, shuffle == "astream"))
        kwargs = cfg.plan_kwargs()
        ahead = predownload if predownload is not None else max(8 * cfg.batch_or_1, avg)
        lookahead = max(1, ahead // cfg.batch_or_1) * workers
        plans = [plan_epoch([StreamSpec(counts)], epoch=e, **kwargs) for e in range(epochs)]
        quality = _quality(plans[0], world, quality_samples)
        for policy in policies:
            figures = []
            for node in range(nodes):
                replay = CacheReplay(footprint, cfg.cache_limit, policy)
                for e, plan in enumerate(plans):
                    rep = _epoch(plan, world, node, replay)
                    f = _figures(rep, plan, world, node, e, wire, footprint)
                    if bandwidth_mbps is not None:
                        f.first_batch_s, f.stall_share = _timeline(
                            f.bytes_by_step,
                            bandwidth_mbps * 1e6 / 8,
                            latency_ms / 1e3,
                            step_ms / 1e3,
                            lookahead,
                        )
                    figures.append(f)
            results.append(PlanResult(shuffle, policy, figures, quality))
    return results


def _config_args(base: dict[str, Any], shuffle: bool) -> dict[str, Any]:
    args = {k: v for k, v in base.items() if k != "shuffle"}
    args["shuffle"] = shuffle
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


def _epoch(plan: Any, world: World, node: int, replay: CacheReplay) -> EpochReplay:
    steps = node_steps(plan, world)
    per_window = max(1, _WINDOW_SAMPLES // max(1, plan.batch_size * world.ranks_per_node))
    ticks, shards = [], []
    for j0 in range(0, steps, per_window):
        t, s = step_uses(plan, world, node, j0, min(steps, j0 + per_window))
        ticks.append(t)
        shards.append(s)
    tick = np.concatenate(ticks) if ticks else np.zeros(0, np.int64)
    shard = np.concatenate(shards) if shards else np.zeros(0, np.int64)
    return replay.epoch(tick, shard, steps * plan.batch_size)


def _figures(
    rep: EpochReplay, plan: Any, world: World, node: int, epoch: int, wire: I64, foot: I64
) -> EpochFigures:
    bs = plan.batch_size
    steps = node_steps(plan, world)
    dl_shards = rep.dl_shards
    by_step = np.zeros(steps, np.int64)
    if len(rep.dl_steps):
        np.add.at(by_step, rep.dl_steps // bs, wire[dl_shards])
    occ = rep.occupancy[bs - 1 :: bs][:steps] if len(rep.occupancy) else by_step * 0
    distinct_dl = len(np.unique(dl_shards))
    return EpochFigures(
        node=node,
        epoch=epoch,
        steps=steps,
        downloads=rep.downloads,
        bytes=int(wire[dl_shards].sum()),
        distinct_shards=rep.distinct,
        redownloads=rep.downloads - distinct_dl,
        evictions=rep.evictions,
        high_water=rep.high_water,
        overcommit=rep.overcommit,
        bytes_by_step=by_step,
        occupancy_by_step=np.asarray(occ, np.int64),
    )


def _timeline(
    by_step: I64, bandwidth: float, latency: float, step: float, lookahead: int
) -> tuple[float, float]:
    """(time to first batch, stall share) of the model in the module docstring (3)."""
    need = np.flatnonzero(by_step)
    marks: list[int] = [0]  # steps whose start time is known exactly; between them, no stall
    starts: list[float] = [0.0]
    link = 0.0
    stall = 0.0
    first = 0.0

    def start_of(x: int) -> float:
        k = bisect.bisect_right(marks, x) - 1
        return starts[k] + (x - marks[k]) * step

    for u in need.tolist():
        issue = start_of(u - lookahead) if u - lookahead > 0 else 0.0
        size = float(by_step[u]) / bandwidth
        ready = max(link + size, issue + latency + size)
        link = ready
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


def _quality(plan: Any, world: World, samples: int) -> dict[str, float]:
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
        "index_order": round(index_order_score(seq), 4),
        "shards_per_batch": round(shards_per_window(shards, plan.batch_size).mean, 3),
    }
