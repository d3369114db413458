"""Resolving a dataset's streams: ``streams``/``remote``/``local``/``split`` into stream
sources with loaded, revalidated indexes, and the :class:`StorePool` that will reach the
remotes (:func:`resolve_steps`, driven by :func:`resolve_sources` or :func:`aresolve_sources`).

``local=None`` maps a remote to a stable directory under ``$ASTREAM_CACHE_DIR`` (default
``~/.cache/astream``) named after a hash of the remote URL and split (:func:`default_local`),
so every run of the same job reuses the same cache.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Coroutine, Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from astream import bridge
from astream.core.index import Index
from astream.core.order import StreamSpec
from astream.core.stream import (
    MAX_DOWNLOAD_RETRY,
    MAX_DOWNLOAD_TIMEOUT,
    opt_hash,
    opt_int,
    opt_number,
    streams_registry,
)
from astream.errors import ConfigError
from astream.runtime.catalog import StreamSource
from astream.runtime.index_load import load_index, load_local_index
from astream.runtime.stores import StorePool
from astream.storage import RetryPolicy

if TYPE_CHECKING:
    from astream.runtime.config import DatasetConfig

__all__ = ["CpuStep", "aresolve_sources", "default_local", "resolve_sources", "resolve_steps"]


class CpuStep:
    """A step of a constructor's generator that computes without I/O to await: a blocking
    driver calls it in its own thread, an async one runs it in a worker thread so that the
    caller's loop stays free."""

    __slots__ = ("run",)

    def __init__(self, run: Callable[[], Any]) -> None:
        self.run = run


Resolved = tuple[list[StreamSpec], list[StreamSource], StorePool]
# what resolve_steps plans per stream before loading: (remote root or None, local directory)
Plan = tuple[str | None, str]
Settings = tuple[int, float, str | None, bool | None]


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
        steps.send(load.run() if isinstance(load, CpuStep) else bridge.run(load))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    steps.close()  # pragma: no cover
    raise AssertionError("resolve_steps yields once")  # pragma: no cover


async def aresolve_sources(*args: Any, **kwargs: Any) -> Resolved:
    """:func:`resolve_sources` with the index loads awaited on the running loop."""
    steps = resolve_steps(*args, **kwargs)
    load = next(steps)
    try:
        got = await asyncio.to_thread(load.run) if isinstance(load, CpuStep) else await load
        steps.send(got)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    steps.close()  # pragma: no cover
    raise AssertionError("resolve_steps yields once")  # pragma: no cover


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
) -> Generator[Coroutine[Any, Any, list[Index]] | CpuStep, list[Index], Resolved]:
    """Resolve and load every stream (fetching and revalidating remote indexes).

    A generator, so that one definition serves the blocking and the async constructor: it
    yields what loads the indexes once (the coroutine, or a :class:`CpuStep` when every
    stream is a local MDS directory), is sent its result, and returns
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
    items = _stream_items(streams, remote, local, split, stream_name, stream_config)
    default_policy = RetryPolicy(
        attempts=cfg.download_retry + 1, timeout=cfg.download_timeout, backoff_base=0.2
    )
    plans: list[Plan] = []
    pq_plans: list[dict[str, Any] | None] = []
    weights: list[tuple[Any, Any, Any]] = []
    settings: list[Settings] = []
    policies: dict[str, RetryPolicy] = {}
    for k, item in enumerate(items):
        plan, pq = _place(k, item, split)
        plans.append(plan)
        pq_plans.append(pq)
        weights.append((_given(item, "proportion"), _given(item, "repeat"), _given(item, "choose")))
        st = _stream_settings(k, item, cfg, keep_zip)
        settings.append(st)
        _add_policy(policies, k, plan[0], st)
    _check_weights(weights, cfg.epoch_size)
    pool = StorePool(default_policy, storage_options, policies=policies)

    if all(r is None for r, _ in plans) and all(pq is None for pq in pq_plans):
        # only local MDS indexes: plain file reads, so no loop (a blocking constructor then
        # never starts astream's loop thread for them)
        indexes = yield CpuStep(lambda: [load_local_index(lo) for _, lo in plans])
    else:
        indexes = yield _load_all(plans, pq_plans, pool)
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


def _stream_items(
    streams: Sequence[Any] | None,
    remote: str | None,
    local: str | None,
    split: str | None,
    stream_name: str,
    stream_config: dict[str, Any] | None,
) -> list[Any]:
    """The dataset's streams: ``streams`` as given, or the single one ``remote``/``local``
    make with the class registered as ``stream_name``."""
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
        return items
    if remote is None and local is None:
        raise ConfigError("StreamingDataset needs `remote`, `local` or `streams`")
    defaults = {
        "remote": None if remote is None else os.fspath(remote),
        "local": None if local is None else os.fspath(local),
        "split": split,
        "download_retry": None,
        "download_timeout": None,
        "validate_hash": None,
        "keep_zip": None,
    }
    return [_registry_stream(stream_name, stream_config, defaults)]


def _place(k: int, item: Any, split: str | None) -> tuple[Plan, dict[str, Any] | None]:
    """Where stream ``k`` is read: (remote root or None for local data, local directory), and
    its Parquet arguments (None for MDS)."""
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
        return (r, lo if r is None else _join(lo, sp)), pq
    return (None if r is None else _join(r, sp), _join(lo, sp)), pq


def _add_policy(policies: dict[str, RetryPolicy], k: int, root: str | None, st: Settings) -> None:
    """Stream ``k``'s retry policy for its remote; two streams of one remote must agree."""
    if root is None:
        return
    policy = RetryPolicy(attempts=st[0] + 1, timeout=st[1], backoff_base=0.2)
    if policies.get(root, policy) != policy:
        raise ConfigError(
            f"streams[{k}]: {root} is also another stream's remote, with other "
            "download_retry/download_timeout; give both streams the same"
        )
    policies[root] = policy


async def _load_all(
    plans: list[Plan], pq_plans: list[dict[str, Any] | None], pool: StorePool
) -> list[Index]:
    """Every stream's index, loaded (and revalidated) in order."""
    out = []
    for (r, lo), pq in zip(plans, pq_plans):
        if pq is not None:
            from astream.parquet.io_index import load_parquet

            store = pool.get(r if r is not None else lo)
            out.append(await load_parquet(store, lo, in_place=r is None, **pq))
            continue
        out.append(await load_index(None if r is None else pool.get(r), lo))
    return out
