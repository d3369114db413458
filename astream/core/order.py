"""The epoch plan: who yields which sample, in which order, from any resume position.

Theory of operation
-------------------
:func:`plan_epoch` turns shard sample counts, stream weights, seed and epoch into an
:class:`EpochPlan`: a *global sequence* ``G[0..N)`` of global sample ids (a global id is the
stream's offset -- the sample count of all earlier streams -- plus the index inside the stream).
``G`` is a pure function of (shard sizes, weights, seed, epoch, ``num_canonical_nodes``,
shuffle settings, block size, mixing settings). It does NOT depend on the World nor on the
batch size (except ``stratified``, whose stratum is ``global_batch_size``).

- ``batching_method="random"``: all streams' pieces form one :class:`SubPlan`
  (canonical nodes + shuffle blocks, :mod:`astream.core.partition`); proportions hold in
  expectation.
- ``batching_method="stratified"``: each stream has its own SubPlan; ``G`` is cut into strata
  of ``U = global_batch_size`` positions and every stratum holds exactly ``k_s`` samples of
  stream ``s`` (``k`` = ``U`` split by largest remainder of the stream proportions, ties to the
  lower stream index; the weights are the proportions when relative, else the chosen counts),
  stream after stream. The epoch has ``F = min_s floor(chosen_s / k_s)`` full strata, and each
  stream's count is reset to ``F * k_s`` *before* its samples are picked, so a stream never
  repeats a sample before using every one (its surplus is simply not chosen this epoch).

**Dealing** (:meth:`EpochPlan.worker_batches`). With ``R`` ranks, per-device batch ``bs`` and
global batch ``GB = R * bs``, resuming at global position ``k`` (0 for a fresh epoch):

- global batch ``j`` is positions ``[k + j*GB, k + (j+1)*GB)``; rank ``g = node * rpn + local``
  has slot ``s = node + num_nodes * local`` and takes positions ``k + j*GB + s + R*i`` for
  ``i < bs`` (so a physical node reads positions ``= node (mod num_nodes)``, i.e. only its own
  canonical nodes when ``num_nodes`` divides ``ncn``, or one canonical node when ``ncn``
  divides ``num_nodes``; other combinations raise ``ConfigError``);
- rank batch ``j`` is yielded by DataLoader worker ``j % workers_per_rank``, so torch's
  round-robin over workers reproduces the rank's sequence.

**Padding rule.** From ``k``, the ``M = N - k`` remaining positions are padded to
``ceil(M / GB) * GB`` (``(-M) mod GB < GB`` pad positions, all at the very end); pad position
``p >= N`` holds ``G[(p - N) mod N]``, i.e. samples repeated from the start of the epoch. So
every rank yields the same number of full batches, and every chosen sample appears exactly once
before any padding.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from astream.core.mixing import Pieces, build_pieces, choose_per_stream, largest_remainder
from astream.core.partition import SubPlan, locality_bound
from astream.core.world import World, check_positive_int
from astream.errors import ConfigError

__all__ = [
    "DEFAULT_NUM_CANONICAL_NODES",
    "EpochPlan",
    "StreamSpec",
    "check_options",
    "default_block_size",
    "plan_epoch",
]

I64 = NDArray[np.int64]
DEFAULT_NUM_CANONICAL_NODES = 1
REFERENCE_ALGOS = ("py1e", "py1s", "py2s", "py1br", "py1b", "naive")


@dataclass(frozen=True)
class StreamSpec:
    """One stream as the order sees it: its shard sample counts and its weight (at most one)."""

    shard_sizes: I64
    proportion: float | None = None
    repeat: float | None = None
    choose: int | None = None


def default_block_size(sizes: list[I64]) -> int:
    """Default ``shuffle_block_size``: 4 median shards' worth, clamped to [2**12, 2**20]."""
    nz = np.concatenate([s[s > 0] for s in sizes])
    median = int(np.median(nz)) if len(nz) else 1
    return int(min(max(4 * median, 1 << 12), 1 << 20))


def _check_streams(streams: list[StreamSpec]) -> list[I64]:
    if not isinstance(streams, (list, tuple)) or not streams:
        raise ConfigError("streams: need at least one StreamSpec")
    sizes: list[I64] = []
    for s, spec in enumerate(streams):
        arr = np.asarray(spec.shard_sizes)
        if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ConfigError(f"streams[{s}].shard_sizes: need a 1-D integer array")
        if arr.size and int(arr.min()) < 0:
            raise ConfigError(f"streams[{s}].shard_sizes: negative shard size {int(arr.min())}")
        given = [w for w in (spec.proportion, spec.repeat, spec.choose) if w is not None]
        if len(given) > 1:
            raise ConfigError(f"streams[{s}]: give at most one of proportion, repeat, choose")
        for name in ("proportion", "repeat"):
            v = getattr(spec, name)
            if v is not None and not (np.isfinite(v) and v >= 0):
                raise ConfigError(f"streams[{s}].{name}: must be finite and >= 0, got {v}")
        if spec.choose is not None:
            check_positive_int(f"streams[{s}].choose", spec.choose, minimum=0)
        sizes.append(arr.astype(np.int64))
    if sum(int(a.sum()) for a in sizes) == 0:
        raise ConfigError("streams: the dataset is empty (every shard_sizes sums to 0)")
    return sizes


