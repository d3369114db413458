"""Dataset arguments, checked once, with errors that name the argument.

:class:`DatasetConfig` holds the reference's ``StreamingDataset`` keyword arguments after
validation and normalisation (sizes parsed, defaults filled). :func:`resolve_sources` turns
``streams``/``remote``/``local``/``split`` into resolved stream sources with loaded, revalidated
indexes, and the :class:`StorePool` that will reach the remotes. :func:`check_dataset` does the
checks that need the loaded indexes. Everything is checked in the process that builds the
dataset, so a bad argument never first surfaces inside a DataLoader worker.

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
import hashlib
import os
from collections.abc import Coroutine, Generator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# every dataset plans an epoch while it is constructed (check_dataset), and planning draws from
# numpy.random, which ``import numpy`` leaves unloaded: loading its extension modules here, with
# the module that builds datasets, rather than inside the first construction (where it was
# ~85% of a local dataset's construction time) is where the peers pay it too (at import)
import numpy.random

from astream import bridge
from astream.core.index import Index
from astream.core.order import DEFAULT_NUM_CANONICAL_NODES, StreamSpec
from astream.core.sizes import parse_count, parse_size
from astream.core.stream import (
    MAX_DOWNLOAD_RETRY,
    MAX_DOWNLOAD_TIMEOUT,
    opt_hash,
    opt_int,
    opt_number,
    streams_registry,
)
from astream.core.world import check_positive_int
from astream.errors import ConfigError, EmptyDatasetError, FormatError, UnsafeEncodingError
from astream.runtime.catalog import StreamSource
from astream.runtime.index_load import load_index
from astream.runtime.placement import detect
from astream.runtime.stores import StorePool
from astream.storage import RetryPolicy

__all__ = [
    "MAX_BATCH_SIZE",
    "MAX_EPOCH_SIZE",
    "MAX_NUM_CANONICAL_NODES",
    "MAX_PACK_TO",
    "MAX_PLAN_PIECES",
    "DatasetConfig",
    "check_dataset",
    "default_local",
    "resolve_sources",
]

Resolved = tuple[list[StreamSpec], list[StreamSource], StorePool]

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


def default_local(remote: str, split: str | None) -> str:
    base = os.environ.get("ASTREAM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "astream"
    )
    digest = hashlib.sha256(f"{remote}\0{split or ''}".encode()).hexdigest()[:20]
    return os.path.join(base, digest)


def _is_local_path(url: str) -> bool:
    if url[:6].lower() == "dbfs:/":  # Databricks spells its paths dbfs:/Volumes/..., one slash
        return False
    return "://" not in url or url.startswith("file://")


def _join(root: str, split: str | None) -> str:
    if not split:
        return root
    if split.startswith("/") or ".." in split.split("/"):
        raise ConfigError(f"split must be a relative name, got {split!r}")
    return root.rstrip("/") + "/" + split


def _given(item: Any, name: str) -> Any:
    """The value ``item`` was given for ``name`` (``Stream`` keeps it in ``_name`` once a
    dataset has resolved the public attribute)."""
    if hasattr(item, f"_{name}"):
        return getattr(item, f"_{name}")
    return getattr(item, name, None)


_DATASET_STREAM_KEYS = (
    "remote",
    "local",
    "split",
    "download_retry",
    "download_timeout",
    "validate_hash",
    "keep_zip",
)


def _registry_stream(
    stream_name: str,
    stream_config: dict[str, Any] | None,
    defaults: dict[str, Any],
) -> Any:
    """The single stream of ``remote``/``local``, built by the class registered as
    ``stream_name`` with ``stream_config`` plus the dataset's own arguments."""
    if stream_config is not None and not isinstance(stream_config, dict):
        raise ConfigError(f"stream_config must be a dict, got {type(stream_config).__name__}")
    config = dict(stream_config or {})
    clash = sorted(set(config) & set(_DATASET_STREAM_KEYS))
    if clash:
        raise ConfigError(
            f"stream_config sets {clash}, which StreamingDataset's own arguments of the same "
            "name set; pass them to StreamingDataset"
        )
    cls = streams_registry.get(stream_name)
    config.update(defaults)
    try:
        return cls(**config)
    except TypeError as exc:
        raise ConfigError(f"stream_name={stream_name!r}: cannot build it: {exc}") from None


