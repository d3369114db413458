"""Dealing an epoch's global sequence to a World, and its padding (:class:`EpochPlan`).

With ``R`` ranks and per-device batch ``bs``, resuming at global position ``k``, rank
``g = node * rpn + local`` has slot ``s = node + num_nodes * local``; its sample ``i`` is
position ``k + i * R + s``, its batch ``j`` its samples ``[j * bs, (j + 1) * bs)``, and rank
batch ``j`` is yielded by DataLoader worker ``j % workers_per_rank``. Every rank yields the same
count; the pads past the epoch's end read the real positions the reference repeats there. The
full rules are in :mod:`astream.core.order`'s docstring.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from astream.core.partition import SubPlan, locality_bound
from astream.core.world import World, check_positive_int
from astream.errors import ConfigError

__all__ = ["EpochPlan"]

I64 = NDArray[np.int64]
_CHUNK_SAMPLES = 4096  # positions turned into ids in one pass by worker_batches


class EpochPlan:
    """The planned global sequence of one epoch, and how it is dealt (see module docstring)."""

    reference = False  # True for the reference's algorithms (their own plan classes below)

    def __init__(
        self,
        subs: list[SubPlan],
        strata: I64 | None,
        batch_size: int,
        block_size: int,
        ncn: int,
        sizes: list[I64],
        *,
        partition_algo: str = "relaxed",
        method: str | None = None,
        unit: int = 1,
        chunks: tuple[NDArray[np.int32], I64] | None = None,
    ) -> None:
        self._subs = subs
        self._strata = strata
        self.batch_size = batch_size
        self.block_size = block_size
        self.num_canonical_nodes = ncn
        self.partition_algo = partition_algo
        self.batching_method = method or ("random" if strata is None else "stratified")
        self._unit = unit
        self._chunks = chunks
        self._shard_ends = np.cumsum(np.concatenate(sizes)).astype(np.int64)
        if chunks is not None:
            self.num_samples = len(chunks[0]) * unit
        elif strata is None:
            self.num_samples = subs[0].num_samples
        else:
            self.num_samples = sum(s.num_samples for s in subs)
            self._cum = np.concatenate([[0], np.cumsum(strata)]).astype(np.int64)

    # -- the global sequence -------------------------------------------------------------------
    def global_ids(self, start: int, stop: int) -> I64:
        """Ids at global positions ``[start, stop)`` (positions >= num_samples: see ids_at)."""
        return self.ids_at(np.arange(start, stop, dtype=np.int64))

    def ids_at(self, pos: I64) -> I64:
        """Ids at global positions (a position ``p >= N`` reads ``G[(p - N) mod N]``; dealing
        never asks for one: its padding reads real positions, see ``rank_positions``)."""
        n = self.num_samples
        pos = np.where(pos >= n, (pos - n) % n, pos)
        if self._chunks is not None:
            return self._chunk_ids(pos)
        if self._strata is None:
            return self._subs[0].ids_at(pos)
        u = int(self._strata.sum())
        q, o = pos // u, pos % u
        s_of = np.searchsorted(self._cum, o, side="right") - 1
        out = np.empty_like(pos)
        for s in np.unique(s_of).tolist():
            m = s_of == s
            out[m] = self._subs[s].ids_at(q[m] * self._strata[s] + o[m] - self._cum[s])
        return out

    def _chunk_ids(self, pos: I64) -> I64:
        assert self._chunks is not None
        stream, index = self._chunks
        u = self._unit
        q, o = pos // u, pos % u
        s_of = stream[q]
        out = np.empty_like(pos)
        for s in np.unique(s_of).tolist():
            m = s_of == s
            if self.batching_method == "per_stream":
                out[m] = self._subs[s].ids_at(index[q[m]] * u + o[m])
            else:  # device_per_stream: chunk q is chunk index[q] of canonical node q % ncn
                ncn = self.num_canonical_nodes
                t = index[q[m]] * u + o[m]
                out[m] = self._subs[s].ids_at(t * ncn + q[m] % ncn)
        return out

    def shard_of(self, ids: I64) -> I64:
        """Global shard index (streams' shards concatenated) of global sample ids."""
        shards: I64 = np.searchsorted(self._shard_ends, ids, side="right")
        return shards

    def locality_bound(self) -> int:
        """Max distinct shards in ``block_size`` consecutive positions of one canonical node."""
        return max(locality_bound(self.block_size, s.min_piece) for s in self._subs)

    # -- dealing to a World --------------------------------------------------------------------
    def _deal(self, world: World, start: int) -> tuple[int, int]:
        """(ranks, units per rank from ``start``): samples, or device batches for
        device_per_stream. Every rank gets the same count (see "Padding")."""
        check_positive_int("start", start, minimum=0)
        self._check_world(world)
        first, n = self._span(world, start)
        if start > n:
            raise ConfigError(f"start={start} is past the epoch's {n} samples")
        r = world.num_ranks
        gb = self.batch_size * r
        if self.batching_method == "per_stream":
            if self._unit % gb:
                raise ConfigError(
                    f"batching_method='per_stream': the plan's global batch of {self._unit} "
                    f"samples is not a multiple of batch_size * num_ranks = {gb}; plan with "
                    "global_batch_size equal to the training global batch"
                )
            if start % gb:
                raise ConfigError(
                    f"start={start}: batching_method='per_stream' resumes only at a whole "
                    f"global batch (a multiple of {gb})"
                )
        if self.batching_method == "device_per_stream":
            if start % self.batch_size:
                raise ConfigError(
                    f"start={start}: batching_method='device_per_stream' resumes only at a "
                    f"whole device batch (a multiple of batch_size={self.batch_size})"
                )
            return r, -(-((n - start) // self.batch_size) // r)
        return r, -(-(n - first) // r)

    def _check_world(self, world: World) -> None:
        ncn, p = self.num_canonical_nodes, world.num_nodes
        if self.partition_algo == "orig" and ncn % p and p % ncn:
            raise ConfigError(
                f"num_canonical_nodes={ncn} is incompatible with num_nodes={p}: one must divide "
                "the other (partition_algo='orig'; 'relaxed' accepts any num_nodes)"
            )

    def _span(self, world: World, start: int) -> tuple[int, int]:
        """(first dealt position, positions in the epoch) on ``world`` resuming at ``start``."""
        return start, self.num_samples

    def dealt_span(self, world: World, start: int = 0) -> tuple[int, int]:
        """(first position dealt, positions of the layout) on ``world`` resuming at ``start``:
        a reference plan rounds ``start`` down to a multiple of the nodes and widens its layout
        for more nodes than canonical ones; astream's own order does neither."""
        self._deal(world, start)  # a reference plan takes the World's layout here
        return self._span(world, start)

    def padded_num_samples(self, world: World, start: int = 0) -> int:
        """Samples dealt to all ranks together from ``start`` on, padding included."""
        r, c = self._deal(world, start)
        return r * c * (self.batch_size if self.batching_method == "device_per_stream" else 1)

    def rank_num_samples(self, world: World, global_rank: int, start: int = 0) -> int:
        """Samples rank ``global_rank`` yields from ``start`` on (the same for every rank)."""
        world.check_rank(global_rank)
        _, c = self._deal(world, start)
        return c * (self.batch_size if self.batching_method == "device_per_stream" else 1)

    def _rank_batches(self, world: World, start: int) -> int:
        _, c = self._deal(world, start)
        if self.batching_method == "device_per_stream":
            return c
        return -(-c // self.batch_size)

    def rank_positions(self, world: World, global_rank: int, batch: int, start: int = 0) -> I64:
        """Global positions of batch number ``batch`` of a rank (counted from ``start``).

        Padding reads real positions (see the module docstring), so every returned position is
        below ``num_samples``; the rank's last batch may be shorter than ``batch_size``.
        ``batch`` must be one of the rank's batches (ConfigError otherwise): past them the
        dealing formulas would give positions no rank reads.
        """
        _, c = self._deal(world, start)
        world.check_rank(global_rank)
        self._check_batch(world, batch, start)
        return self._positions(world, global_rank, [batch], start, c)[0]

    def _check_batch(self, world: World, batch: int, start: int) -> int:
        """``batch`` as an int if it is a rank batch number from ``start`` (every rank has the
        same count), else ConfigError naming the valid range."""
        if isinstance(batch, (bool, np.bool_)) or not isinstance(batch, (int, np.integer)):
            raise ConfigError(f"batch must be an int, got {type(batch).__name__} {batch!r}")
        nb = self._rank_batches(world, start)
        if not 0 <= batch < nb:
            raise ConfigError(
                f"batch must be in [0, {nb}) (the rank's batches from start={start}), got {batch}"
            )
        return int(batch)

    def rank_positions_span(
        self, world: World, global_rank: int, j0: int, j1: int, start: int = 0
    ) -> I64:
        """Global positions of a rank's batches ``[j0, j1)`` (clipped to its batches), one
        array, in reading order: what :meth:`rank_positions` gives for each, concatenated."""
        _, c = self._deal(world, start)
        world.check_rank(global_rank)
        batches = range(max(0, j0), min(j1, self._rank_batches(world, start)))
        if not len(batches):
            return np.zeros(0, np.int64)
        return np.concatenate(self._positions(world, global_rank, batches, start, c))

    def _positions(
        self, world: World, rank: int, batches: list[int] | range, start: int, c: int
    ) -> list[I64]:
        """Positions of several batches of ``rank`` (validated by the caller), one array each."""
        r = world.num_ranks
        node, local = divmod(rank, world.ranks_per_node)
        slot = node + world.num_nodes * local
        bs = self.batch_size
        first, n = self._span(world, start)
        if self.batching_method == "device_per_stream":
            first, total = start // bs, n // bs
            out = []
            for batch in batches:
                q = first + batch * r + slot
                if q >= total:  # padding: the chunk this slot had one global batch earlier
                    q = q - r if q - r >= first else first + slot % (total - first)
                out.append(q * bs + np.arange(bs, dtype=np.int64))
            return out
        b = np.asarray(batches, dtype=np.int64)
        i = b[:, None] * bs + np.arange(bs, dtype=np.int64)[None, :]
        pos: I64 = first + i * r + slot
        if len(b) and b[-1] == (c - 1) // bs:  # the rank's last batch: partial, maybe a pad
            last = pos[-1, : c - b[-1] * bs].copy()
            if len(last) and last[-1] >= n:
                last[-1] = self._pad_source(world, slot, first, c)
            return [*pos[:-1], last]
        return list(pos)

    def _pad_source(self, world: World, slot: int, start: int, c: int) -> int:
        """The real position a pad of ``slot`` (its last sample) repeats.

        As the reference: each physical node's remaining sequence (positions ``= node`` mod
        ``num_nodes``) is dealt round-robin to its ranks; the ranks short of a sample in the last
        row take, in order, the node's samples from ``L - 2 * rpn + 1 + local`` on (a few rows
        back, so never a rank's own last sample), or the node's first samples when it has fewer
        than ``2 * rpn - 1``.
        """
        pn, rpn = world.num_nodes, world.ranks_per_node
        m = self._span(world, start)[1] - start
        node, local = slot % pn, slot // pn
        length = max(0, -(-(m - node) // pn))  # the node's remaining samples
        if length == 0:  # fewer remaining samples than nodes: any real one
            return start + ((c - 1) * world.num_ranks + slot) % m
        have = length - (c - 1) * rpn  # real samples in the node's last row
        short = rpn - have
        if rpn + short - 1 <= length:
            t = length - rpn - short + 1 + (local - have)
        else:
            t = (local - have) % length
        return start + node + pn * t

    def worker_batches(
        self, world: World, global_rank: int, worker: int, start: int = 0
    ) -> Iterator[I64]:
        """Batches worker ``worker`` of ``global_rank`` yields: rank batches ``worker::W``."""
        world.check_rank(global_rank)
        world.check_worker(worker)
        nb = self._rank_batches(world, start)
        return self._iter(world, global_rank, worker, start, nb)

    def _iter(self, world: World, rank: int, worker: int, start: int, nb: int) -> Iterator[I64]:
        step = world.workers_per_rank
        mine = range(worker, nb, step)
        _, c = self._deal(world, start)
        # ids are computed for ~4,096 samples at a time (64 batches of 64): one vectorised pass
        # per chunk, and never a long one (a chunk of 64 batches of 25,000 samples held the
        # consumer's event loop for most of a second)
        chunk = max(1, _CHUNK_SAMPLES // max(1, self.batch_size))
        for lo in range(0, len(mine), chunk):
            parts = self._positions(world, rank, mine[lo : lo + chunk], start, c)
            ids = self.ids_at(np.concatenate(parts))
            at = 0
            for part in parts:
                yield ids[at : at + len(part)]
                at += len(part)