PARTITION_ALGOS = ("relaxed",)


def check_options(
    *, shuffle_algo: str, sampling_method: str, batching_method: str, partition_algo: str
) -> None:
    """Refuse unknown or unsupported order options with a ConfigError naming the argument.

    ``partition_algo``: astream has one elastic partition, whose semantics are those of the
    reference's default ``"relaxed"`` (see docs/order.md); ``"orig"`` is refused.
    """
    _check_options(shuffle_algo, sampling_method, batching_method)
    if partition_algo == "orig":
        raise ConfigError(
            "partition_algo='orig' is not supported: astream's partition is always elastic "
            "(the 'relaxed' semantics: a resume may change num_nodes and the global order is "
            "kept); use partition_algo='relaxed'"
        )
    if partition_algo not in PARTITION_ALGOS:
        raise ConfigError(
            f"partition_algo: unknown algorithm {partition_algo!r} (astream supports 'relaxed')"
        )


def _check_options(shuffle_algo: str, sampling_method: str, batching_method: str) -> None:
    if shuffle_algo in REFERENCE_ALGOS:
        raise ConfigError(f"shuffle_algo={shuffle_algo!r} is not supported yet (use 'astream')")
    if shuffle_algo != "astream":
        raise ConfigError(f"shuffle_algo: unknown algorithm {shuffle_algo!r}")
    if sampling_method not in ("balanced", "fixed"):
        raise ConfigError(
            f"sampling_method: must be 'balanced' or 'fixed', got {sampling_method!r}"
        )
    if batching_method in ("per_stream", "device_per_stream"):
        raise ConfigError(f"batching_method={batching_method!r} is not supported yet")
    if batching_method not in ("random", "stratified"):
        raise ConfigError(f"batching_method: unknown method {batching_method!r}")