def _stream_settings(
    k: int, item: Any, cfg: DatasetConfig, keep_zip: bool | None
) -> tuple[int, float, str | None, bool | None]:
    """(download_retry, download_timeout, validate_hash, keep_zip) in force for stream ``k``:
    its own where given, else the dataset's; checked like ``Stream``'s arguments."""
    try:
        retry = opt_int("download_retry", _given(item, "download_retry"), MAX_DOWNLOAD_RETRY)
        timeout = opt_number(
            "download_timeout",
            _given(item, "download_timeout"),
            positive=True,
            maximum=MAX_DOWNLOAD_TIMEOUT,
        )
        algo = opt_hash(_given(item, "validate_hash"))
        kz = _given(item, "keep_zip")
        if kz is not None and not isinstance(kz, (bool, np.bool_)):
            raise ConfigError(f"keep_zip must be a bool or None, got {type(kz).__name__}")
    except ConfigError as exc:
        raise ConfigError(f"streams[{k}].{exc}") from None
    return (
        cfg.download_retry if retry is None else retry,
        cfg.download_timeout if timeout is None else timeout,
        algo or cfg.validate_hash,
        keep_zip if kz is None else bool(kz),
    )


def _check_weights(weights: list[tuple[Any, Any, Any]], epoch_size: int | None) -> None:
    """The weighting checks the reference makes before loading any index."""
    relative = [p is not None for p, _, _ in weights]
    if any(relative) and not all(relative):
        bad = relative.index(not relative[0])
        raise ConfigError(
            f"streams[{bad}]: relative (proportion) and absolute (repeat, choose, none) stream "
            "weights cannot be mixed"
        )
    absolute = any(r is not None or c is not None for _, r, c in weights)
    if epoch_size is not None and absolute:
        raise ConfigError(
            f"epoch_size={epoch_size} needs relative (proportion) stream weights or none; "
            "these streams use repeat/choose, which fix the epoch size themselves"
        )


def resolve_sources(*args: Any, **kwargs: Any) -> Resolved:
    """Resolve and load every stream, the index loads on astream's loop thread (blocking);
    see :func:`resolve_steps` for the arguments."""
    steps = resolve_steps(*args, **kwargs)
    load = next(steps)
    try:
        again = steps.send(bridge.run(load))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    again.close()  # pragma: no cover
    raise AssertionError("resolve_steps yields once")  # pragma: no cover


async def aresolve_sources(*args: Any, **kwargs: Any) -> Resolved:
    """:func:`resolve_sources` with the index loads awaited on the running loop."""
    steps = resolve_steps(*args, **kwargs)
    load = next(steps)
    try:
        again = steps.send(await load)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    again.close()  # pragma: no cover
    raise AssertionError("resolve_steps yields once")  # pragma: no cover


