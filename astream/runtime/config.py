"""Dataset arguments, checked once, with errors that name the argument.

:class:`DatasetConfig` holds the reference's ``StreamingDataset`` keyword arguments after
validation and normalisation (sizes parsed, defaults filled). :func:`resolve_sources`
(:mod:`astream.runtime.resolve`) turns ``streams``/``remote``/``local``/``split`` into resolved
stream sources with loaded, revalidated indexes, and the :class:`StorePool` that will reach the
remotes. :func:`check_dataset` does the checks that need the loaded indexes. Everything is
checked in the process that builds the dataset, so a bad argument never first surfaces inside
a DataLoader worker.

``local=None`` maps a remote to a stable directory under ``$ASTREAM_CACHE_DIR`` (default
``~/.cache/astream``) named after a hash of the remote URL and split, so every run of the same
job reuses the same cache (the reference picks a fresh temp dir and fails on reuse).

Meanings follow the reference: ``epoch_size`` counts *samples* (``"2b"`` is 2,000,000,000;
:func:`~astream.core.sizes.parse_count`), ``cache_limit`` is bytes (``"2gb"``); an
``epoch_size`` or ``cache_limit`` of 0 (or ``""``) means "not set", as in the reference.

Bounds (``ConfigError`` naming the argument and the bound, at construction):

======================  ===========================  ==========================================
argument                allowed                      why the bound
======================  ===========================  ==========================================
download_retry          0 .. 100                     each retry waits up to 5 s
download_timeout        (0, 604800] seconds          7 days; a finite per-request limit
epoch_size              0 .. 2**40 samples           and at most 2**22 planned pieces (below)
predownload             0 .. 2**22 samples           the lookahead holds that many planned ids
cache_limit             0 .. 2**63-1 bytes           int64 accounting
sampling_granularity    1 .. 2**40                   int64 arithmetic
num_canonical_nodes     1 .. 2**20                   per-node blocks of the plan
batch_size              1 .. 2**20                   a batch of ids is materialised at once
shuffle_seed            0 .. 2**63-1                 stored as int64 in checkpoints
shuffle_block_size      1 .. 2**40                   int64 arithmetic
replication             1 .. 2**20                   at most one rank group per rank
Stream.repeat           0 .. 2**20                   also bounded by the planned pieces
Stream.choose           0 .. 2**40 samples           as epoch_size
Stream.proportion       0 .. 2**53                   relative weights; raw sample or token
                                                     counts as weights stay far below it, and
                                                     a sum of weights stays exact and finite
pack_to                 1 .. 2**24 tokens            the longest context windows in use are
                                                     ~10M tokens; a packed sequence is three
                                                     int64 arrays (384 MiB each at the bound)
pack_pad_id             fits the token dtype         int64 when a transform makes the column
======================  ===========================  ==========================================

Writers and the CLI bound theirs where they are parsed: ``MDSWriter`` ``size_limit`` below
2**32 bytes (u32 offsets), ``max_workers`` 1..256 concurrent uploads, compression levels per
codec; ``astream convert --workers`` 1..1024 processes (more than the hardware threads of the
largest single machines).

Planned pieces: an epoch that repeats a stream ``r`` times over its ``S`` shards plans about
``S * ceil(r)`` pieces (~100 bytes each, per process); :func:`check_dataset` refuses more than
``MAX_PLAN_PIECES`` (2**22, ~400 MB) with the numbers, instead of a ``MemoryError`` later.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

# every dataset plans an epoch while it is constructed (check_dataset), and planning draws from
# numpy.random, which ``import numpy`` leaves unloaded: loading its extension modules here, with
# the module that builds datasets, rather than inside the first construction (where it was
# ~85% of a local dataset's construction time) is where the peers pay it too (at import)
import numpy.random

from astream.core.order import DEFAULT_NUM_CANONICAL_NODES, StreamSpec
from astream.core.sizes import parse_count, parse_size
from astream.core.stream import MAX_DOWNLOAD_RETRY, MAX_DOWNLOAD_TIMEOUT
from astream.core.world import check_positive_int
from astream.errors import ConfigError, EmptyDatasetError, FormatError, UnsafeEncodingError
from astream.runtime.placement import detect
from astream.runtime.resolve import _chosen, default_local, resolve_sources

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_EPOCH_SIZE",
    "MAX_NUM_CANONICAL_NODES",
    "MAX_PACK_TO",
    "MAX_PLAN_PIECES",
    "DatasetConfig",
    "check_dataset",
    "epoch_plan_kwargs",
    "default_local",
    "resolve_sources",
]

MAX_EPOCH_SIZE = 1 << 40
MAX_PREDOWNLOAD = 1 << 22
MAX_CACHE_LIMIT = (1 << 63) - 1
MAX_GRANULARITY = 1 << 40
MAX_NUM_CANONICAL_NODES = 1 << 20
MAX_BATCH_SIZE = 1 << 20
MAX_SHUFFLE_SEED = (1 << 63) - 1
MAX_SHUFFLE_BLOCK_SIZE = 1 << 40
MAX_REPLICATION = 1 << 20
MAX_PLAN_PIECES = 1 << 22
MAX_PACK_TO = 1 << 24  # tokens per packed sequence (see the table)


def _int(name: str, value: Any, minimum: int, maximum: int) -> int:
    """``check_positive_int`` that also takes numpy integers (common in configs), bounded."""
    if isinstance(value, np.integer):
        value = int(value)
    v = check_positive_int(name, value, minimum=minimum)
    if v > maximum:
        raise ConfigError(f"{name}={v} is above the supported maximum {maximum}")
    return v


def _check_order_options(kw: dict[str, Any]) -> None:
    from astream.core.order import check_options

    check_options(
        shuffle_algo=kw["shuffle_algo"],
        sampling_method=kw["sampling_method"],
        batching_method=kw["batching_method"],
        partition_algo=kw["partition_algo"],
    )


@dataclass(frozen=True)
class DatasetConfig:
    download_retry: int
    download_timeout: float
    validate_hash: str | None
    epoch_size: int | None
    predownload: int | None
    cache_limit: int | None
    sampling_method: str
    sampling_granularity: int
    partition_algo: str
    num_canonical_nodes: int
    batch_size: int | None
    shuffle: bool
    shuffle_algo: str
    shuffle_seed: int
    shuffle_block_size: int | None
    batching_method: str
    replication: int | None
    # a reference shuffle_algo resumed from a checkpoint: the node count the run started on
    # (the reference's "relaxed" partition re-deals that World's order on a World whose nodes
    # and canonical nodes do not divide one another); set by load_state_dict
    initial_physical_nodes: int | None = None

    @classmethod
    def build(cls, **kw: Any) -> DatasetConfig:
        kw["download_retry"] = _int("download_retry", kw["download_retry"], 0, MAX_DOWNLOAD_RETRY)
        t = kw["download_timeout"]
        if (
            isinstance(t, bool)
            or not isinstance(t, (int, float, np.number))
            or not 0 < float(t) <= MAX_DOWNLOAD_TIMEOUT
        ):
            raise ConfigError(
                f"download_timeout must be a number of seconds in (0, {MAX_DOWNLOAD_TIMEOUT:g}], "
                f"got {t!r}"
            )
        kw["download_timeout"] = float(t)
        if kw["validate_hash"] == "":
            kw["validate_hash"] = None  # the reference treats "" as no validation
        if kw["validate_hash"] is not None:
            from astream.core.hashing import validate_hash

            try:
                kw["validate_hash"] = validate_hash(kw["validate_hash"])
            except ConfigError as exc:
                raise ConfigError(f"validate_hash: {exc}") from None
        if kw["epoch_size"] is not None and kw["epoch_size"] != "":
            n = parse_count(kw["epoch_size"], "epoch_size")
            if n > MAX_EPOCH_SIZE:
                raise ConfigError(
                    f"epoch_size={n} samples is above the supported maximum {MAX_EPOCH_SIZE} "
                    "(2**40)"
                )
            kw["epoch_size"] = n or None  # 0 means the natural epoch, as in the reference
        else:
            kw["epoch_size"] = None
        if kw["cache_limit"] is not None and kw["cache_limit"] != "":
            limit = parse_size(kw["cache_limit"], "cache_limit")
            if limit < 0 or limit > MAX_CACHE_LIMIT:
                raise ConfigError(
                    f"cache_limit must be 0..{MAX_CACHE_LIMIT} bytes (0: no limit), got {limit}"
                )
            kw["cache_limit"] = limit or None  # 0 means no limit, as in the reference
        else:
            kw["cache_limit"] = None
        for name, low, high in (
            ("predownload", 0, MAX_PREDOWNLOAD),
            ("shuffle_block_size", 1, MAX_SHUFFLE_BLOCK_SIZE),
            ("batch_size", 1, MAX_BATCH_SIZE),
            ("replication", 1, MAX_REPLICATION),
        ):
            if kw[name] is not None:
                kw[name] = _int(name, kw[name], low, high)
        kw["sampling_granularity"] = _int(
            "sampling_granularity", kw["sampling_granularity"], 1, MAX_GRANULARITY
        )
        if kw["num_canonical_nodes"] is None:
            if kw["shuffle_algo"] != "astream":
                # the reference's default, from this (the initial) World: 64 x physical nodes
                # for py1s/py2s, the physical nodes otherwise; the checkpoint keeps it
                from astream.core.refshuffle import default_num_canonical_nodes

                nodes = detect(kw["replication"]).world.num_nodes
                kw["num_canonical_nodes"] = default_num_canonical_nodes(kw["shuffle_algo"], nodes)
            else:
                kw["num_canonical_nodes"] = DEFAULT_NUM_CANONICAL_NODES
        kw["num_canonical_nodes"] = _int(
            "num_canonical_nodes", kw["num_canonical_nodes"], 1, MAX_NUM_CANONICAL_NODES
        )
        kw["shuffle_seed"] = _int("shuffle_seed", kw["shuffle_seed"], 0, MAX_SHUFFLE_SEED)
        if not isinstance(kw["shuffle"], (bool, np.bool_)):
            raise ConfigError(f"shuffle must be True or False, got {kw['shuffle']!r}")
        kw["shuffle"] = bool(kw["shuffle"])
        _check_order_options(kw)
        return cls(**kw)

    def replace(self, **changes: Any) -> DatasetConfig:
        """A copy with ``changes``, checked as at construction (``ds.batch_size = n``, a
        checkpoint's ``num_canonical_nodes``/``shuffle_seed``)."""
        bounds = {
            "batch_size": (1, MAX_BATCH_SIZE),
            "num_canonical_nodes": (1, MAX_NUM_CANONICAL_NODES),
            "shuffle_seed": (0, MAX_SHUFFLE_SEED),
            "initial_physical_nodes": (1, MAX_NUM_CANONICAL_NODES),
        }
        for name, value in list(changes.items()):
            if name in bounds and value is not None:
                changes[name] = _int(name, value, *bounds[name])
        return dataclasses.replace(self, **changes)

    @property
    def batch_or_1(self) -> int:
        return self.batch_size or 1

    def plan_kwargs(self) -> dict[str, Any]:
        return {
            "seed": self.shuffle_seed,
            "num_canonical_nodes": self.num_canonical_nodes,
            "batch_size": self.batch_or_1,
            "shuffle": self.shuffle,
            "shuffle_algo": self.shuffle_algo,
            "shuffle_block_size": self.shuffle_block_size,
            "epoch_size": self.epoch_size,
            "sampling_method": self.sampling_method,
            "sampling_granularity": self.sampling_granularity,
            "batching_method": self.batching_method,
            "partition_algo": self.partition_algo,
            **(
                {"initial_physical_nodes": self.initial_physical_nodes}
                if self.initial_physical_nodes is not None and self.shuffle_algo != "astream"
                else {}
            ),
        }


def check_dataset(
    cfg: DatasetConfig,
    catalog: Any,
    specs: list[StreamSpec],
    allow_unsafe_types: bool,
) -> tuple[tuple[int, Any], Any]:
    """The checks that need the loaded indexes, made in the process that builds the dataset
    (so they never first surface inside a DataLoader worker): ``pkl`` columns without
    ``allow_unsafe_types``, a stream's ``validate_hash`` its shards do not list, weights that
    choose no sample, a plan too large to hold (``MAX_PLAN_PIECES``), and everything the epoch
    plan and its dealing to this World refuse (canonical nodes vs nodes, strata vs batch...).
    Returns epoch 0's plan with its key in the dataset's plan cache (:func:`_check_plan`)."""
    from astream.core.encodings import UNSAFE_ENCODINGS

    if not isinstance(allow_unsafe_types, (bool, np.bool_)):
        raise ConfigError(f"allow_unsafe_types must be True or False, got {allow_unsafe_types!r}")
    if not allow_unsafe_types:
        for k, src in enumerate(catalog.sources):
            for i, entry in src.index.table.configs():  # encodings: one per configuration
                for name, enc in zip(entry.column_names or [], entry.column_encodings or []):
                    if enc in UNSAFE_ENCODINGS:
                        raise UnsafeEncodingError(
                            f"stream {k}, shard {i}: column {name!r} contains an unsafe type: "
                            f"encoding {enc!r} (pickle can run code); pass "
                            "allow_unsafe_types=True to read it",
                            os.path.join(src.local, "index.json"),
                        )
    for k, src in enumerate(catalog.sources):
        algo = getattr(src, "validate_hash", None)
        for i, entry in src.index.table.configs() if algo is not None else []:
            if algo not in entry.hashes:
                raise FormatError(
                    f"stream {k} validates shards with {algo!r}, but shard {i} lists only "
                    f"hashes {sorted(entry.hashes)}; choose one of those",
                    src.remote or src.local,
                )
    sizes, chosen = _chosen(specs, cfg)
    if int(chosen.sum()) == 0:
        raise EmptyDatasetError(
            f"the stream weights choose no sample at all per epoch (per stream: "
            f"{chosen.tolist()} of {sizes})"
        )
    if int(chosen.sum()) > MAX_EPOCH_SIZE:
        raise ConfigError(
            f"the stream weights choose {int(chosen.sum())} samples per epoch, above the "
            f"supported maximum {MAX_EPOCH_SIZE} (2**40)"
        )
    pieces = 0
    for spec, n, c in zip(specs, sizes, chosen.tolist()):
        if n:
            pieces += int(np.count_nonzero(spec.shard_sizes)) * -(-c // n)
    if pieces > MAX_PLAN_PIECES:
        repeats = [round(c / n, 3) if n else 0 for n, c in zip(sizes, chosen.tolist())]
        raise ConfigError(
            f"the epoch would repeat streams {repeats} "
            f"times over their shards: about {pieces} planned pieces (~100 bytes each, per "
            f"process), above the supported maximum {MAX_PLAN_PIECES} (2**22); lower "
            "epoch_size or the streams' repeat/choose"
        )
    return _check_plan(cfg, specs)


def epoch_plan_kwargs(cfg: DatasetConfig, num_ranks: int) -> dict[str, Any]:
    """``plan_epoch``'s keyword arguments for this dataset on ``num_ranks`` (replica) ranks:
    under ``stratified`` and ``per_stream`` batching the unit is the global batch (every one
    holds the exact stream proportions, or comes from one stream), so it depends on them."""
    kwargs = cfg.plan_kwargs()
    if cfg.batching_method in ("stratified", "per_stream"):
        kwargs["global_batch_size"] = cfg.batch_or_1 * num_ranks
    return kwargs


def _check_plan(cfg: DatasetConfig, specs: list[StreamSpec]) -> tuple[tuple[int, Any], Any]:
    """Build epoch 0's plan and deal it to this process's World: whatever they refuse is
    refused now, with the same ConfigError a first ``len()`` would raise. Returns the plan
    (None if planning warned) with its key in the dataset's plan cache
    (``_EpochPlans.plan``), so that the first epoch does not plan again."""
    from astream.core.order import plan_epoch

    place = detect(cfg.replication)
    kwargs = epoch_plan_kwargs(cfg, place.world.num_ranks)
    with warnings.catch_warnings(record=True) as said:
        plan = plan_epoch(specs, epoch=0, **kwargs)
    for w in said:  # said where planning said it, as if not caught
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)
    key = (0, kwargs.get("global_batch_size"))
    # a plan that warns (few samples over the canonical nodes) warns again each time an epoch
    # is planned, as the reference's does: not kept
    kept = None if said else plan
    ncn, nodes = cfg.num_canonical_nodes, place.world.num_nodes
    if cfg.shuffle_algo != "astream" and ncn % nodes and nodes % ncn:
        # a reference algorithm on such a World deals only a checkpoint's re-deal (the
        # reference's "relaxed" partition): load_state_dict may still come; iterating checks
        return key, kept
    plan.rank_num_samples(place.world, place.rank, 0)
    return key, kept
