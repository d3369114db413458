"""Mixing: how many samples each stream contributes to an epoch, and which ones.

Theory of operation
-------------------
1. **Weights -> counts** (:func:`choose_per_stream`), with the reference's semantics:

   - *relative*: every stream has ``proportion``. The epoch has ``epoch_size`` samples (default:
     the sum of the stream sizes); stream ``s`` gets ``floor(epoch_size * p_s / sum(p))`` and
     the shortfall goes one sample each to the streams with the largest fractional parts (ties:
     lower stream index first). Deterministic, no RNG. With a reference shuffle algorithm, the
     shortfall goes instead to streams drawn as the reference draws them (its
     ``Stream.apply_weights``: ``default_rng(shuffle_seed).choice``), so the same streams get
     the extra samples as in the reference.
   - *absolute*: each stream has ``repeat`` (``floor(repeat * size)`` samples), ``choose`` (that
     many) or nothing (its size). ``epoch_size`` is then not allowed.
   - *unspecified* weights with ``epoch_size``: proportional to the stream sizes.

2. **Counts -> pieces** (:func:`build_pieces`). A stream of ``n`` samples chosen ``c`` times
   takes ``q = c // n`` full copies (every non-empty shard once per copy, a *contiguous* piece)
   plus a *partial repeat* of ``r = c % n`` samples. The partial repeat is a systematic sample:
   the stream's non-empty shards are laid out in a seeded order, that length-``n`` line is cut
   into ``J = ceil(r / g)`` equal cells, and each cell contributes a run of ``g`` consecutive
   positions from its start (the last run is ``r - (J - 1) g`` long), ``g`` being
   ``sampling_granularity`` (reduced to 1 when ``n // J < g``, where runs would overlap). Each
   shard is then rotated by a seeded offset so every sample is equally likely to be picked.
   Item ``i`` of the partial repeat maps to its id in O(log shards); the pieces of the partial
   repeat are its per-shard item ranges, so the total is O(shards * (q + 1)) pieces and never
   O(samples). ``sampling_method="balanced"`` seeds the partial selection with the epoch (a new
   draw each epoch); ``"fixed"`` seeds it without (the same samples every epoch). Without
   shuffle, the shard line is seeded without the epoch (each shard gives the same count every
   epoch, as the reference) and the pieces come in index order (``index_order``).

A piece is a run of ``length`` positions; position ``j`` of a piece is id ``a + j`` (kind 0,
contiguous) or ``partial[stream].ids(a + j)`` (kind 1). Each piece lies in one shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from astream.core.shuffle import PURPOSE_PARTIAL, permutation, raw_words
from astream.errors import ConfigError

__all__ = [
    "PartialSelection",
    "Pieces",
    "build_pieces",
    "choose_per_stream",
    "largest_remainder",
    "reference_split",
]

I64 = NDArray[np.int64]


def largest_remainder(total: int, weights: NDArray[np.float64]) -> I64:
    """Split ``total`` in proportion to ``weights``: floors, then +1 by largest remainder."""
    quota = total * weights / weights.sum()
    base: I64 = np.floor(quota).astype(np.int64)
    short = total - int(base.sum())
    if short > 0:
        frac = quota - base
        order = np.lexsort((np.arange(len(frac)), -frac))
        base[order[:short]] += 1
    return base


def reference_split(total: int, weights: NDArray[np.float64], seed: int) -> I64:
    """Split ``total`` in proportion to ``weights`` as the reference's
    ``Stream.apply_weights`` does: normalise, ``int(total * share)`` each, then the shortfall
    to that many distinct streams drawn by ``numpy.random.default_rng(seed)`` (its
    ``shuffle_seed``), whatever their fractional parts."""
    share = np.array(weights, np.float64)
    share /= share.sum()
    base: I64 = (total * share).astype(np.int64)
    short = total - int(base.sum())
    if not 0 <= short <= len(share):
        raise ConfigError(f"epoch_size={total} cannot be split over weights {weights.tolist()}")
    rng = np.random.default_rng(seed)
    base[rng.choice(len(share), short, False)] += 1
    return base


def choose_per_stream(
    sizes: list[int],
    proportions: list[float | None],
    repeats: list[float | None],
    chooses: list[int | None],
    epoch_size: int | None,
    reference_seed: int | None = None,
) -> I64:
    """How many samples each stream contributes per epoch (see the module docstring).
    ``reference_seed``: a reference shuffle algorithm's ``shuffle_seed``; relative weights
    (and an ``epoch_size`` over unweighted streams) are then split as the reference splits
    them (:func:`reference_split`), else by largest remainder."""
    n = len(sizes)
    relative = [p is not None for p in proportions]
    if any(relative) and not all(relative):
        bad = relative.index(not relative[0])
        raise ConfigError(
            f"streams[{bad}]: relative (proportion) and absolute (repeat, choose, none) stream "
            "weights cannot be mixed"
        )
    if all(relative):
        props = np.array(proportions, np.float64)
        if not np.all(np.isfinite(props)) or props.sum() <= 0:
            raise ConfigError(f"proportion: must be finite with a positive sum, got {proportions}")
        for s in range(n):
            if props[s] > 0 and sizes[s] == 0:
                raise ConfigError(f"streams[{s}]: proportion={props[s]} but the stream is empty")
        total = sum(sizes) if epoch_size is None else epoch_size
        if reference_seed is not None:
            return reference_split(total, props, reference_seed)
        return largest_remainder(total, props)
    if epoch_size is not None:
        if any(r is not None for r in repeats) or any(c is not None for c in chooses):
            raise ConfigError("epoch_size: only allowed with relative (proportion) weights")
        if reference_seed is not None:
            return reference_split(epoch_size, np.array(sizes, np.float64), reference_seed)
        return largest_remainder(epoch_size, np.array(sizes, np.float64))
    out = np.zeros(n, np.int64)
    for s in range(n):
        rep, cho = repeats[s], chooses[s]
        if rep is not None:
            out[s] = int(np.floor(rep * sizes[s]))
        elif cho is not None:
            if cho > 0 and sizes[s] == 0:
                raise ConfigError(
                    f"streams[{s}]: choose={cho} is larger than possible: the stream is empty"
                )
            out[s] = cho
        else:
            out[s] = sizes[s]
    return out


@dataclass(frozen=True)
class PartialSelection:
    """The ``r`` samples a partial repeat takes from a stream of ``n`` samples."""

    n: int
    r: int
    granule: int
    cells: int
    starts: I64  # cumulative sizes of the stream's non-empty shards in seeded order, len S + 1
    base: I64  # global id of the first sample of each of those shards
    size: I64  # their sizes
    rot: I64  # seeded rotation inside each shard
    shard: I64  # their global shard indices

    def positions(self, items: I64) -> I64:
        """Position on the seeded line of each partial-repeat item."""
        g = self.granule
        pos: I64 = (items // g) * self.n // self.cells + items % g
        return pos

    def count_before(self, pos: I64) -> I64:
        """How many items lie at line positions < ``pos`` (vectorised)."""
        g, n, cells = self.granule, self.n, self.cells
        runs = np.minimum(cells, (pos * cells + n - 1) // n)  # runs starting before pos
        last = np.maximum(runs - 1, 0)
        last_start = last * n // cells
        last_len = np.where(last == cells - 1, self.r - (cells - 1) * g, g)
        got = last * g + np.minimum(last_len, pos - last_start)
        out: I64 = np.where(runs > 0, got, 0)
        return out

    def ids(self, items: I64) -> I64:
        """Global ids of partial-repeat items."""
        pos = self.positions(items)
        k = np.searchsorted(self.starts, pos, side="right") - 1
        out: I64 = self.base[k] + (pos - self.starts[k] + self.rot[k]) % self.size[k]
        return out


@dataclass
class Pieces:
    """Struct of arrays: one entry per piece (see the module docstring)."""

    length: I64
    kind: NDArray[np.int8]
    a: I64
    shard: I64
    stream: NDArray[np.int32]

    @staticmethod
    def concat(parts: list[Pieces]) -> Pieces:
        if not parts:
            z = np.zeros(0, np.int64)
            return Pieces(z, np.zeros(0, np.int8), z, z, np.zeros(0, np.int32))
        return Pieces(
            np.concatenate([p.length for p in parts]),
            np.concatenate([p.kind for p in parts]),
            np.concatenate([p.a for p in parts]),
            np.concatenate([p.shard for p in parts]),
            np.concatenate([p.stream for p in parts]),
        )

    def take(self, idx: I64) -> Pieces:
        return Pieces(
            self.length[idx], self.kind[idx], self.a[idx], self.shard[idx], self.stream[idx]
        )


def _partial(
    sizes: I64,
    id_base: I64,
    shard_base: int,
    r: int,
    granularity: int,
    key: tuple[int, ...],
    line_key: tuple[int, ...],
) -> PartialSelection:
    nz = np.flatnonzero(sizes)
    order = nz[permutation(len(nz), *line_key, 0)]
    size = sizes[order]
    n = int(size.sum())
    if n * n >= 2**62:
        raise ConfigError(f"shard_sizes: a partial repeat over {n} samples is too large")
    g = granularity
    cells = -(-r // g)
    if n // cells < g:
        g, cells = 1, r
    rot = (raw_words(len(order), *key, 1) % size.astype(np.uint64)).astype(np.int64)
    starts = np.zeros(len(order) + 1, np.int64)
    np.cumsum(size, out=starts[1:])
    return PartialSelection(n, r, g, cells, starts, id_base[order], size, rot, order + shard_base)


def build_pieces(
    shard_sizes: list[I64],
    chosen: I64,
    *,
    seed: int,
    partial_epoch: int,
    granularity: int,
    index_order: bool = False,
    line_epoch: int | None = None,
) -> tuple[list[Pieces], dict[int, PartialSelection]]:
    """The pieces of each stream for one epoch, and the partial selections they refer to.

    ``line_epoch`` (default ``partial_epoch``) seeds the shard line, hence how many samples
    each shard gives; ``partial_epoch`` seeds the rotations, hence which ones. With
    ``index_order`` the pieces come in index order: shard by shard, each shard's full copies,
    then its partial picks in ascending id order (a rotated pick wraps around inside its shard,
    so its piece is cut in two at the wrap).
    """
    if line_epoch is None:
        line_epoch = partial_epoch
    per_stream: list[Pieces] = []
    partials: dict[int, PartialSelection] = {}
    id_off = shard_off = 0
    for s, sizes in enumerate(shard_sizes):
        n = int(sizes.sum())
        id_base = id_off + np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        c = int(chosen[s])
        parts: list[Pieces] = []
        if n > 0 and c > 0:
            q, r = divmod(c, n)
            nz = np.flatnonzero(sizes)
            if q:
                reps = len(nz) * q
                parts.append(
                    Pieces(
                        np.tile(sizes[nz], q),
                        np.zeros(reps, np.int8),
                        np.tile(id_base[nz], q),
                        np.tile(nz + shard_off, q),
                        np.full(reps, s, np.int32),
                    )
                )
            if r:
                sel = _partial(
                    sizes,
                    id_base,
                    shard_off,
                    r,
                    granularity,
                    (seed, PURPOSE_PARTIAL, partial_epoch, s),
                    (seed, PURPOSE_PARTIAL, line_epoch, s),
                )
                partials[s] = sel
                lo = sel.count_before(sel.starts[:-1])
                hi = sel.count_before(sel.starts[1:])
                if index_order:
                    # item w is the first whose rotated offset wrapped past the shard's end
                    wrap = np.clip(sel.count_before(sel.starts[1:] - sel.rot), lo, hi)
                    lo, hi = np.concatenate([wrap, lo]), np.concatenate([hi, wrap])
                    shard = np.concatenate([sel.shard, sel.shard])
                else:
                    shard = sel.shard
                keep = np.flatnonzero(hi > lo)
                parts.append(
                    Pieces(
                        (hi - lo)[keep],
                        np.ones(len(keep), np.int8),
                        lo[keep],
                        shard[keep],
                        np.full(len(keep), s, np.int32),
                    )
                )
        joined = Pieces.concat(parts)
        if index_order and len(joined.length):
            # stable: full copies (tiled first) before the shard's partial pieces, wrap part first
            joined = joined.take(np.argsort(joined.shard, kind="stable"))
        per_stream.append(joined)
        id_off += n
        shard_off += len(sizes)
    return per_stream, partials
