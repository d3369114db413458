"""A node's shard cache, replayed from its known future: downloads, evictions, occupancy.

Theory of operation
-------------------
Input: the (tick, shard) pairs a node reads in one epoch (:func:`astream.core.eviction.step_uses`),
the bytes each shard takes in the cache, ``cache_limit`` and the policy; and the cache as the
previous epoch left it. The replay walks the pairs in step order, as the runtime's consumers do:

- a shard read while absent is downloaded (its bytes counted) and then room is made, by
  evicting in the order of :func:`astream.core.eviction.victim_key` -- the same rule the
  runtime applies (``eviction_order``) -- skipping pinned shards: those read at the current
  tick or within ``hold`` ticks before it (the runtime's pins: each DataLoader worker pins the
  shards of the batch it is decoding, and the workers decode consecutive steps at once, so the
  planner passes ``hold`` = the steps of the other workers' batches);
- when only pinned shards are left, the runtime's reservation waits for the pin of the first
  pinned shard *in victim order* to go (that consumer finished its batch) and evicts that
  shard (``CacheSpace._evict``): the replay evicts the held shards in victim order (never those
  of the current tick) and counts them in ``waits``. Under ``lru`` that is the oldest read;
  under ``next_use`` the furthest next use (an earlier replay took the oldest read there too,
  and re-downloaded a shard the runtime keeps);
- next uses are computed within the epoch only, as the runtime's ``NodeFuture`` does, so a
  shard not read again this epoch ties with the rest and goes least recently used first.

Every read is an event (one per rank batch and shard of the batch, so the work is per shard
*of a batch*, never per sample); a shard is pinned from the tick it is read for ``hold`` ticks
(``hold=0``: only at that tick).

:class:`RunReplay` is the planner's fast model of the same cache: its input is *runs*
``(first step, last step, shard)`` (a shard read at every step of a stretch, e.g. a shuffle
block), one event per run, the shard pinned for the whole run. Work O(runs log runs).

With every cached shard read at the current tick the replay goes over the limit and reports it
in ``overcommit``.

Interleavings
-------------
The walk above is one fixed interleaving of the node's consumers (ranks x DataLoader workers),
without prefetch. The runtime's consumers race, and each one's prefetcher downloads the shards
of its next ``lookahead`` steps into *free* room (never evicting). That is not neutral: a
prefetched shard needed many steps later fills room that another consumer's demand read must
then free by eviction, and under ``lru`` the prefetched shard, never read yet, is the least
recently used one -- it is evicted and downloaded again (measured: a worker that starts late
finds the room taken by its peers' prefetches of the next shuffle block). Which consumer gets
there first is timing, so one replay cannot predict one run's bytes; the planner gives a range
instead. :meth:`CacheReplay.epoch_timed` replays *timed* events: consumers' reads and
prefetch *tries* (take free room only; nothing if present), in time order, from
``astream.plan.replay.timed_reads`` (one seeded interleaving: each consumer's start offset, each
read's moment within its step, tries ``lookahead`` steps ahead); next uses are the times of
the next reads. The planner replays several seeds and reports min / median / max.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from astream.core.eviction import NEVER, victim_key

__all__ = ["CacheReplay", "EpochReplay", "RunReplay"]

NEVER_READ = -(1 << 62)  # the read tick of a shard not read this epoch (never pinned)

I64 = NDArray[np.int64]


@dataclass
class EpochReplay:
    """What one epoch of one node did to its cache."""

    downloads: int = 0  # shard downloads (a shard evicted and read again counts again)
    bytes: int = 0  # bytes downloaded
    distinct: int = 0  # distinct shards read
    evictions: int = 0
    high_water: int = 0  # most bytes in the cache at once
    overcommit: int = 0  # bytes the replay had to go over the limit (all pinned)
    waits: int = 0  # evictions of shards still pinned by the hold (consumers waited for them)
    dl_steps: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # tick of each download
    dl_shards: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # its shard
    occupancy: I64 = field(default_factory=lambda: np.zeros(0, np.int64))  # bytes after step


class CacheReplay:
    """The cache of one node across epochs (see module docstring)."""

    def __init__(self, sizes: I64, limit: int | None, policy: str, hold: int = 0) -> None:
        if hold < 0:
            raise ValueError(f"hold must be >= 0, got {hold}")
        self.sizes = np.asarray(sizes, np.int64)
        self.limit = limit
        self.policy = policy
        self.hold = hold  # ticks a read keeps its shard pinned after its own tick
        self.present: dict[int, int] = {}  # shard -> last step read (global clock)
        self.usage = 0
        self.clock = 0  # steps of earlier epochs (the LRU clock runs on across epochs)

    def epoch(self, ticks: I64, shards: I64, num_ticks: int) -> EpochReplay:
        """Replay one epoch's (tick, shard) reads, sorted by tick (see ``step_uses``);
        ``num_ticks``: the epoch's steps times the batch size."""
        ticks = np.asarray(ticks, np.int64)
        shards = np.asarray(shards, np.int64)
        out = EpochReplay()
        out.distinct = len(np.unique(shards))
        # the next read of the same shard (NEVER: not again this epoch)
        by = np.lexsort((ticks, shards))
        nxt_sorted = np.full(len(by), NEVER, np.int64)
        if len(by) > 1:
            follow = shards[by][1:] == shards[by][:-1]
            nxt_sorted[:-1][follow] = ticks[by][1:][follow]
        nxt = np.empty_like(nxt_sorted)
        nxt[by] = nxt_sorted
        self._replay(out, ticks.tolist(), shards.tolist(), nxt.tolist(), num_ticks)
        self.clock += num_ticks
        return out

    def epoch_timed(
        self, times: I64, shards: I64, tries: NDArray[np.bool_], span: int
    ) -> EpochReplay:
        """Replay one epoch of *timed* events (see "Interleavings" in the module docstring):
        ``times`` (any integer clock, sorted), ``shards``, and ``tries``: True for a
        prefetch's try (takes free room only, never evicts; nothing if the shard is present),
        False for a consumer's read. ``span``: the epoch's length on that clock (the LRU
        clock runs on across epochs). ``hold`` is on the same clock. No occupancy series."""
        times = np.asarray(times, np.int64)
        shards = np.asarray(shards, np.int64)
        tries = np.asarray(tries, bool)
        out = EpochReplay()
        reads = ~tries
        out.distinct = len(np.unique(shards[reads]))
        # the next read of each event's shard: after a read, at or after a try
        wide = int(times.max()) + 2 if len(times) else 1
        keys = np.sort(shards[reads] * wide + times[reads])
        at = np.where(
            tries,
            np.searchsorted(keys, shards * wide + times, "left"),
            np.searchsorted(keys, shards * wide + times, "right"),
        )
        nxt = np.full(len(times), NEVER, np.int64)
        if len(keys):
            hit = keys[np.minimum(at, len(keys) - 1)]
            ok = (at < len(keys)) & (hit // wide == shards)
            nxt[ok] = hit[ok] % wide
        policy, limit, sizes, present = self.policy, self.limit, self.sizes, self.present
        base = self.clock
        heap: list[tuple[tuple[float, float], int, int]] = []
        version: dict[int, int] = {}
        reading: dict[int, int] = {}
        dl_t: list[int] = []
        dl_s: list[int] = []
        high = usage = self.usage
        first_use: dict[int, int] = {}
        for t, s in zip(times[reads].tolist(), shards[reads].tolist()):
            if s not in first_use:
                first_use[s] = t
        for s, last in present.items():
            version[s] = 0
            heapq.heappush(heap, (victim_key(policy, first_use.get(s, NEVER), last), s, 0))
        for t, s, tr, nx in zip(times.tolist(), shards.tolist(), tries.tolist(), nxt.tolist()):
            if tr:
                if s in present:
                    continue
                size = int(sizes[s])
                if limit is not None and usage + size > limit:
                    continue  # a prefetch takes free room only
                usage += size
            else:
                reading[s] = t
                if s not in present:
                    size = int(sizes[s])
                    usage += size
                    if limit is not None and usage > limit:
                        usage = self._evict(heap, version, reading, usage, t, out)
            if s not in present:
                out.downloads += 1
                out.bytes += int(sizes[s])
                dl_t.append(t)
                dl_s.append(s)
            present[s] = base + t
            v = version.get(s, 0) + 1
            version[s] = v
            heapq.heappush(heap, (victim_key(policy, nx, base + t), s, v))
            if usage > high:
                high = usage
        self.usage = usage
        self.clock += span
        out.high_water = high
        out.dl_steps = np.asarray(dl_t, np.int64)
        out.dl_shards = np.asarray(dl_s, np.int64)
        return out

    def _replay(
        self,
        out: EpochReplay,
        ev_t: list[int],
        ev_s: list[int],
        ev_next: list[int],
        num_ticks: int,
    ) -> None:
        policy, limit, sizes, present = self.policy, self.limit, self.sizes, self.present
        base = self.clock
        heap: list[tuple[tuple[float, float], int, int]] = []
        version: dict[int, int] = {}
        reading: dict[int, int] = {}  # shard -> tick it was last read (pinned at that tick)
        dl_t: list[int] = []
        dl_s: list[int] = []
        occ_t: list[int] = []
        occ_v: list[int] = []
        high = usage = self.usage
        # shards the previous epoch left: their next use is their first read this epoch
        first_use: dict[int, int] = {}
        for t, s in zip(ev_t, ev_s):
            if s not in first_use:
                first_use[s] = t
        for s, last in present.items():
            version[s] = 0
            heapq.heappush(heap, (victim_key(policy, first_use.get(s, NEVER), last), s, 0))
        for t, s, nxt in zip(ev_t, ev_s, ev_next):
            reading[s] = t
            if s not in present:
                size = int(sizes[s])
                usage += size
                out.downloads += 1
                out.bytes += size
                dl_t.append(t)
                dl_s.append(s)
                if limit is not None and usage > limit:
                    usage = self._evict(heap, version, reading, usage, t, out)
            present[s] = base + t
            v = version.get(s, 0) + 1
            version[s] = v
            heapq.heappush(heap, (victim_key(policy, nxt, base + t), s, v))
            if usage > high:
                high = usage
            occ_t.append(t)
            occ_v.append(usage)
        self.usage = usage
        out.high_water = high
        out.dl_steps = np.asarray(dl_t, np.int64)
        out.dl_shards = np.asarray(dl_s, np.int64)
        out.occupancy = _step_fill(np.asarray(occ_t, np.int64), np.asarray(occ_v, np.int64),
                                   num_ticks, usage)  # fmt: skip

    def _evict(
        self,
        heap: list[tuple[tuple[float, float], int, int]],
        version: dict[int, int],
        reading: dict[int, int],
        usage: int,
        t: int,
        out: EpochReplay,
    ) -> int:
        assert self.limit is not None
        present, sizes = self.present, self.sizes
        since = t - self.hold  # reads at ticks >= since still pin their shard
        aside: list[tuple[tuple[float, float], int, int]] = []
        while usage > self.limit and heap:
            entry = heapq.heappop(heap)
            _, s, v = entry
            if version.get(s) != v or s not in present:
                continue  # stale entry
            if reading.get(s, NEVER_READ) >= since:
                aside.append(entry)  # pinned: read at this tick or within the hold before
                continue
            del present[s]
            version.pop(s, None)
            usage -= int(sizes[s])
            out.evictions += 1
        if usage > self.limit and self.hold:
            # every unpinned shard is gone: the runtime waits for the pin of the first held
            # shard in victim order (``aside`` was popped in that order; never one read at this
            # tick) to go -- its consumer finishes the batch -- and evicts that shard
            gone = set()
            for i in [i for i, e in enumerate(aside) if reading[e[1]] != t]:
                if usage <= self.limit:
                    break
                s = aside[i][1]
                del present[s]
                version.pop(s, None)
                usage -= int(sizes[s])
                out.evictions += 1
                out.waits += 1
                gone.add(i)
            aside = [e for i, e in enumerate(aside) if i not in gone]
        for entry in aside:
            heapq.heappush(heap, entry)
        if usage > self.limit:
            out.overcommit = max(out.overcommit, usage - self.limit)
        return usage


class RunReplay:
    """The cache of one node across epochs, replayed run by run (the planner's fast model).

    Input per epoch: *runs* ``(first step, last step, shard)``: the node reads ``shard`` at
    steps ``first..last`` (see ``astream.plan`` "Runs"). A run's first step is its only event:
    the shard is downloaded there if absent, and it stays pinned until its last step, so
    evicting skips shards whose run is still going. The victim order is the runtime's
    (:func:`astream.core.eviction.victim_key`): the next use of a shard is the first step of
    its next run (:data:`NEVER`: none this epoch), its last use the last step of its latest run.
    The work is O(runs log runs), independent of samples and batch size.
    """

    def __init__(self, sizes: I64, limit: int | None, policy: str) -> None:
        self.sizes = np.asarray(sizes, np.int64)
        self.limit = limit
        self.policy = policy
        self.present: dict[int, int] = {}  # shard -> last step read (global clock)
        self.usage = 0
        self.clock = 0

    def epoch(self, first: I64, last: I64, shards: I64, num_steps: int) -> EpochReplay:
        """Replay one epoch's runs, sorted by first step."""
        first = np.asarray(first, np.int64)
        last = np.asarray(last, np.int64)
        shards = np.asarray(shards, np.int64)
        out = EpochReplay()
        out.distinct = len(np.unique(shards))
        by = np.lexsort((first, shards))
        nxt_sorted = np.full(len(by), NEVER, np.int64)
        if len(by) > 1:
            follow = shards[by][1:] == shards[by][:-1]
            nxt_sorted[:-1][follow] = first[by][1:][follow]
        nxt = np.empty_like(nxt_sorted)
        nxt[by] = nxt_sorted
        policy, limit, sizes, present = self.policy, self.limit, self.sizes, self.present
        base = self.clock
        key = victim_key
        heap: list[tuple[tuple[float, float], int, int]] = []
        version: dict[int, int] = {}
        pin_end: dict[int, int] = {}
        first_use: dict[int, int] = {}
        f_l, l_l, s_l, n_l = first.tolist(), last.tolist(), shards.tolist(), nxt.tolist()
        for t, s in zip(f_l, s_l):
            if s not in first_use:
                first_use[s] = t
        for s, used in present.items():
            version[s] = 0
            heapq.heappush(heap, (key(policy, first_use.get(s, NEVER), used), s, 0))
        dl_t: list[int] = []
        dl_s: list[int] = []
        occ_t: list[int] = []
        occ_v: list[int] = []
        high = usage = self.usage
        for t, e, s, nx in zip(f_l, l_l, s_l, n_l):
            pin_end[s] = e
            if s not in present:
                usage += int(sizes[s])
                out.downloads += 1
                dl_t.append(t)
                dl_s.append(s)
                if limit is not None and usage > limit:
                    aside = []
                    while usage > limit and heap:
                        entry = heapq.heappop(heap)
                        _, v_s, v = entry
                        if version.get(v_s) != v or v_s not in present:
                            continue
                        if pin_end.get(v_s, -1) >= t:
                            aside.append(entry)
                            continue
                        del present[v_s]
                        del version[v_s]
                        usage -= int(sizes[v_s])
                        out.evictions += 1
                    for entry in aside:
                        heapq.heappush(heap, entry)
                    if usage > limit:
                        out.overcommit = max(out.overcommit, usage - limit)
            present[s] = base + e
            v = version.get(s, 0) + 1
            version[s] = v
            heapq.heappush(heap, (key(policy, nx, base + e), s, v))
            if usage > high:
                high = usage
            occ_t.append(t)
            occ_v.append(usage)
        self.usage = usage
        self.clock += num_steps
        out.high_water = high
        out.dl_steps = np.asarray(dl_t, np.int64)
        out.dl_shards = np.asarray(dl_s, np.int64)
        out.bytes = int(sizes[out.dl_shards].sum()) if dl_s else 0
        out.occupancy = _step_fill(
            np.asarray(occ_t, np.int64), np.asarray(occ_v, np.int64), num_steps, usage
        )
        return out


def _step_fill(at: I64, values: I64, n: int, final: int) -> I64:
    """Per tick ``0..n-1``: the last of ``values`` recorded at or before it (carried forward)."""
    occ = np.zeros(n, np.int64)
    if not len(at) or n == 0:
        return occ
    last = np.flatnonzero(np.r_[at[1:] != at[:-1], True])
    marks = np.full(n, -1, np.int64)
    marks[at[last]] = values[last]
    idx = np.maximum.accumulate(np.where(marks >= 0, np.arange(n), -1))
    out: I64 = np.where(idx >= 0, marks[np.maximum(idx, 0)], 0)
    del final
    return out