def resolve_steps(
    streams: Sequence[Any] | None,
    remote: str | None,
    local: str | None,
    split: str | None,
    cfg: DatasetConfig,
    storage_options: dict[str, Any] | None,
    *,
    keep_zip: bool | None = None,
    stream_name: str = "stream",
    stream_config: dict[str, Any] | None = None,
    streams_out: list[Any] | None = None,
) -> Generator[Coroutine[Any, Any, list[Index]], list[Index], Resolved]:
    """Resolve and load every stream (fetching and revalidating remote indexes).

    A generator, so that one definition serves the blocking and the async constructor: it
    yields the coroutine that loads the indexes once, is sent its result, and returns
    ``(specs, sources, stores)`` (drivers: :func:`resolve_sources`, :func:`aresolve_sources`).
    ``streams_out`` receives the resolved ``Stream`` objects (the one that ``remote``/``local``
    make too).

    Each ``Stream``'s own ``download_retry``/``download_timeout``/``validate_hash``/``keep_zip``
    override the dataset's for that stream (its :class:`StreamSource` and its store's retry
    policy). ``keep_zip`` is the dataset's (``None``: leave it to the fetcher's default).
    After loading, each ``Stream`` gets its resolved weights and settings (see astream.stream).
    """
    if keep_zip is not None and not isinstance(keep_zip, (bool, np.bool_)):
        raise ConfigError(f"keep_zip must be True or False, got {keep_zip!r}")
    if streams is not None:
        if remote is not None or local is not None:
            raise ConfigError("give either `streams` or `remote`/`local`, not both")
        items = list(streams)
        if not items:
            raise ConfigError("streams must not be empty")
        if stream_name != "stream" or stream_config:
            raise ConfigError(
                "stream_name/stream_config build the single stream of `remote`/`local`; with "
                "`streams`, construct each stream yourself"
            )
    else:
        if remote is None and local is None:
            raise ConfigError("StreamingDataset needs `remote`, `local` or `streams`")
        items = [
            _registry_stream(
                stream_name,
                stream_config,
                {
                    "remote": None if remote is None else os.fspath(remote),
                    "local": None if local is None else os.fspath(local),
                    "split": split,
                    "download_retry": None,
                    "download_timeout": None,
                    "validate_hash": None,
                    "keep_zip": None,
                },
            )
        ]
    default_policy = RetryPolicy(
        attempts=cfg.download_retry + 1, timeout=cfg.download_timeout, backoff_base=0.2
    )
    plans: list[tuple[str | None, str]] = []
    pq_plans: list[dict[str, Any] | None] = []
    weights: list[tuple[Any, Any, Any]] = []
    settings: list[tuple[int, float, str | None, bool | None]] = []
    policies: dict[str, RetryPolicy] = {}
    for k, item in enumerate(items):
        r = getattr(item, "remote", None)
        lo = getattr(item, "local", None)
        sp = getattr(item, "split", None) or split
        if r is not None and not isinstance(r, str):
            r = os.fspath(r)
        if lo is not None:
            lo = os.fspath(lo)
        if r is None and lo is None:
            raise ConfigError(f"streams[{k}]: needs `remote` or `local`")
        if r is not None and lo is None and _is_local_path(r):
            lo = r.removeprefix("file://")  # a local dataset is read in place
            r = None
        if lo is None:
            assert r is not None
            lo = default_local(r, sp)
        elif (
            r is not None
            and _is_local_path(r)
            and os.path.abspath(r.removeprefix("file://")) == os.path.abspath(lo)
        ):
            r = None
        pq = _parquet_plan(item, sp)
        if pq is not None:  # a Parquet table: split selects files, it is no sub-directory
            root = r
            plans.append((root, lo if r is None else _join(lo, sp)))
        else:
            root = None if r is None else _join(r, sp)
            plans.append((root, _join(lo, sp)))
        pq_plans.append(pq)
        weights.append((_given(item, "proportion"), _given(item, "repeat"), _given(item, "choose")))
        st = _stream_settings(k, item, cfg, keep_zip)
        settings.append(st)
        if root is not None:
            policy = RetryPolicy(attempts=st[0] + 1, timeout=st[1], backoff_base=0.2)
            if policies.get(root, policy) != policy:
                raise ConfigError(
                    f"streams[{k}]: {root} is also another stream's remote, with other "
                    "download_retry/download_timeout; give both streams the same"
                )
            policies[root] = policy
    _check_weights(weights, cfg.epoch_size)
    pool = StorePool(default_policy, storage_options, policies=policies)

    async def load_all() -> list[Index]:
        out = []
        for (r, lo), pq in zip(plans, pq_plans):
            if pq is not None:
                from astream.parquet.io_index import load_parquet

                store = pool.get(r if r is not None else lo)
                out.append(await load_parquet(store, lo, in_place=r is None, **pq))
                continue
            out.append(await load_index(None if r is None else pool.get(r), lo))
        return out

    indexes = yield load_all()
    sources = [
        StreamSource(
            r,
            lo,
            idx,
            download_retry=st[0],
            download_timeout=st[1],
            validate_hash=st[2],
            keep_zip=st[3],
        )
        for (r, lo), idx, st in zip(plans, indexes, settings)
    ]
    specs = [
        StreamSpec(idx.sample_counts(), proportion=p, repeat=rep, choose=ch)
        for idx, (p, rep, ch) in zip(indexes, weights)
    ]
    _resolve_streams(items, specs, sources, cfg)
    if streams_out is not None:
        streams_out.extend(items)
    return specs, sources, pool


def _parquet_plan(item: Any, split: str | None) -> dict[str, Any] | None:
    """``load_parquet``'s arguments for a ``format="parquet"`` stream; None for MDS."""
    fmt = getattr(item, "format", "mds")
    if fmt == "mds":
        return None
    if fmt != "parquet":
        raise ConfigError(f"format must be 'mds' or 'parquet', got {fmt!r}")
    if split and (split.startswith("/") or ".." in split.split("/")):
        raise ConfigError(f"split must be a relative name, got {split!r}")
    return {
        "columns": getattr(item, "columns", None),
        "files": getattr(item, "files", None),
        "published": getattr(item, "index_source", None) == "published",
        "split": split or None,
    }


