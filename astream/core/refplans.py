"""The reference's plans: mosaicml-streaming 0.13.0's order, padding and dealing, bit for bit.

``random`` batching: :class:`_ReferencePlan` (the reference's padded canonical layout, computed
per position, mapped through its shuffle and resampling; with ``initial_physical_nodes`` a
World that does not divide the canonical nodes gets the reference's "relaxed" re-deal,
:class:`_RedealPlan`); unshuffled under ``"astream"``, :class:`_UnshuffledPlan`.
``stratified``, ``per_stream``, ``device_per_stream``: :class:`_ReferenceWorkPlan`, the
reference's whole work array per World and resume position (:func:`refbatching.batching_work`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from astream.core import refbatching, refshuffle
from astream.core.dealing import I64, EpochPlan
from astream.core.mixing import Pieces, build_pieces
from astream.core.partition import SubPlan
from astream.core.world import World, check_positive_int
from astream.errors import ConfigError


class Weights(Protocol):
    """A stream's weight as the reference's proportions read it (``StreamSpec`` is one)."""

    @property
    def proportion(self) -> float | None: ...
    @property
    def repeat(self) -> float | None: ...
    @property
    def choose(self) -> int | None: ...


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
    streams: Sequence[Weights], sizes: list[I64], chosen: I64, epoch_size: int | None
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
    streams: Sequence[Weights],
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
        self._redealer._world = world  # ids_at reads this World's sequence from now on
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


def _rows_of(work: I64, world: World, rank: int) -> I64:
    """``rank``'s batches of a work array (nodes, ranks, workers, batches, batch) in the order
    it reads them: batch ``j`` is worker ``j % W``'s batch ``j // W``."""
    node, local = divmod(rank, world.ranks_per_node)
    w, b = world.workers_per_rank, work.shape[3]
    # the row width named (not -1): an epoch may have no batch at all
    rows: I64 = work[node, local].transpose(1, 0, 2).reshape(w * b, work.shape[4])
    return rows


class _ReferenceWorkPlan(EpochPlan):
    """The reference's ``stratified``, ``per_stream`` or ``device_per_stream`` batching under
    one of its algorithms: its whole work array (nodes, ranks, workers, batches, batch) for a
    World and resume position, built as 0.13.0 builds it (:func:`refbatching.batching_work`),
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
            work = refbatching.batching_work(
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
        rows = _rows_of(self._work(world, start), world, rank)
        return rows, self._row_positions(world, rank, start, len(rows))

    def _row_positions(self, world: World, rank: int, start: int, batches: int) -> I64:
        """Positions of ``rank``'s first ``batches`` batches: batch ``j`` resumed at ``start``
        is global batch ``start // GB + j``, as the reference drops whole global batches."""
        gbs = self.batch_size * world.num_ranks
        j = np.arange(batches, dtype=np.int64)
        base = (start // gbs + j) * gbs + rank * self.batch_size
        pos: I64 = base[:, None] + np.arange(self.batch_size, dtype=np.int64)[None, :]
        return pos

    def rank_num_samples(self, world: World, global_rank: int, start: int = 0) -> int:
        world.check_rank(global_rank)
        rows, _ = self._rank_rows(world, global_rank, start)
        return int(np.count_nonzero(rows >= 0))

    def padded_num_samples(self, world: World, start: int = 0) -> int:
        self._deal(world, start)
        return int(np.count_nonzero(self._work(world, start) >= 0))

    def _rank_batches(self, world: World, start: int) -> int:
        self._deal(world, start)
        work = self._work(world, start)
        return int(work.shape[2] * work.shape[3])  # every rank: workers x batches per worker

    def rank_positions(self, world: World, global_rank: int, batch: int, start: int = 0) -> I64:
        world.check_rank(global_rank)
        j = self._check_batch(world, batch, start)  # a negative one would index from the end
        rows, pos = self._rank_rows(world, global_rank, start)
        out: I64 = pos[j][rows[j] >= 0]
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
    World's ranks (:func:`refbatching.partition`), mapped through the epoch's table."""

    def __init__(self, base: _ReferencePlan, initial: int) -> None:
        # only what the inherited answers read: the base plan answers everything else
        self._base = base
        self._initial = initial
        self.batch_size = base.batch_size
        self.num_canonical_nodes = base.num_canonical_nodes
        self._gbs = None
        self._world: World  # the World last asked about: set by the base plan's _redeal
        self._cache: dict[tuple[int, int, int, int], I64] = {}
        self._label_cache: dict[tuple[int, int, int, int], I64] = {}

    def _work(self, world: World, start: int) -> I64:
        key = (world.num_nodes, world.ranks_per_node, world.workers_per_rank, start)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        base = self._base
        try:
            idx = refbatching.partition(
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

    def _row_positions(self, world: World, rank: int, start: int, batches: int) -> I64:
        """Positions of ``rank``'s batches in the re-deal's sequence from the epoch's start
        (what :meth:`ids_at` reads), padding included, -1 where the rank has no sample.

        The re-deal walks the initial World's partition in order (``P`` initial nodes, ``R``
        ranks each, initial per-rank batch ``b0 = GB / (P * R)``). From the start, canonical
        position ``q`` is node ``q % P``'s column ``c = q // P``, which is rank ``c % R``'s
        sample ``k = c // R``: global batch ``k // b0``, slot ``k % b0``, so its place is
        ``((k // b0 * P + q % P) * R + c % R) * b0 + k % b0``. A resume drops the first
        ``start // P`` columns of every node, which shifts ranks and batches; so each slot's
        ``q`` is read off a partition of an epoch of distinct labels (``ncn * width`` samples,
        where the canonical index is a bijection) dealt exactly as the real one, and placed by
        that formula. A padding slot names the ``q`` it repeats. Before the first dropped column
        the layout is the one from the start, and each slot is its own place, padding too.
        A filler's (-1) position means nothing: the callers drop it by its row."""
        if start < self._initial:
            return super()._row_positions(world, rank, start, batches)
        labels = _rows_of(self._labels(world, start), world, rank)[:batches]
        ncn = self.num_canonical_nodes
        width = refshuffle.canonical_layout(self._base._n, ncn, self._initial)[0]
        p, r = self._initial, world.ranks_per_node
        b0 = self.batch_size * world.num_ranks // (p * r)
        q = (labels % width) * ncn + labels // width  # canonical_index's inverse, n = ncn * width
        c = q // p
        k = c // r
        place: I64 = ((k // b0 * p + q % p) * r + c % r) * b0 + k % b0
        return place

    def _labels(self, world: World, start: int) -> I64:
        """The re-deal's partition for ``(world, start)`` over distinct labels (see
        :meth:`_row_positions`): the real one's shape, fillers and padding, cached as it is."""
        key = (world.num_nodes, world.ranks_per_node, world.workers_per_rank, start)
        hit = self._label_cache.get(key)
        if hit is not None:
            return hit
        ncn = self.num_canonical_nodes
        n = ncn * refshuffle.canonical_layout(self._base._n, ncn, self._initial)[0]
        labels = refbatching.partition(
            "relaxed", n, ncn, world.num_nodes, world.ranks_per_node, world.workers_per_rank,
            self.batch_size, start, self._initial,
        )  # fmt: skip
        self._label_cache = {key: labels}
        return labels
