"""Replaying a node's reads through the cache model: one fixed interleaving of its consumers
(:func:`replay_epoch`), and seeded ones (:func:`interleave`, :func:`timed_reads`) for the
spread (``astream.plan``'s docstring, 2).

May import: core, errors, ``astream.plan.reads``, ``astream.plan.timing``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from astream.core.cachesim import CacheReplay, EpochReplay, RunReplay
from astream.core.eviction import node_steps
from astream.core.world import World
from astream.plan.reads import rank_reads
from astream.plan.timing import timeline

__all__ = ["SUBTICKS", "EpochFigures", "interleave", "replay_epoch", "timed_reads"]

I64 = NDArray[np.int64]
SUBTICKS = 64  # clock units per tick in the interleaving replays (room for the jitter)
DATALOADER_PREFETCH = 2  # batches a DataLoader worker may run ahead (torch's prefetch_factor)


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


def replay_epoch(
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
            fig.first_batch_s, fig.stall_share = timeline(
                fig.bytes_by_step, bw, latency, step, lookahead, limit, opening
            )
            head = int(fig.bytes_by_step[0]) if len(fig.bytes_by_step) else 0
            fig.first_batch_alone_s = latency + head / bw if head else 0.0
        for q in members:
            state[q] = replay
            out.append(_copy_for(fig, q))
    return out


def interleave(
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