def plan_epoch(
    streams: list[StreamSpec],
    *,
    seed: int,
    epoch: int,
    num_canonical_nodes: int,
    batch_size: int,
    shuffle: bool,
    shuffle_algo: str = "astream",
    shuffle_block_size: int | None = None,
    epoch_size: int | None = None,
    sampling_method: str = "balanced",
    sampling_granularity: int = 1,
    batching_method: str = "random",
    global_batch_size: int | None = None,
) -> EpochPlan:
    """Plan one epoch. Cost O(shards * (1 + repeats)); see the module docstring."""
    check_positive_int("seed", seed, minimum=0)
    check_positive_int("epoch", epoch, minimum=0)
    ncn = check_positive_int("num_canonical_nodes", num_canonical_nodes)
    check_positive_int("batch_size", batch_size)
    check_positive_int("sampling_granularity", sampling_granularity)
    if epoch_size is not None:
        check_positive_int("epoch_size", epoch_size)
    _check_options(shuffle_algo, sampling_method, batching_method)
    sizes = _check_streams(streams)
    block = default_block_size(sizes) if shuffle_block_size is None else shuffle_block_size
    check_positive_int("shuffle_block_size", block)
    chosen = choose_per_stream(
        [int(a.sum()) for a in sizes],
        [s.proportion for s in streams],
        [s.repeat for s in streams],
        [s.choose for s in streams],
        epoch_size,
    )
    if int(chosen.sum()) == 0:
        raise ConfigError("streams: the weights choose no sample at all for this epoch")
    partial_epoch = epoch if sampling_method == "balanced" else 0
    pieces, partials = build_pieces(
        sizes, chosen, seed=seed, partial_epoch=partial_epoch, granularity=sampling_granularity
    )
    num_shards = sum(len(a) for a in sizes)

    def make(p: Pieces, sub: int) -> SubPlan:
        return SubPlan(
            p,
            partials,
            ncn=ncn,
            shuffle=bool(shuffle),
            seed=seed,
            epoch=epoch,
            block_size=block,
            sub=sub,
            num_shards=num_shards,
        )

    if batching_method == "random":
        return EpochPlan([make(Pieces.concat(pieces), 0)], None, batch_size, block, ncn, sizes)
    stratum = batch_size if global_batch_size is None else global_batch_size
    check_positive_int("global_batch_size", stratum)
    relative = streams[0].proportion is not None
    weights = np.array([s.proportion for s in streams], np.float64) if relative else chosen
    k = _stratum_counts(stratum, weights.astype(np.float64), chosen)
    full = min(int(c) // int(n) for c, n in zip(chosen, k) if n > 0)
    if full == 0:
        raise ConfigError(
            f"global_batch_size={stratum}: not even one full stratum fits in the epoch"
        )
    # every stream contributes exactly `full` strata's worth: re-choose with those counts
    pieces, partials = build_pieces(
        sizes, k * full, seed=seed, partial_epoch=partial_epoch, granularity=sampling_granularity
    )
    subs = [make(p, s + 1) for s, p in enumerate(pieces)]
    return EpochPlan(subs, k, batch_size, block, ncn, sizes)


def _stratum_counts(stratum: int, weights: NDArray[np.float64], chosen: I64) -> I64:
    k = largest_remainder(stratum, weights)
    for s in np.flatnonzero((k == 0) & (chosen > 0)).tolist():
        raise ConfigError(
            f"global_batch_size={stratum} is too small for streams[{s}]: its share of a stratum "
            "rounds to 0 samples; raise global_batch_size or that stream's weight"
        )
    return k


class EpochPlan:
    """The planned global sequence of one epoch, and how it is dealt (see module docstring)."""

    def __init__(
        self,
        subs: list[SubPlan],
        strata: I64 | None,
        batch_size: int,
        block_size: int,
        ncn: int,
        sizes: list[I64],
    ) -> None:
        self._subs = subs
        self._strata = strata
        self.batch_size = batch_size
        self.block_size = block_size
        self.num_canonical_nodes = ncn
        self._shard_ends = np.cumsum(np.concatenate(sizes)).astype(np.int64)
        if strata is None:
            self.num_samples = subs[0].num_samples
        else:
            self.num_samples = sum(s.num_samples for s in subs)
            self._cum = np.concatenate([[0], np.cumsum(strata)]).astype(np.int64)

    # -- the global sequence -------------------------------------------------------------------
    def global_ids(self, start: int, stop: int) -> I64:
        """Ids at global positions ``[start, stop)``; positions >= num_samples are padding."""
        return self.ids_at(np.arange(start, stop, dtype=np.int64))

    def ids_at(self, pos: I64) -> I64:
        """Ids at arbitrary global positions (padding: ``G[(p - N) mod N]`` for ``p >= N``)."""
        n = self.num_samples
        pos = np.where(pos >= n, (pos - n) % n, pos)
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

    def shard_of(self, ids: I64) -> I64:
        """Global shard index (streams' shards concatenated) of global sample ids."""
        shards: I64 = np.searchsorted(self._shard_ends, ids, side="right")
        return shards

    def locality_bound(self) -> int:
        """Max distinct shards in ``block_size`` consecutive positions of one canonical node."""
        return max(locality_bound(self.block_size, s.min_piece) for s in self._subs)

    # -- dealing to a World --------------------------------------------------------------------
    def _deal(self, world: World, start: int) -> tuple[int, int]:
        check_positive_int("start", start, minimum=0)
        if start > self.num_samples:
            raise ConfigError(f"start={start} is past the epoch's {self.num_samples} samples")
        ncn, p = self.num_canonical_nodes, world.num_nodes
        if ncn % p and p % ncn:
            raise ConfigError(
                f"num_canonical_nodes={ncn} is incompatible with num_nodes={p}: one must divide "
                "the other"
            )
        gb = self.batch_size * world.num_ranks
        remaining = self.num_samples - start
        return gb, -(-remaining // gb)

    def padded_num_samples(self, world: World, start: int = 0) -> int:
        """Positions dealt from ``start`` on, padding included (a multiple of the global batch)."""
        gb, nb = self._deal(world, start)
        return gb * nb

    def rank_num_samples(self, world: World, global_rank: int, start: int = 0) -> int:
        """Samples rank ``global_rank`` yields from ``start`` on (the same for every rank)."""
        world.check_rank(global_rank)
        return self._deal(world, start)[1] * self.batch_size

    def rank_positions(self, world: World, global_rank: int, batch: int, start: int = 0) -> I64:
        """Global positions of batch number ``batch`` of a rank (counted from ``start``)."""
        gb = self.batch_size * world.num_ranks
        node, local = divmod(world.check_rank(global_rank), world.ranks_per_node)
        slot = node + world.num_nodes * local
        i = np.arange(self.batch_size, dtype=np.int64)
        out: I64 = start + batch * gb + slot + world.num_ranks * i
        return out

    def worker_batches(
        self, world: World, global_rank: int, worker: int, start: int = 0
    ) -> Iterator[I64]:
        """Batches worker ``worker`` of ``global_rank`` yields: rank batches ``worker::W``."""
        world.check_rank(global_rank)
        world.check_worker(worker)
        _, nb = self._deal(world, start)
        return self._iter(world, global_rank, worker, start, nb)

    def _iter(self, world: World, rank: int, worker: int, start: int, nb: int) -> Iterator[I64]:
        step, bs = world.workers_per_rank, self.batch_size
        mine = range(worker, nb, step)
        chunk = 64
        for lo in range(0, len(mine), chunk):
            batches = mine[lo : lo + chunk]
            pos = np.concatenate([self.rank_positions(world, rank, b, start) for b in batches])
            ids = self.ids_at(pos)
            for j in range(len(batches)):
                yield ids[j * bs : (j + 1) * bs]
