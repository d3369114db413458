"""The reference's attribute names on ``StreamingCore``: read-only views of the settings as
the dataset resolved them (:class:`_Setting`), the catalog's per-shard and per-stream arrays,
and the shard-by-shard cache methods (``prepare_shard``, ``evict_shard``...)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from astream.errors import ConfigError, SettingError
from astream.runtime.catalog import Catalog
from astream.runtime.config import DatasetConfig
from astream.runtime.engine import Engine
from astream.runtime.stats import Stats


class _Setting:
    """One of the reference's attribute names for a setting (``ds.shuffle_seed``...): reading
    it gives the value this dataset uses, resolved as the reference resolves it. The reference
    re-reads these attributes at each iteration, so a script may assign one; astream fixes them
    when the dataset is built (every process plans from the same settings), so assigning
    another value is a :class:`~astream.errors.SettingError` instead of being ignored.
    Assigning the value it already has is allowed; so is any assignment before
    ``StreamingCore.__init__`` runs (a subclass's ``self.shuffle = shuffle``), checked against
    the built dataset when ``__init__`` ends."""

    def __init__(self, read: Callable[[Any], Any], doc: str, loaded: bool = False) -> None:
        self.read = read
        self.__doc__ = doc
        self.loaded = loaded  # a checkpoint given to load_state_dict replaces it
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return self.read(obj)

    def __set__(self, obj: Any, value: Any) -> None:
        if "cfg" not in obj.__dict__:  # before __init__ built the dataset: checked at its end
            obj.__dict__.setdefault("_presets", {})[self.name] = value
            return
        _check_setting(obj, self.name, value, "")

    def __delete__(self, obj: Any) -> None:
        raise SettingError(f"{type(obj).__name__}.{self.name} cannot be deleted")


def _check_setting(obj: Any, name: str, value: Any, when: str) -> None:
    from astream.core.sizes import parse_size

    setting: _Setting = getattr(type(obj), name)
    current = setting.read(obj)
    given = value
    if name == "cache_limit" and isinstance(value, str) and value:
        given = parse_size(value, "cache_limit")
    try:
        same = (given is None) == (current is None) and bool(given == current)
    except (TypeError, ValueError):  # a value that does not compare to a setting (an array)
        same = False
    if same:
        return
    how = (
        f"pass {name}= to {type(obj).__name__}(...)"
        + (" (or load a checkpoint holding it: its value wins, as in the reference)")
        * setting.loaded
    )
    raise SettingError(
        f"{type(obj).__name__}.{name} = {value!r}{when}: the dataset was built with "
        f"{name}={current!r}, and astream fixes it when the dataset is built (every process "
        f"plans from it); {how}"
    )


class _ReferenceAttributes:
    """The part of ``StreamingCore`` that answers the reference's attribute names."""

    # set by StreamingCore._build
    cfg: DatasetConfig
    catalog: Catalog
    engine: Engine
    streams: list[Any]
    stream_specs: list[Any]
    _plans: dict[tuple[int, int | None], Any]
    __len__: Callable[[], int]

    # -- properties the reference exposes -----------------------------------------------------
    @property
    def batch_size(self) -> int | None:
        return self.cfg.batch_size

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
        self._set_batch_size(value)

    def _set_batch_size(self, value: int | None) -> None:
        """Plan with per-device batches of ``value`` from now on."""
        self.cfg = self.cfg.replace(batch_size=value)
        self._plans.clear()

    @property
    def num_samples(self) -> int:
        """Samples in the underlying data (all streams, before mixing)."""
        return self.catalog.num_samples

    @property
    def size(self) -> int:
        """The reference's name for :attr:`num_samples`."""
        return self.catalog.num_samples

    @property
    def num_streams(self) -> int:
        return len(self.streams)

    @property
    def num_shards(self) -> int:
        return len(self.catalog.shards)

    @property
    def shards(self) -> Sequence[Any]:
        return self.catalog.entries

    @property
    def stats(self) -> Stats:
        """Counters of this process (bytes fetched, hits, misses, waits...)."""
        return self.engine.stats

    @property
    def cache_usage(self) -> int:
        """Bytes under the local directories now (what ``cache_limit`` bounds); an ``int``
        attribute, as the reference's."""
        return int(self.engine.space.usage())

    # -- the reference's other attributes: settings as this dataset resolved them -------------
    shuffle = _Setting(lambda ds: ds.cfg.shuffle, "Whether samples are shuffled.")
    shuffle_algo = _Setting(lambda ds: ds.cfg.shuffle_algo, "The shuffle algorithm.")
    shuffle_seed = _Setting(
        lambda ds: ds.cfg.shuffle_seed,
        "The shuffle seed (the one of a checkpoint given to ``load_state_dict``).",
        loaded=True,
    )
    num_canonical_nodes = _Setting(
        lambda ds: ds.cfg.num_canonical_nodes,
        "Canonical nodes, resolved: left unset, the reference's default for a reference "
        "algorithm (which the reference fills in at its first iteration), 1 for ``astream``; "
        "a checkpoint's given to ``load_state_dict``.",
        loaded=True,
    )
    shuffle_block_size = _Setting(
        lambda ds: ds._block_size(),
        "Samples per shuffle block, resolved: left unset, the reference's default "
        "``max(4_000_000 // num_canonical_nodes, 2**18)`` for a reference algorithm, 4 median "
        "shards' worth for ``astream`` (docs/order.md).",
    )
    partition_algo = _Setting(lambda ds: ds.cfg.partition_algo, "The partition algorithm.")
    sampling_method = _Setting(lambda ds: ds.cfg.sampling_method, "``balanced`` or ``fixed``.")
    sampling_granularity = _Setting(
        lambda ds: ds.cfg.sampling_granularity, "Samples drawn per shard at a time."
    )
    batching_method = _Setting(lambda ds: ds.cfg.batching_method, "How batches are dealt.")
    replication = _Setting(
        lambda ds: ds.cfg.replication,
        "Consecutive ranks that get the same samples (tensor or sequence parallelism), or None.",
    )
    cache_limit = _Setting(
        lambda ds: ds.cfg.cache_limit, "The cache bound in bytes (a size string parsed), or None."
    )
    allow_unsafe_types = _Setting(
        lambda ds: ds.engine.allow_unsafe_types, "Whether ``pkl`` columns may be decoded."
    )
    predownload = _Setting(
        lambda ds: ds.engine.ahead,
        "Samples planned ahead of the consumer: the argument, or left unset 8 x "
        "``batch_size`` (8 without one) or an average shard's samples if more; the "
        "reference's default is 8 x ``batch_size`` (64 without one).",
    )

    @property
    def epoch_seed_change(self) -> bool:
        """Whether each epoch draws its resampling anew (the reference's: shuffled and
        ``balanced``)."""
        return bool(self.cfg.shuffle and self.cfg.sampling_method == "balanced")

    @property
    def initial_physical_nodes(self) -> int | None:
        """The physical nodes of the run a loaded checkpoint came from; None until one is
        loaded (``state_dict`` then writes the nodes of this run)."""
        return self.cfg.initial_physical_nodes

    @property
    def length(self) -> int:
        """The reference's attribute for :meth:`__len__`."""
        return len(self)

    @property
    def samples_per_shard(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Samples in each shard, all streams' shards in order (int64)."""
        return np.concatenate(self.catalog.stream_sizes).astype(np.int64)

    @property
    def sample_offset_per_shard(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The global index of each shard's first sample (int64)."""
        return self.catalog.starts[:-1].copy()

    @property
    def stream_per_shard(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The stream of each shard (int64)."""
        return self.catalog.shard_stream.astype(np.int64)

    @property
    def shards_per_stream(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Shards in each stream (int64)."""
        return np.diff(self.catalog.shard_first)

    @property
    def shard_offset_per_stream(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The global index of each stream's first shard (int64)."""
        return self.catalog.shard_first[:-1].copy()

    @property
    def samples_per_stream(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Samples in each stream, before any weighting (int64)."""
        return np.array([int(sizes.sum()) for sizes in self.catalog.stream_sizes], np.int64)

    @property
    def sample_offset_per_stream(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The global index of each stream's first sample (int64)."""
        return np.array(self.catalog.stream_starts[:-1], np.int64)

    def _block_size(self) -> int:
        cfg = self.cfg
        if cfg.shuffle_block_size is not None:
            return int(cfg.shuffle_block_size)
        if cfg.shuffle_algo != "astream":
            from astream.core import refshuffle

            return refshuffle.default_block_size(cfg.num_canonical_nodes)
        from astream.core.order import default_block_size

        return default_block_size([spec.shard_sizes for spec in self.stream_specs])

    def _check_presets(self) -> None:
        """Settings a subclass assigned before ``__init__`` built the dataset (``_Setting``)."""
        for name, value in self.__dict__.pop("_presets", {}).items():
            _check_setting(self, name, value, " (assigned before __init__)")

    # -- the cache, shard by shard (the reference's names) -------------------------------------
    def _check_shard(self, shard_id: int) -> int:
        n = len(self.catalog.shards)
        if isinstance(shard_id, bool) or not isinstance(shard_id, (int, np.integer)):
            raise ConfigError(f"shard_id must be an int, got {type(shard_id).__name__}")
        if not 0 <= int(shard_id) < n:
            raise IndexError(f"shard_id {shard_id} out of range for {n} shards")
        return int(shard_id)

    def prepare_shard(self, shard_id: int, blocking: bool = True) -> bool:
        """Download shard ``shard_id`` into the cache (evicting others if ``cache_limit`` needs
        it). Returns whether it is present; with ``blocking=False`` a shard that another process
        is fetching, or that needs an eviction, is skipped (False)."""
        s = self._check_shard(shard_id)
        from astream import bridge

        return bool(bridge.run(self.engine.download(s, bool(blocking))))

    def evict_shard(self, shard_id: int) -> int:
        """Delete shard ``shard_id``'s cached files; returns the bytes freed. Local-only data
        (no remote to fetch it again) is never deleted: :class:`CacheError`; so is a shard a
        reader holds open right now."""
        return self.engine.evict(self._check_shard(shard_id))

    def evict_coldest_shard(self) -> int:
        """Delete the least recently used evictable shard in the cache; returns bytes freed
        (:class:`CacheError` when no shard can be evicted)."""
        return self.engine.evict_coldest()