def _resolve_streams(
    items: list[Any], specs: list[StreamSpec], sources: list[StreamSource], cfg: DatasetConfig
) -> None:
    """Set each Stream's public weights and settings to what the dataset resolved, as the
    reference's ``Stream.apply_weights``/``apply_default`` do: ``proportion`` (float, share of
    the epoch; the normalised given proportions when relative), ``repeat`` (float, chosen /
    stream samples), ``choose`` (int, samples per epoch)."""

    sizes, chosen = _chosen(specs, cfg)
    total = int(chosen.sum())
    if specs[0].proportion is not None:
        props = np.array([s.proportion for s in specs], np.float64)
        shares = props / props.sum()
    elif cfg.epoch_size is not None:
        shares = np.array(sizes, np.float64) / max(1, sum(sizes))
    else:
        shares = chosen / max(1, total)
    for item, n, c, share, src in zip(items, sizes, chosen.tolist(), shares.tolist(), sources):
        values = {
            "proportion": float(share),
            "repeat": float(c / n) if n else float("nan"),
            "choose": int(c),
            "download_retry": src.download_retry,
            "download_timeout": src.download_timeout,
            "validate_hash": src.validate_hash,
        }
        if src.keep_zip is not None:
            values["keep_zip"] = src.keep_zip
        for name, value in values.items():
            try:
                setattr(item, name, value)
            except AttributeError:
                pass  # a read-only attribute of a user's stream class


def _chosen(specs: list[StreamSpec], cfg: DatasetConfig) -> tuple[list[int], Any]:
    """Samples per stream, and how many of them one epoch chooses."""
    from astream.core.mixing import choose_per_stream

    sizes = [int(s.shard_sizes.sum()) for s in specs]
    chosen = choose_per_stream(
        sizes,
        [s.proportion for s in specs],
        [s.repeat for s in specs],
        [s.choose for s in specs],
        cfg.epoch_size,
        reference_seed=None if cfg.shuffle_algo == "astream" else cfg.shuffle_seed,
    )
    return sizes, chosen


def check_dataset(
    cfg: DatasetConfig,
    catalog: Any,
    specs: list[StreamSpec],
    allow_unsafe_types: bool,
) -> None:
    """The checks that need the loaded indexes, made in the process that builds the dataset
    (so they never first surface inside a DataLoader worker): ``pkl`` columns without
    ``allow_unsafe_types``, a stream's ``validate_hash`` its shards do not list, weights that
    choose no sample, a plan too large to hold (``MAX_PLAN_PIECES``), and everything the epoch
    plan and its dealing to this World refuse (canonical nodes vs nodes, strata vs batch...)."""
    from astream.core.encodings import UNSAFE_ENCODINGS

    if not isinstance(allow_unsafe_types, (bool, np.bool_)):
        raise ConfigError(f"allow_unsafe_types must be True or False, got {allow_unsafe_types!r}")
    if not allow_unsafe_types:
        for k, src in enumerate(catalog.sources):
            for i, entry in src.index.table.configs():  # encodings: one per configuration
                for name, enc in zip(entry.column_names or [], entry.column_encodings or []):
                    if enc in UNSAFE_ENCODINGS:
                        raise UnsafeEncodingError(
                            f"stream {k}, shard {i}: column {name!r} has unsafe encoding "
                            f"{enc!r} (pickle can run code); pass allow_unsafe_types=True to "
                            "read it",
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
    _check_plan(cfg, specs)


def _check_plan(cfg: DatasetConfig, specs: list[StreamSpec]) -> None:
    """Build epoch 0's plan and deal it to this process's World: whatever they refuse is
    refused now, with the same ConfigError a first ``len()`` would raise."""
    from astream.core.order import plan_epoch

    place = detect(cfg.replication)
    kwargs = cfg.plan_kwargs()
    if cfg.batching_method in ("stratified", "per_stream"):  # as StreamingDataset.plan
        kwargs["global_batch_size"] = cfg.batch_or_1 * place.world.num_ranks
    plan = plan_epoch(specs, epoch=0, **kwargs)
    ncn, nodes = cfg.num_canonical_nodes, place.world.num_nodes
    if cfg.shuffle_algo != "astream" and ncn % nodes and nodes % ncn:
        # a reference algorithm on such a World deals only a checkpoint's re-deal (the
        # reference's "relaxed" partition): load_state_dict may still come; iterating checks
        return
    plan.rank_num_samples(place.world, place.rank, 0)
