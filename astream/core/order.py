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
  (:func:`refshuffle.stratum_portions`: ``int(U * p_s)``, then one more to the largest
  fractional parts, of equal parts the later stream first; ``p_s`` the stream's proportion as
  the reference stores it, :func:`_reference_proportions`). The epoch has
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

**Dealing** (:meth:`EpochPlan.worker_batches`). With ``R`` ranks and per-device batch ``bs``,
resuming at global position ``k`` (0 for a fresh epoch), ``M = N - k`` positions remain:

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
mosaicml-streaming 0.13.0's order, padding and dealing, bit for bit. ``random`` batching:
:class:`_ReferencePlan` (the reference's padded canonical layout, computed per position, mapped
through its shuffle and resampling; dealt by the rules above, resume rounded down to
``num_nodes``; with ``initial_physical_nodes`` a World that does not divide the canonical nodes
gets the reference's "relaxed" re-deal, :class:`_RedealPlan`). ``stratified``, ``per_stream``,
``device_per_stream``: :class:`_ReferenceWorkPlan`, the reference's whole work array per World
and resume position (:func:`refshuffle.batching_work`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from astream.core import refshuffle
from astream.core.mixing import (
    PartialSelection,
    Pieces,
    build_pieces,
    choose_per_stream,
)
from astream.core.partition import SubPlan, locality_bound
from astream.core.shuffle import PURPOSE_BATCHES, permutation, raw_words
from astream.core.world import World, check_positive_int
from astream.errors import ConfigError, UnknownNameError

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
            f"sampling_method: must be 'balanced' or 'fixed', got {sampling_method!r}"
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
    if initial_physical_nodes is not None:
        check_positive_int("initial_physical_nodes", initial_physical_nodes)
        if not reference:
            raise ConfigError(
                "initial_physical_nodes: only a reference shuffle_algo (or shuffle=False) uses "
                "it (the shuffled 'astream' order does not depend on the World)"
            )
    if shuffle_block_size is not None:
        block = shuffle_block_size
    elif reference and shuffle:
        block = refshuffle.default_block_size(ncn)
    else:
        block = default_block_size(sizes)
    check_positive_int("shuffle_block_size", block)
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
        if batching_method != "random":
            return _reference_work_plan(
                streams, sizes, chosen, epoch_size, method=batching_method,
                shuffle=bool(shuffle), algo=shuffle_algo, seed=seed, epoch=epoch, ncn=ncn,
                bs=bs, block=block, sampling_method=sampling_method,
                granularity=sampling_granularity, partition_algo=partition_algo,
                global_batch_size=global_batch_size, initial_nodes=initial_physical_nodes,
            )  # fmt: skip
        return _reference_plan(
            sizes, chosen, shuffle=bool(shuffle), algo=shuffle_algo, seed=seed, epoch=epoch,
            ncn=ncn, bs=bs, block=block, sampling_method=sampling_method,
            granularity=sampling_granularity, partition_algo=partition_algo,
            initial_nodes=initial_physical_nodes,
        )  # fmt: skip
    # astream's own order, shuffled: "balanced" re-draws the partial repeats every epoch
    balanced = sampling_method == "balanced"
    partial_epoch = epoch if balanced else 0

    def pieces_for(counts: I64) -> tuple[list[Pieces], dict[int, PartialSelection]]:
        return build_pieces(
            sizes, counts, seed=seed, partial_epoch=partial_epoch,
            granularity=sampling_granularity,
        )  # fmt: skip

    pieces, partials = pieces_for(chosen)
    num_shards = sum(len(a) for a in sizes)

    def make(p: Pieces, sub: int) -> SubPlan:
        return SubPlan(
            p,
            partials,
            ncn=ncn,
            shuffle=True,
            seed=seed,
            epoch=epoch,
            block_size=block,
            sub=sub,
            num_shards=num_shards,
        )

    if batching_method == "random":
        return EpochPlan(
            [make(Pieces.concat(pieces), 0)],
            None,
            bs,
            block,
            ncn,
            sizes,
            partition_algo=partition_algo,
        )
    # the reference interleaves per-stream batches with a generator that changes per epoch only
    # with balanced sampling (when shuffling, always the case here)
    order_key = (seed, PURPOSE_BATCHES, epoch if balanced else 0)
    if batching_method == "per_stream":
        unit = bs if global_batch_size is None else global_batch_size
        check_positive_int("global_batch_size", unit)
        subs = [make(p, s + 1) for s, p in enumerate(pieces)]
        full = np.array([sp.num_samples // unit for sp in subs], np.int64)
        _check_full_batches(full, chosen, f"global batch (global_batch_size={unit})")
        labels = _interleave(full, order_key)
        return EpochPlan(
            subs, None, bs, block, ncn, sizes, method="per_stream", unit=unit,
            chunks=_chunk_table(labels, len(subs)), partition_algo=partition_algo,
        )  # fmt: skip
    if batching_method == "device_per_stream":
        subs = [make(p, s + 1) for s, p in enumerate(pieces)]
        return _device_per_stream(subs, chosen, bs, block, ncn, sizes, order_key, partition_algo)
    stratum = bs if global_batch_size is None else global_batch_size
    check_positive_int("global_batch_size", stratum)
    # the make-up of a stratum is the reference's (only the order inside a stream is ours)
    k = _stratum_counts(stratum, _reference_proportions(streams, sizes, chosen, epoch_size), chosen)
    full_strata = min(int(c) // int(n) for c, n in zip(chosen, k) if n > 0)
    if full_strata == 0:
        raise ConfigError(
            f"global_batch_size={stratum}: not even one full stratum fits in the epoch"
        )
    # every stream contributes exactly `full_strata` strata's worth: re-choose with those counts
    pieces, partials = pieces_for(k * full_strata)
    subs = [make(p, s + 1) for s, p in enumerate(pieces)]
    return EpochPlan(subs, k, bs, block, ncn, sizes, partition_algo=partition_algo)


def _reference_plan(
    sizes: list[I64],
    chosen: I64,
    *,
    shuffle: bool,
    algo: str,
    seed: int,
    epoch: int,
    ncn: int,
    bs: int,
    block: int,
    sampling_method: str,
    granularity: int,
    partition_algo: str,
    initial_nodes: int | None,
) -> EpochPlan:
    """The reference's epoch: its resampling, its shuffle of the resampled units, its padded
    index-order layout (see :class:`_ReferencePlan`; unshuffled under ``"astream"``:
    :class:`_UnshuffledPlan`)."""
    every = all(int(c) == int(a.sum()) for a, c in zip(sizes, chosen))
    whole = every and all(bool((a > 0).all()) for a in sizes)
    balanced = sampling_method == "balanced"
    if whole or (every and not shuffle):
        # every sample read once: ids the identity (the units, the shards, matter to a shuffle)
        units, small = np.concatenate(sizes).astype(np.int64), None
    else:  # the per-shard counts change per epoch when shuffling balanced; the subsets if balanced
        units, small = refshuffle.resample(
            sizes, chosen.tolist(), granularity, seed, epoch, shuffle and balanced, balanced
        )
    n = int(units.sum())
    table: I64 | None = None
    if shuffle:  # int32 while the ids fit
        table = refshuffle.get_shuffle(algo, units, ncn, seed, epoch, block, compact=True)
        if small is not None:  # the reference maps its position b to small[perm[b]]
            table = small[table]
    else:
        table = small
    if table is not None and len(table) and table.dtype != np.int32 and int(table.max()) < 2**31:
        table = table.astype(np.int32)
    if algo == "astream":  # unshuffled (plan_epoch): the reference's epoch, astream's Worlds
        sub = None
        if table is None:  # index order itself: also as a SubPlan, for the planner's runs
            pieces, partials = build_pieces(
                sizes, chosen, seed=seed, partial_epoch=0, granularity=granularity,
                index_order=True,
            )  # fmt: skip
            sub = SubPlan(
                Pieces.concat(pieces), partials, ncn=ncn, shuffle=False, seed=seed,
                epoch=epoch, block_size=block, sub=0, num_shards=sum(len(a) for a in sizes),
                layout="reference",
            )  # fmt: skip
        return _UnshuffledPlan(
            table, n, bs, block, ncn, sizes, partition_algo=partition_algo, sub=sub
        )
    return _ReferencePlan(
        table, n, bs, block, ncn, sizes, partition_algo=partition_algo, initial=initial_nodes
    )


def _reference_proportions(
    streams: list[StreamSpec], sizes: list[I64], chosen: I64, epoch_size: int | None
) -> NDArray[np.float64]:
    """Each stream's ``proportion`` as the reference stores it after weighing its streams."""
    if all(s.proportion is not None for s in streams):
        p = np.array([s.proportion for s in streams], np.float64)
        out: NDArray[np.float64] = p / p.sum()
        return out
    unweighted = all(s.repeat is None and s.choose is None for s in streams)
    if unweighted and epoch_size:
        n = np.array([int(a.sum()) for a in sizes], np.int64).astype(np.float64)
        share: NDArray[np.float64] = n / n.sum()
        return share
    c = np.asarray(chosen, np.int64)
    chosen_share: NDArray[np.float64] = c / c.sum()
    return chosen_share


def _reference_work_plan(
    streams: list[StreamSpec],
    sizes: list[I64],
    chosen: I64,
    epoch_size: int | None,
    *,
    method: str,
    shuffle: bool,
    algo: str,
    seed: int,
    epoch: int,
    ncn: int,
    bs: int,
    block: int,
    sampling_method: str,
    granularity: int,
    partition_algo: str,
    global_batch_size: int | None,
    initial_nodes: int | None,
) -> EpochPlan:
    """The reference's per-stream batching: each stream resampled on its own (the reference's
    ``resample_streams(epoch, stream_id)``), dealt per World by :class:`_ReferenceWorkPlan`."""
    balanced = sampling_method == "balanced"
    offset = 0
    per_stream = []
    for a, c in zip(sizes, chosen.tolist()):
        units, small = refshuffle.resample(
            [a], [int(c)], granularity, seed, epoch, shuffle and balanced, balanced
        )
        per_stream.append((units, small + offset))
        offset += int(a.sum())
    args = dict(
        shuffle=shuffle, algo=algo, seed=seed, epoch=epoch, block=block, ncn=ncn, bs=bs,
        epoch_seed_change=shuffle and balanced, partition_algo=partition_algo,
        initial_nodes=initial_nodes,
    )  # fmt: skip
    props = _reference_proportions(streams, sizes, chosen, epoch_size)
    return _ReferenceWorkPlan(method, per_stream, props, args, sizes, global_batch_size)


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
    (:func:`refshuffle.stratum_portions`); a stream with samples but a share of 0 is refused."""
    k = refshuffle.stratum_portions(stratum, proportions)
    for s in np.flatnonzero((k == 0) & (chosen > 0)).tolist():
        raise ConfigError(
            f"global_batch_size={stratum} is too small for streams[{s}]: its share of a stratum "
            "rounds to 0 samples; raise global_batch_size or that stream's weight"
        )
    return k


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
        """
        _, c = self._deal(world, start)
        world.check_rank(global_rank)
        return self._positions(world, global_rank, [batch], start, c)[0]

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
        chunk = 64
        for lo in range(0, len(mine), chunk):
            parts = self._positions(world, rank, mine[lo : lo + chunk], start, c)
            ids = self.ids_at(np.concatenate(parts))
            at = 0
            for part in parts:
                yield ids[at : at + len(part)]
                at += len(part)


class _ReferencePlan(EpochPlan):
    """The reference's epoch under one of its algorithms: dealt exactly as 0.13.0 deals it.

    The epoch is the reference's padded index-order layout (:func:`refshuffle.canonical_index`):
    ``ncn`` canonical nodes of ``P = ceil(n / ncn)`` positions each (a shorter node repeats its
    last sample; with fewer canonical than physical nodes ``P`` is widened so each canonical node
    splits evenly over its physical nodes), interleaved. Position ``q`` holds
    ``table[canonical_index(q)]`` (``table``: the reference's shuffle composed with its
    resampling; ``None`` is the identity). A resume position is rounded down to a multiple of
    ``num_nodes``, as the reference's ``drop_first``; then the dealing (rank slots, the ranks'
    padding, workers) is :class:`EpochPlan`'s, which is the reference's.

    ``num_samples`` is the padded epoch for up to ``ncn`` physical nodes. With more, the epoch
    is longer; the plan then reads positions in the layout of the World it last dealt to.
    """

    reference = True

    def __init__(
        self,
        table: I64 | None,
        n: int,
        batch_size: int,
        block_size: int,
        ncn: int,
        sizes: list[I64],
        *,
        partition_algo: str,
        initial: int | None = None,
    ) -> None:
        self._table = table
        self._n = n
        self._initial = initial
        self._redealer: _RedealPlan | None = None
        self._redealing = False  # the World last dealt to gets the re-deal (see _redeal)
        self._nodes = 1  # physical nodes of the layout ids_at reads (see the class docstring)
        self._shard_ends = np.cumsum(np.concatenate(sizes)).astype(np.int64)
        self.batch_size = batch_size
        self.block_size = block_size
        self.num_canonical_nodes = ncn
        self.partition_algo = partition_algo
        self.batching_method = "random"
        self._unit = 1
        self._chunks = None
        self._strata = None
        self._subs = []
        self.num_samples = self._total(1)

    def _total(self, num_nodes: int) -> int:
        width = refshuffle.canonical_layout(self._n, self.num_canonical_nodes, num_nodes)[0]
        return self.num_canonical_nodes * width

    def _check_world(self, world: World) -> None:
        ncn, p = self.num_canonical_nodes, world.num_nodes
        if ncn % p and p % ncn:
            raise ConfigError(
                f"num_canonical_nodes={ncn} is incompatible with num_nodes={p}: one must divide "
                f"the other under a reference shuffle_algo (as mosaicml-streaming's "
                f"{self.partition_algo!r} partition of a fresh epoch; resuming, 'relaxed' "
                "re-deals the initial World's order when given initial_physical_nodes)"
            )
        self._redealing = False
        self._nodes = p if p > ncn else 1  # the layout of the World dealt to (see ids_at)

    def _redeal(self, world: World) -> _RedealPlan | None:
        """The re-deal when the reference's "relaxed" partition re-deals (resuming on a World
        whose nodes and canonical nodes do not divide one another), else None."""
        ncn, p = self.num_canonical_nodes, world.num_nodes
        if not (ncn % p and p % ncn) or self.partition_algo != "relaxed" or self._initial is None:
            return None
        if self._redealer is None:
            self._redealer = _RedealPlan(self, self._initial)
        self._redealing = True
        return self._redealer

    def worker_batches(
        self, world: World, global_rank: int, worker: int, start: int = 0
    ) -> Iterator[I64]:
        r = self._redeal(world)
        if r is not None:
            return r.worker_batches(world, global_rank, worker, start)
        return super().worker_batches(world, global_rank, worker, start)

    def rank_num_samples(self, world: World, global_rank: int, start: int = 0) -> int:
        r = self._redeal(world)
        if r is not None:
            return r.rank_num_samples(world, global_rank, start)
        return super().rank_num_samples(world, global_rank, start)

    def padded_num_samples(self, world: World, start: int = 0) -> int:
        r = self._redeal(world)
        if r is not None:
            return r.padded_num_samples(world, start)
        return super().padded_num_samples(world, start)

    def rank_positions(self, world: World, global_rank: int, batch: int, start: int = 0) -> I64:
        r = self._redeal(world)
        if r is not None:
            return r.rank_positions(world, global_rank, batch, start)
        return super().rank_positions(world, global_rank, batch, start)

    def rank_positions_span(
        self, world: World, global_rank: int, j0: int, j1: int, start: int = 0
    ) -> I64:
        r = self._redeal(world)
        if r is not None:
            return r.rank_positions_span(world, global_rank, j0, j1, start)
        return super().rank_positions_span(world, global_rank, j0, j1, start)

    def _span(self, world: World, start: int) -> tuple[int, int]:
        return start - start % world.num_nodes, self._total(world.num_nodes)

    def ids_at(self, pos: I64) -> I64:
        if self._redealing and self._redealer is not None:
            return self._redealer.ids_at(pos)
        n = self._total(self._nodes)
        pos = np.asarray(pos, np.int64)
        pos = np.where(pos >= n, (pos - n) % n, pos)
        try:
            idx = refshuffle.canonical_index(self._n, self.num_canonical_nodes, self._nodes, pos)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return idx if self._table is None else self._table[idx].astype(np.int64)

    def locality_bound(self) -> int:
        return len(self._shard_ends)  # the reference's blocks span any number of shards


class _UnshuffledPlan(_ReferencePlan):
    """``shuffle=False`` under astream's own algorithm, ``random`` batching: the reference's
    unshuffled epoch (:class:`_ReferencePlan`: its padded index-order layout, per position,
    through the resampling's id table when a stream is resampled), dealt as the reference deals
    it. On a World whose nodes and canonical nodes do not divide one another, where the
    reference refuses a fresh epoch, ``partition_algo="relaxed"`` deals the same sequence as
    astream's own order is dealt (no re-deal); ``"orig"`` refuses it. Where the reference
    cannot widen its canonical nodes for more physical nodes (too few samples), the layout is
    dealt unwidened.

    Without a resampling table the layout is also a :class:`SubPlan` (``layout="reference"``),
    so the planner (:mod:`astream.plan`) reads it in shard runs: ``reference`` is then False."""

    def __init__(
        self,
        table: I64 | None,
        n: int,
        batch_size: int,
        block_size: int,
        ncn: int,
        sizes: list[I64],
        *,
        partition_algo: str,
        sub: SubPlan | None,
    ) -> None:
        super().__init__(
            table, n, batch_size, block_size, ncn, sizes, partition_algo=partition_algo
        )
        self.reference = sub is None
        self._subs = [] if sub is None else [sub]

    def _layout_nodes(self, p: int) -> int:
        """The node count whose layout is dealt to ``p`` nodes: ``p`` when the reference widens
        its canonical nodes for them, else 1; also 1 where it cannot (too few samples per
        canonical node), a World the reference refuses and this plan deals unwidened."""
        ncn = self.num_canonical_nodes
        if p <= ncn:
            return 1
        width = refshuffle.canonical_layout(self._n, ncn, p)[0]
        try:
            refshuffle.canonical_index(self._n, ncn, p, np.array([ncn * width - 1]))
        except ValueError:
            return 1
        return p

    def _total(self, num_nodes: int) -> int:
        return super()._total(self._layout_nodes(num_nodes))

    def _check_world(self, world: World) -> None:
        EpochPlan._check_world(self, world)  # "orig" refuses such a World, "relaxed" deals it
        self._redealing = False
        self._nodes = self._layout_nodes(world.num_nodes)

    def _redeal(self, world: World) -> _RedealPlan | None:
        return None

    def locality_bound(self) -> int:
        if self._subs:
            return EpochPlan.locality_bound(self)
        return super().locality_bound()


class _ReferenceWorkPlan(EpochPlan):
    """The reference's ``stratified``, ``per_stream`` or ``device_per_stream`` batching under
    one of its algorithms: its whole work array (nodes, ranks, workers, batches, batch) for a
    World and resume position, built as 0.13.0 builds it (:func:`refshuffle.batching_work`),
    O(epoch) like the reference's, cached for the latest (World, start).

    Positions are those of the reference's global batch sequence on the World last dealt to
    (before it, one node of ``global_batch_size / batch_size`` ranks, or one rank): global batch
    ``j`` is positions ``[j * GB, (j + 1) * GB)``, rank by rank, node-major; a resume position
    drops the whole global batches before it, as the reference.
    """

    reference = True

    def __init__(
        self,
        method: str,
        streams: list[tuple[I64, I64]],
        proportions: NDArray[np.float64],
        args: dict[str, object],
        sizes: list[I64],
        global_batch_size: int | None,
    ) -> None:
        self._streams = streams
        self._props = proportions
        self._args = args
        self._shard_ends = np.cumsum(np.concatenate(sizes)).astype(np.int64)
        self.batch_size = bs = int(args["bs"])  # type: ignore[call-overload]
        self.block_size = int(args["block"])  # type: ignore[call-overload]
        self.num_canonical_nodes = int(args["ncn"])  # type: ignore[call-overload]
        self.partition_algo = str(args["partition_algo"])
        self.batching_method = method
        self._gbs = global_batch_size
        if global_batch_size is not None:
            check_positive_int("global_batch_size", global_batch_size)
        ranks = global_batch_size // bs if global_batch_size and global_batch_size % bs == 0 else 1
        self._world = World(1, ranks, 1)
        self._cache: dict[tuple[int, int, int, int], I64] = {}
        self._work(self._world, 0)  # the reference's errors (a stream too small...) up front

    def _work(self, world: World, start: int) -> I64:
        key = (world.num_nodes, world.ranks_per_node, world.workers_per_rank, start)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        try:
            work = refshuffle.batching_work(
                self.batching_method, self._streams, self._props,
                pn=world.num_nodes, rpn=world.ranks_per_node, workers=world.workers_per_rank,
                start=start, **self._args,  # type: ignore[arg-type]
            )  # fmt: skip
        except ValueError as exc:
            raise ConfigError(f"batching_method={self.batching_method!r}: {exc}") from None
        self._cache = {key: work}
        return work

    def _flat(self) -> I64:
        """The reference's global batch sequence (from the epoch's start) on the last World."""
        w = self._world
        work = self._work(World(w.num_nodes, w.ranks_per_node, 1), 0)
        flat: I64 = work.transpose(3, 2, 0, 1, 4).ravel()
        return flat

    @property
    def num_samples(self) -> int:  # type: ignore[override]
        """Positions up to the last global batch holding a sample (the reference's epoch)."""
        flat = self._flat()
        gbs = self.batch_size * self._world.num_ranks
        real = np.flatnonzero(flat >= 0)
        return 0 if not len(real) else (int(real[-1]) // gbs + 1) * gbs

    def ids_at(self, pos: I64) -> I64:
        flat = self._flat()
        pos = np.asarray(pos, np.int64)
        out: I64 = flat[pos % len(flat)] if len(flat) else np.full_like(pos, -1)
        return out

    def locality_bound(self) -> int:
        return len(self._shard_ends)

    def _deal(self, world: World, start: int) -> tuple[int, int]:
        check_positive_int("start", start, minimum=0)
        gbs = self.batch_size * world.num_ranks
        if self._gbs is not None and self._gbs != gbs:
            raise ConfigError(
                f"global_batch_size={self._gbs} differs from batch_size x ranks = {gbs}: the "
                f"reference's {self.batching_method!r} batching takes its global batch from "
                "the World"
            )
        self._world = world
        work = self._work(world, start)
        return world.num_ranks, int(work.shape[3])

    def _rank_rows(self, world: World, rank: int, start: int) -> tuple[I64, I64]:
        """(rows, their positions) of ``rank``'s batches in order, -1 kept."""
        self._deal(world, start)
        work = self._work(world, start)
        node, local = divmod(rank, world.ranks_per_node)
        w, b = world.workers_per_rank, work.shape[3]
        # batch j = b * W + w; the row width named (not -1): an epoch may have no batch at all
        rows = work[node, local].transpose(1, 0, 2).reshape(w * b, work.shape[4])
        gbs = self.batch_size * world.num_ranks
        j = np.arange(w * b, dtype=np.int64)
        base = (start // gbs + j) * gbs + rank * self.batch_size
        pos = base[:, None] + np.arange(self.batch_size, dtype=np.int64)[None, :]
        return rows, pos

    def rank_num_samples(self, world: World, global_rank: int, start: int = 0) -> int:
        world.check_rank(global_rank)
        rows, _ = self._rank_rows(world, global_rank, start)
        return int(np.count_nonzero(rows >= 0))

    def padded_num_samples(self, world: World, start: int = 0) -> int:
        self._deal(world, start)
        return int(np.count_nonzero(self._work(world, start) >= 0))

    def _rank_batches(self, world: World, start: int) -> int:
        rows, _ = self._rank_rows(world, 0, start)
        return len(rows)

    def rank_positions(self, world: World, global_rank: int, batch: int, start: int = 0) -> I64:
        world.check_rank(global_rank)
        rows, pos = self._rank_rows(world, global_rank, start)
        out: I64 = pos[batch][rows[batch] >= 0]
        return out

    def rank_positions_span(
        self, world: World, global_rank: int, j0: int, j1: int, start: int = 0
    ) -> I64:
        world.check_rank(global_rank)
        rows, pos = self._rank_rows(world, global_rank, start)
        lo, hi = max(0, j0), max(0, j1)
        out: I64 = pos[lo:hi][rows[lo:hi] >= 0]
        return out

    def worker_batches(
        self, world: World, global_rank: int, worker: int, start: int = 0
    ) -> Iterator[I64]:
        world.check_rank(global_rank)
        world.check_worker(worker)
        self._deal(world, start)
        node, local = divmod(global_rank, world.ranks_per_node)
        rows = self._work(world, start)[node, local, worker]

        def gen() -> Iterator[I64]:
            for row in rows:
                real = row[row >= 0]
                if len(real):
                    yield real

        return gen()


class _RedealPlan(_ReferenceWorkPlan):
    """The reference's "relaxed" re-deal: resuming on a World whose nodes and canonical nodes
    do not divide one another, it partitions for the initial node count with the per-device
    batch that keeps the global batch, and hands the global batches, in order, to the new
    World's ranks (:func:`refshuffle.partition`), mapped through the epoch's table."""

    def __init__(self, base: _ReferencePlan, initial: int) -> None:
        self._base = base
        self._initial = initial
        self._shard_ends = base._shard_ends
        self.batch_size = base.batch_size
        self.block_size = base.block_size
        self.num_canonical_nodes = base.num_canonical_nodes
        self.partition_algo = base.partition_algo
        self.batching_method = "random"
        self._gbs = None
        self._world = World(1, 1, 1)
        self._cache: dict[tuple[int, int, int, int], I64] = {}

    def _work(self, world: World, start: int) -> I64:
        key = (world.num_nodes, world.ranks_per_node, world.workers_per_rank, start)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        base = self._base
        try:
            idx = refshuffle.partition(
                "relaxed", base._n, self.num_canonical_nodes, world.num_nodes,
                world.ranks_per_node, world.workers_per_rank, self.batch_size, start,
                self._initial,
            )  # fmt: skip
        except ValueError as exc:
            raise ConfigError(f"partition_algo='relaxed': {exc}") from None
        table = base._table
        work = idx if table is None else np.where(idx >= 0, table[np.maximum(idx, 0)], -1)
        self._cache = {key: work.astype(np.int64, copy=False)}
        return self._cache[key]
