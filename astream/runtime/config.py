"""Dataset arguments, checked once, with errors that name the argument.

:class:`DatasetConfig` holds the reference's ``StreamingDataset`` keyword arguments after
validation and normalisation (sizes parsed, defaults filled). :func:`resolve_sources` turns
``streams``/``remote``/``local``/``split`` into resolved stream sources with loaded, revalidated
indexes, and the :class:`StorePool` that will reach the remotes.

``local=None`` maps a remote to a stable directory under ``$ASTREAM_CACHE_DIR`` (default
``~/.cache/astream``) named after a hash of the remote URL and split, so every run of the same
job reuses the same cache (the reference picks a fresh temp dir and fails on reuse).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from astream.core.index import Index
from astream.core.order import DEFAULT_NUM_CANONICAL_NODES, StreamSpec
from astream.core.sizes import parse_size
from astream.core.world import check_positive_int
from astream.errors import ConfigError
from astream.runtime import bridge
from astream.runtime.catalog import StreamSource, load_index
from astream.runtime.stores import StorePool
from astream.storage import RetryPolicy

__all__ = ["DatasetConfig", "default_local", "resolve_sources"]

_PARTITION_ALGOS = ("relaxed", "orig")


def _int(name: str, value: Any, minimum: int) -> int:
    """``check_positive_int`` that also takes numpy integers (common in configs)."""
    if isinstance(value, np.integer):
        value = int(value)
    return check_positive_int(name, value, minimum=minimum)


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

    @classmethod
    def build(cls, **kw: Any) -> DatasetConfig:
        kw["download_retry"] = _int("download_retry", kw["download_retry"], 0)
        t = kw["download_timeout"]
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not t > 0:
            raise ConfigError(f"download_timeout must be a positive number of seconds, got {t!r}")
        kw["download_timeout"] = float(t)
        if kw["validate_hash"] is not None:
            from astream.core.hashing import validate_hash

            kw["validate_hash"] = validate_hash(kw["validate_hash"])
        if kw["epoch_size"] is not None:
            kw["epoch_size"] = parse_size(kw["epoch_size"], "epoch_size")
        if kw["cache_limit"] is not None:
            kw["cache_limit"] = parse_size(kw["cache_limit"], "cache_limit")
        for name in ("predownload", "shuffle_block_size", "batch_size", "replication"):
            if kw[name] is not None:
                kw[name] = _int(name, kw[name], 1)
        kw["sampling_granularity"] = _int("sampling_granularity", kw["sampling_granularity"], 1)
        if kw["num_canonical_nodes"] is None:
            kw["num_canonical_nodes"] = DEFAULT_NUM_CANONICAL_NODES
        kw["num_canonical_nodes"] = _int("num_canonical_nodes", kw["num_canonical_nodes"], 1)
        kw["shuffle_seed"] = _int("shuffle_seed", kw["shuffle_seed"], 0)
        if kw["partition_algo"] not in _PARTITION_ALGOS:
            raise ConfigError(
                f"partition_algo={kw['partition_algo']!r} is not supported: astream has one "
                f"elastic partition (accepted names: {', '.join(_PARTITION_ALGOS)})"
            )
        if not isinstance(kw["shuffle"], bool):
            raise ConfigError(f"shuffle must be True or False, got {kw['shuffle']!r}")
        return cls(**kw)

    def replace(self, **changes: Any) -> DatasetConfig:
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
        }


def default_local(remote: str, split: str | None) -> str:
    base = os.environ.get("ASTREAM_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "astream"
    )
    digest = hashlib.sha256(f"{remote}\0{split or ''}".encode()).hexdigest()[:20]
    return os.path.join(base, digest)


def _is_local_path(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _join(root: str, split: str | None) -> str:
    if not split:
        return root
    if split.startswith("/") or ".." in split.split("/"):
        raise ConfigError(f"split must be a relative name, got {split!r}")
    return root.rstrip("/") + "/" + split


def resolve_sources(
    streams: Sequence[Any] | None,
    remote: str | None,
    local: str | None,
    split: str | None,
    cfg: DatasetConfig,
    storage_options: dict[str, Any] | None,
) -> tuple[list[StreamSpec], list[StreamSource], StorePool]:
    """Resolve and load every stream (fetching and revalidating remote indexes)."""
    if streams is not None:
        if remote is not None or local is not None:
            raise ConfigError("give either `streams` or `remote`/`local`, not both")
        items = list(streams)
        if not items:
            raise ConfigError("streams must not be empty")
    else:
        if remote is None and local is None:
            raise ConfigError("StreamingDataset needs `remote`, `local` or `streams`")
        items = [None]
    policy = RetryPolicy(
        attempts=cfg.download_retry + 1, timeout=cfg.download_timeout, backoff_base=0.2
    )
    pool = StorePool(policy, storage_options)
    plans: list[tuple[str | None, str]] = []
    weights: list[tuple[Any, Any, Any]] = []
    for k, item in enumerate(items):
        r = remote if item is None else getattr(item, "remote", None)
        lo = local if item is None else getattr(item, "local", None)
        sp = split if item is None else (getattr(item, "split", None) or split)
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
        plans.append((None if r is None else _join(r, sp), _join(lo, sp)))
        if item is not None:
            weights.append(
                (
                    getattr(item, "proportion", None),
                    getattr(item, "repeat", None),
                    getattr(item, "choose", None),
                )
            )
        else:
            weights.append((None, None, None))

    async def load_all() -> list[Index]:
        out = []
        for r, lo in plans:
            out.append(await load_index(None if r is None else pool.get(r), lo))
        return out

    indexes = bridge.run(load_all())
    sources = [StreamSource(r, lo, idx) for (r, lo), idx in zip(plans, indexes)]
    specs = [
        StreamSpec(idx.sample_counts(), proportion=p, repeat=rep, choose=ch)
        for idx, (p, rep, ch) in zip(indexes, weights)
    ]
    return specs, sources, pool
