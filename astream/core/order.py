"""The epoch plan: who yields which sample, in which order, from any resume position.

Theory of operation
-------------------
:func:`plan_epoch` turns shard sample counts, stream weights, seed and epoch into an
:class:`EpochPlan`: a *global sequence* ``G[0..N)`` of global sample ids (a global id is the
stream's offset -- the sample count of all earlier streams -- plus the index inside the stream).
``G`` is a pure function of (shard sizes, weights, seed, epoch, ``num_canonical_nodes``,
shuffle settings, block size, mixing settings). It does NOT depend on the World nor on the
batch size (except ``stratified`` and ``per_stream``, whose unit is ``global_batch_size``, and
``device_per_stream``, whose unit is the device batch).

- ``batching_method="random"``: all streams' pieces form one :class:`SubPlan`
  (canonical nodes + shuffle blocks, :mod:`astream.core.partition`); proportions hold in
  expectation.
- ``batching_method="stratified"``: each stream has its own SubPlan; ``G`` is cut into strata
  of ``U = global_batch_size`` positions and every stratum holds exactly ``k_s`` samples of
  stream ``s``, stream after stream. ``k`` is the reference's
  (:func:`refbatching.stratum_portions`: ``int(U * p_s)``, then one more to the largest
  fractional parts, of equal parts the later stream first; ``p_s`` the stream's proportion as
  the reference stores it, :func:`~astream.core.refplans._reference_proportions`). The epoch has
  ``F = min_s floor(chosen_s / k_s)`` full strata, and each stream's count is reset to
  ``F * k_s`` *before* its samples are picked, so a stream never repeats a sample before using
  every one (its surplus is simply not chosen this epoch).
- ``batching_method="per_stream"``: each stream has its own SubPlan, cut into whole chunks of
  ``U = global_batch_size`` (the remainder dropped); the chunks of all streams are put in a
  seeded stream order. A World deals it when ``R * bs`` divides ``U``, from whole global batches.
- ``batching_method="device_per_stream"``: canonical node ``c`` of each stream's SubPlan is cut
  into whole device batches; each node's chunks get a seeded stream order and the first ``C``
  are kept (``C`` = the fewest any node has); chunk ``q`` of ``G`` is chunk ``q // ncn`` of node
  ``q % ncn``. Dealt chunk by chunk: rank slot ``s`` takes chunk ``k / bs + j * R + s``.

The four methods above are astream's own shuffled order (``shuffle_algo="astream"``,
``shuffle=True``). **With ``shuffle=False``, whatever ``shuffle_algo`` names**, the epoch is
planned as the reference plans it unshuffled (the reference path below: its resampling, its
index-order layout and padding, its batching construction): nothing is shuffled, so no
algorithm has a say, and every batching method yields the reference's sequence.

**Dealing** (:meth:`EpochPlan.worker_batches`, :mod:`astream.core.dealing`). With ``R`` ranks
and per-device batch ``bs``, resuming at global position ``k`` (0 for a fresh epoch),
``M = N - k`` positions remain:

- rank ``g = node * rpn + local`` has slot ``s = node + num_nodes * local``; its sample ``i``
  is position ``k + i * R + s`` and its batch ``j`` its samples ``[j * bs, (j + 1) * bs)``.
  So a physical node reads positions ``= node (mod num_nodes)``, round-robin over its ranks (the
  reference's layout): its own canonical nodes when ``num_nodes`` divides ``ncn``, one when
  ``ncn`` divides ``num_nodes``; ``partition_algo="orig"`` refuses any other World,
  ``"relaxed"`` deals it the same sequence;
- rank batch ``j`` is yielded by DataLoader worker ``j % workers_per_rank``, so torch's
  round-robin over workers reproduces the rank's sequence.

**Padding rule: only where needed.** Every rank yields ``ceil(M / R)`` samples, its last batch
partial when ``bs`` does not divide that; the ``(-M) mod R`` positions past ``N`` are pads, each
the last sample of a rank, and read the real position the reference repeats there
(:meth:`EpochPlan._pad_source`). One rank: exactly ``G[k:]``, no pad.

**Reference algorithms** (``shuffle_algo`` py1e, py1br, py1s, py2s, naive; shuffled or not;
and any algorithm unshuffled):
mosaicml-streaming 0.13.0's order, padding and dealing, bit for bit
(:mod:`astream.core.refplans`). ``random`` batching:
:class:`_ReferencePlan` (the reference's padded canonical layout, computed per position, mapped
through its shuffle and resampling; dealt by the rules above, resume rounded down to
``num_nodes``; with ``initial_physical_nodes`` a World that does not divide the canonical nodes
gets the reference's "relaxed" re-deal, :class:`_RedealPlan`). ``stratified``, ``per_stream``,
``device_per_stream``: :class:`_ReferenceWorkPlan`, the reference's whole work array per World
and resume position (:func:`refbatching.batching_work`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from astream.core import refbatching, refshuffle
from astream.core.dealing import I64, EpochPlan
from astream.core.mixing import (
    PartialSelection,
    Pieces,
    build_pieces,
    choose_per_stream,
)
from astream.core.partition import SubPlan
from astream.core.refplans import _reference_plan, _reference_proportions, _reference_work_plan
from astream.core.shuffle import PURPOSE_BATCHES, permutation, raw_words
from astream.core.world import check_positive_int
from astream.errors import ConfigError, UnknownNameError

__all__ = [
    "DEFAULT_NUM_CANONICAL_NODES",
    "EpochPlan",
    "StreamSpec",
    "check_options",
    "default_block_size",
    "plan_epoch",
]

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


PARTITION_ALGOS = ("relaxed", "orig")
BATCHING_METHODS = ("random", "stratified", "per_stream", "device_per_stream")


def check_options(
    *, shuffle_algo: str, sampling_method: str, batching_method: str, partition_algo: str
) -> None:
    """Refuse unknown or unsupported order options with a ConfigError naming the argument.

    ``partition_algo``: ``"relaxed"`` (the default, as the reference's) deals the same global
    order to any number of physical nodes; ``"orig"`` additionally requires
    ``num_canonical_nodes`` and ``num_nodes`` to divide one another (see docs/order.md).
    """
    _check_options(shuffle_algo, sampling_method, batching_method)
    if partition_algo not in PARTITION_ALGOS:
        raise UnknownNameError(
            f"partition_algo={partition_algo!r} is not supported: use 'relaxed' or 'orig'"
        )


def _check_options(shuffle_algo: str, sampling_method: str, batching_method: str) -> None:
    if shuffle_algo == "py1b":
        raise ConfigError(
            "shuffle_algo='py1b' does not exist in mosaicml-streaming 0.13.0: use 'py1br' or 'py1e'"
        )
    if shuffle_algo != "astream" and shuffle_algo not in refshuffle.REFERENCE_ALGOS:
        raise UnknownNameError(f"shuffle_algo: unknown algorithm {shuffle_algo!r}")
    if sampling_method not in ("balanced", "fixed"):
        raise ConfigError(
            f"Invalid sampling method: {sampling_method!r}; sampling_method must be "
            "'balanced' or 'fixed'"
        )
    if batching_method not in BATCHING_METHODS:
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
    partition_algo: str = "relaxed",
    initial_physical_nodes: int | None = None,
) -> EpochPlan:
    """Plan one epoch. Cost O(shards * (1 + repeats)); see the module docstring.

    ``initial_physical_nodes`` (a reference algorithm only: the shuffled ``"astream"`` order
    never depends on the World; unshuffled, ``"astream"`` accepts it and never re-deals): the
    node count the run started on, from its checkpoint; with ``partition_algo="relaxed"`` a
    World whose nodes and canonical nodes do not divide one another then gets the reference's
    re-deal of that initial World's order."""
    check_positive_int("seed", seed, minimum=0)
    check_positive_int("epoch", epoch, minimum=0)
    ncn = check_positive_int("num_canonical_nodes", num_canonical_nodes)
    bs = check_positive_int("batch_size", batch_size)
    check_positive_int("sampling_granularity", sampling_granularity)
    if epoch_size is not None:
        check_positive_int("epoch_size", epoch_size)
    check_options(
        shuffle_algo=shuffle_algo,
        sampling_method=sampling_method,
        batching_method=batching_method,
        partition_algo=partition_algo,
    )
    sizes = _check_streams(streams)
    # a reference algorithm: the reference's order and padding, also unshuffled (its layout);
    # unshuffled, whatever the algorithm: nothing is shuffled, so the epoch is the reference's
    reference = shuffle_algo != "astream" or not shuffle
    _check_initial_nodes(initial_physical_nodes, reference)
    block = _block_size(shuffle_block_size, reference and shuffle, ncn, sizes)
    chosen = choose_per_stream(
        [int(a.sum()) for a in sizes],
        [s.proportion for s in streams],
        [s.repeat for s in streams],
        [s.choose for s in streams],
        epoch_size,
        reference_seed=seed if reference else None,
    )
    if int(chosen.sum()) == 0:
        raise ConfigError("streams: the weights choose no sample at all for this epoch")
    if reference:
        _warn_few_samples(chosen, ncn, batching_method)
    if reference and batching_method != "random":
        return _reference_work_plan(
            streams, sizes, chosen, epoch_size, method=batching_method,
            shuffle=bool(shuffle), algo=shuffle_algo, seed=seed, epoch=epoch, ncn=ncn,
            bs=bs, block=block, sampling_method=sampling_method,
            granularity=sampling_granularity, partition_algo=partition_algo,
            global_batch_size=global_batch_size, initial_nodes=initial_physical_nodes,
        )  # fmt: skip
    if reference:
        return _reference_plan(
            sizes, chosen, shuffle=bool(shuffle), algo=shuffle_algo, seed=seed, epoch=epoch,
            ncn=ncn, bs=bs, block=block, sampling_method=sampling_method,
            granularity=sampling_granularity, partition_algo=partition_algo,
            initial_nodes=initial_physical_nodes,
        )  # fmt: skip
    own = _OwnOrder(
        sizes, seed=seed, epoch=epoch, ncn=ncn, bs=bs, block=block,
        balanced=sampling_method == "balanced", granularity=sampling_granularity,
        partition_algo=partition_algo,
    )  # fmt: skip
    return own.plan(streams, chosen, epoch_size, batching_method, global_batch_size)


def _warn_few_samples(chosen: I64, ncn: int, batching_method: str) -> None:
    """The reference's layout over more canonical nodes than samples repeats samples to fill
    every node (and may drop whole batches); it warns, so does this. Its partition runs over
    the epoch (``random``) or over each stream (the other batching methods)."""
    counts = [int(chosen.sum())] if batching_method == "random" else [int(c) for c in chosen]
    for n in counts:
        if n < ncn:
            warnings.warn(
                f"{n} samples over num_canonical_nodes={ncn} canonical nodes: samples repeat "
                "to fill every node, and batches may be dropped; check the dataset's size or "
                "lower num_canonical_nodes",
                stacklevel=5,
            )


def _check_initial_nodes(initial_physical_nodes: int | None, reference: bool) -> None:
    if initial_physical_nodes is not None:
        check_positive_int("initial_physical_nodes", initial_physical_nodes)
        if not reference:
            raise ConfigError(
                "initial_physical_nodes: only a reference shuffle_algo (or shuffle=False) uses "
                "it (the shuffled 'astream' order does not depend on the World)"
            )


def _block_size(given: int | None, reference_shuffled: bool, ncn: int, sizes: list[I64]) -> int:
    """``shuffle_block_size`` resolved: the reference's default for its shuffles, else
    astream's (:func:`default_block_size`)."""
    if given is not None:
        block = given
    elif reference_shuffled:
        block = refshuffle.default_block_size(ncn)
    else:
        block = default_block_size(sizes)
    check_positive_int("shuffle_block_size", block)
    return block


@dataclass(frozen=True)
class _OwnOrder:
    """astream's own order, shuffled (``shuffle_algo="astream"``): one SubPlan for all streams
    or one per stream, as the batching method needs; ``balanced`` re-draws the partial repeats
    every epoch."""

    sizes: list[I64]
    seed: int
    epoch: int
    ncn: int
    bs: int
    block: int
    balanced: bool
    granularity: int
    partition_algo: str

    def pieces(self, counts: I64) -> tuple[list[Pieces], dict[int, PartialSelection]]:
        return build_pieces(
            self.sizes, counts, seed=self.seed, partial_epoch=self.epoch if self.balanced else 0,
            granularity=self.granularity,
        )  # fmt: skip

    def subplan(self, p: Pieces, partials: dict[int, PartialSelection], sub: int) -> SubPlan:
        return SubPlan(
            p,
            partials,
            ncn=self.ncn,
            shuffle=True,
            seed=self.seed,
            epoch=self.epoch,
            block_size=self.block,
            sub=sub,
            num_shards=sum(len(a) for a in self.sizes),
        )

    def plan(
        self,
        streams: list[StreamSpec],
        chosen: I64,
        epoch_size: int | None,
        method: str,
        global_batch_size: int | None,
    ) -> EpochPlan:
        bs, block, ncn, sizes, algo = self.bs, self.block, self.ncn, self.sizes, self.partition_algo
        pieces, partials = self.pieces(chosen)
        if method == "random":
            sub = self.subplan(Pieces.concat(pieces), partials, 0)
            return EpochPlan([sub], None, bs, block, ncn, sizes, partition_algo=algo)
        # the reference interleaves per-stream batches with a generator that changes per epoch
        # only with balanced sampling (when shuffling, always the case here)
        order_key = (self.seed, PURPOSE_BATCHES, self.epoch if self.balanced else 0)
        if method == "per_stream":
            unit = bs if global_batch_size is None else global_batch_size
            check_positive_int("global_batch_size", unit)
            subs = [self.subplan(p, partials, s + 1) for s, p in enumerate(pieces)]
            full = np.array([sp.num_samples // unit for sp in subs], np.int64)
            _check_full_batches(full, chosen, f"global batch (global_batch_size={unit})")
            labels = _interleave(full, order_key)
            return EpochPlan(
                subs, None, bs, block, ncn, sizes, method="per_stream", unit=unit,
                chunks=_chunk_table(labels, len(subs)), partition_algo=algo,
            )  # fmt: skip
        if method == "device_per_stream":
            subs = [self.subplan(p, partials, s + 1) for s, p in enumerate(pieces)]
            return _device_per_stream(subs, chosen, bs, block, ncn, sizes, order_key, algo)
        return self.stratified(streams, chosen, epoch_size, global_batch_size)

    def stratified(
        self,
        streams: list[StreamSpec],
        chosen: I64,
        epoch_size: int | None,
        global_batch_size: int | None,
    ) -> EpochPlan:
        """Strata of ``global_batch_size`` positions, each with the reference's make-up."""
        stratum = self.bs if global_batch_size is None else global_batch_size
        check_positive_int("global_batch_size", stratum)
        # the make-up of a stratum is the reference's (only the order inside a stream is ours)
        proportions = _reference_proportions(streams, self.sizes, chosen, epoch_size)
        k = _stratum_counts(stratum, proportions, chosen)
        full_strata = min(int(c) // int(n) for c, n in zip(chosen, k) if n > 0)
        if full_strata == 0:
            raise ConfigError(
                f"global_batch_size={stratum}: not even one full stratum fits in the epoch"
            )
        # every stream contributes exactly `full_strata` strata's worth: re-choose with those
        pieces, partials = self.pieces(k * full_strata)
        subs = [self.subplan(p, partials, s + 1) for s, p in enumerate(pieces)]
        return EpochPlan(
            subs, k, self.bs, self.block, self.ncn, self.sizes, partition_algo=self.partition_algo
        )


def _check_full_batches(full: I64, chosen: I64, what: str) -> None:
    for s in np.flatnonzero((full == 0) & (chosen > 0)).tolist():
        raise ConfigError(
            f"streams[{s}]: its {int(chosen[s])} samples this epoch do not fill one {what}; "
            "per-stream batching needs at least one full batch from every stream"
        )


def _interleave(counts: I64, key: tuple[int, ...]) -> NDArray[np.int32]:
    """Stream labels, ``counts[s]`` of stream ``s``, in a seeded order."""
    labels = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
    out: NDArray[np.int32] = labels[permutation(len(labels), *key)]
    return out


def _chunk_table(labels: NDArray[np.int32], num_streams: int) -> tuple[NDArray[np.int32], I64]:
    """(stream, index among that stream's chunks) of every chunk in ``labels`` order."""
    index = np.zeros(len(labels), np.int64)
    for s in range(num_streams):
        m = labels == s
        index[m] = np.arange(int(m.sum()), dtype=np.int64)
    return labels, index


def _device_per_stream(
    subs: list[SubPlan],
    chosen: I64,
    bs: int,
    block: int,
    ncn: int,
    sizes: list[I64],
    key: tuple[int, ...],
    partition_algo: str,
) -> EpochPlan:
    """Chunks of ``bs`` samples, each from one stream and one canonical node.

    Canonical node ``c`` cuts each stream's part of it into whole device batches, puts them in
    a seeded stream order, and keeps its first ``C`` (``C`` = the fewest any node has, so every
    node gives the same count); chunk ``q`` of the epoch is chunk ``q // ncn`` of node ``q % ncn``.
    """

    def chunks_of(c: int) -> int:  # whole device batches of node c; non-increasing in c
        return sum(int(sp.node_len(c)) // bs for sp in subs)

    if chunks_of(ncn - 1) == 0:  # some node has none: name the first (binary search, O(log))
        lo, hi = 0, ncn - 1
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if chunks_of(mid) == 0 else (mid + 1, hi)
        c = lo
        raise ConfigError(
            f"batching_method='device_per_stream': canonical node {c} of num_canonical_nodes="
            f"{ncn} holds no full device batch (batch_size={bs}) of any stream; lower "
            "num_canonical_nodes or batch_size"
        )
    nodes = np.arange(ncn, dtype=np.int64)  # ncn <= samples / bs here
    per = np.stack([np.asarray(sp.node_len(nodes)) // bs for sp in subs])  # (streams, ncn)
    count = int(per.sum(axis=0).min())
    _check_full_batches(per.sum(axis=1), chosen, f"device batch (batch_size={bs})")
    node = np.repeat(np.tile(nodes, len(subs)), per.ravel())
    stream = np.repeat(np.repeat(np.arange(len(subs), dtype=np.int32), ncn), per.ravel())
    # index of each chunk among its (node, stream): generated in order, so a running count
    first = np.concatenate([[0], np.cumsum(per.ravel())[:-1]])
    index = np.arange(len(node), dtype=np.int64) - np.repeat(first, per.ravel())
    words = raw_words(len(node), *key)
    order = np.lexsort((words, node))  # grouped by node, seeded order inside
    node_first = np.concatenate([[0], np.cumsum(per.sum(axis=0))[:-1]])
    take = (node_first[:, None] + np.arange(count)[None, :]).T.ravel()  # chunk q -> row
    rows = order[take]
    return EpochPlan(
        subs, None, bs, block, ncn, sizes, method="device_per_stream", unit=bs,
        chunks=(stream[rows], index[rows]), partition_algo=partition_algo,
    )  # fmt: skip


def _stratum_counts(stratum: int, proportions: NDArray[np.float64], chosen: I64) -> I64:
    """Each stream's samples in a stratum: the reference's rounding of its proportions
    (:func:`refbatching.stratum_portions`); a stream with samples but a share of 0 is refused."""
    k = refbatching.stratum_portions(stratum, proportions)
    for s in np.flatnonzero((k == 0) & (chosen > 0)).tolist():
        raise ConfigError(
            f"global_batch_size={stratum} is too small for streams[{s}]: its share of a stratum "
            "rounds to 0 samples; raise global_batch_size or that stream's weight"
        )
    return k
