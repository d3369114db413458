"""The dataset logic shared by the torch ``StreamingDataset`` and asyncio users, torch-free.

Theory of operation
-------------------
Construction (in the main process of every rank) resolves the streams, loads and revalidates
their indexes, checks the arguments, and builds an :class:`~astream.runtime.engine.Engine`.
Nothing is downloaded yet.

Iteration: each consumer -- a DataLoader worker, or the main process with ``num_workers=0`` --
works out its place (torchrun variables + the DataLoader's worker info), asks the epoch plan
for the batches of ids it owns from the resume position on, and lets the engine turn them into
samples. The plan depends only on the data and the seed/epoch/canonical-node settings, never on
the World, so the global order is the same on 1 GPU or 512. Which epoch an iteration runs is
:mod:`astream.dataset.epochs`'s.

Transforms: a subclass that overrides ``__getitem__`` or ``get_item`` (the reference's
documented way to decode or augment) gets every iterated sample through its override: the
engine decodes the planned batch as usual and the override's ``super()`` call is served the
already-decoded sample. ``transform=`` is a plain callable that ``__getitem__`` applies to what
``get_item`` returns, in iteration as in random access (so a ``__getitem__`` override receives
the transformed sample, a ``get_item`` override's result is transformed). Neither costs anything
when absent.

The class is assembled from its concerns: the reference's attribute names
(:mod:`~astream.dataset.attributes`), epochs (:mod:`~astream.dataset.epochs`), column batches
(:mod:`~astream.dataset.columns`), the asyncio methods (:mod:`~astream.dataset.asynchronous`)
and checkpoints (:mod:`~astream.dataset.checkpoint`).
"""

from __future__ import annotations

import collections
import functools
import os
import warnings
from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any

import numpy as np

from astream import packing
from astream.core.eviction import check_policy
from astream.dataset.asynchronous import _AsyncAccess
from astream.dataset.attributes import _ReferenceAttributes
from astream.dataset.checkpoint import _Checkpoints
from astream.dataset.columns import _ColumnBatches
from astream.dataset.epochs import _EpochPlans, _Epochs
from astream.dataset.iteration import (
    _bridge_run,
    _loader_batch_size,
    _recorded,
    _skip,
    check_resharding,
)
from astream.errors import CacheError, ConfigError, IndexTypeError
from astream.runtime.catalog import Catalog, check_hash_available
from astream.runtime.config import DatasetConfig, check_dataset
from astream.runtime.engine import Engine
from astream.runtime.placement import dataloader_worker as _worker
from astream.runtime.placement import detect
from astream.runtime.range_costs import check_memory
from astream.runtime.resolve import CpuStep, resolve_steps
from astream.shared import StaleIteration
from astream.stream import FORMATS

__all__ = ["StreamingCore"]


def _overrides(obj: object) -> bool:
    """Whether ``type(obj)`` overrides ``__getitem__`` or ``get_item`` of StreamingCore."""
    cls: Any = type(obj)
    return cls.__getitem__ is not StreamingCore.__getitem__ or (
        cls.get_item is not StreamingCore.get_item
    )


# the constructor's arguments that DatasetConfig checks and resolves
_CONFIG_ARGUMENTS = (
    "download_retry",
    "download_timeout",
    "validate_hash",
    "epoch_size",
    "predownload",
    "cache_limit",
    "sampling_method",
    "sampling_granularity",
    "partition_algo",
    "num_canonical_nodes",
    "batch_size",
    "shuffle",
    "shuffle_algo",
    "shuffle_seed",
    "shuffle_block_size",
    "batching_method",
    "replication",
)


def _check_arguments(kw: dict[str, Any]) -> None:
    """The constructor's arguments that DatasetConfig does not check."""
    check_policy(kw["cache_policy"])
    first = kw["range_first_batches"]
    # batches read by ranges while the first shards download: a few matter, and past
    # 2**20 the plan of those batches alone would be larger than any epoch astream reads
    if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= 1 << 20:
        raise ConfigError(f"range_first_batches must be an int in 0..{1 << 20}, got {first!r}")
    check_memory(kw["random_memory"])
    check_memory(kw["map_memory"], "map_memory", none=True)
    transform = kw["transform"]
    if transform is not None and not callable(transform):
        raise ConfigError(f"transform must be a callable, got {type(transform).__name__}")


def _with_format(kw: dict[str, Any]) -> dict[str, Any] | None:
    """``stream_config`` with the dataset's ``format``/``columns``/``files``/``index_source``
    added (they build the single stream of ``remote``/``local``); a clash or a use with
    ``streams`` is refused."""
    if kw["format"] not in FORMATS:
        raise ConfigError(f"format must be one of {FORMATS}, got {kw['format']!r}")
    config = kw["stream_config"]
    given = {k: kw[k] for k in ("columns", "files", "index_source") if kw[k] is not None}
    if kw["format"] != "mds":
        given["format"] = kw["format"]
    if not given:
        return config  # type: ignore[no-any-return]
    names = ", ".join(sorted(given))
    if kw["streams"] is not None:
        raise ConfigError(
            f"{names}: these build the single stream of `remote`/`local`; with `streams`, "
            "give them to each Stream"
        )
    if not isinstance(config, dict) and config is not None:
        return config  # type: ignore[no-any-return]  # resolve_steps refuses it by name
    clash = sorted(set(config or {}) & set(given))
    if clash:
        raise ConfigError(f"stream_config sets {clash}, which StreamingDataset's own arguments "
                          "of the same name set; give them once")  # fmt: skip
    return {**(config or {}), **given}


def _check_hash_paths(catalog: Catalog) -> None:
    """Refuse ``validate_hash`` (the dataset's or a stream's) on a stream whose read path
    cannot honour it: a Parquet table has no whole-file hash in an index to check a row group
    against, and its page checksums are optional, so its samples would go out unverified."""
    for k, src in enumerate(catalog.sources):
        if src.validate_hash is None:
            continue
        for _i, entry in src.index.table.configs():
            if entry.format == "parquet":
                raise ConfigError(
                    f"validate_hash={src.validate_hash!r} cannot be honoured for stream {k} "
                    f"({_redact(src.remote or src.local)}): a Parquet table lists no file "
                    "hashes to check its row groups against; read it without validate_hash"
                )


class StreamingCore(_ReferenceAttributes, _EpochPlans, _ColumnBatches, _AsyncAccess, _Checkpoints):
    """Stream MDS samples from ``remote`` (cached under ``local``) in a planned order.

    Parameters follow mosaicml-streaming's ``StreamingDataset``; see docs/migrating.md for the
    few whose meaning differs. ``astream.StreamingDataset`` is this plus torch's
    ``IterableDataset``; asyncio programs without torch can use this class directly
    (``astream.aio.AsyncStreamingDataset``).

    Every argument is checked here, in the process that builds the dataset (``ConfigError``
    naming it). Numeric bounds: ``download_retry`` <= 100, ``download_timeout`` <= 7 days,
    ``epoch_size`` <= 2**40 samples (``"2b"`` = 2e9 samples) and at most 2**22 planned pieces
    (shards x repeats), ``predownload`` <= 2**22, ``batch_size`` <= 2**20,
    ``num_canonical_nodes`` <= 2**20, ``replication`` <= 2**20, ``shuffle_seed`` <= 2**63-1,
    ``sampling_granularity`` and ``shuffle_block_size`` <= 2**40, ``cache_limit`` <= 2**63-1
    bytes (table and reasons: :mod:`astream.runtime.config`). ``stream_name``/``stream_config``
    build the single stream of ``remote``/``local`` with a class from
    ``astream.stream.streams_registry``. ``cache_policy`` (astream's own): which shard a full
    ``cache_limit`` evicts, ``"next_use"`` (the one the node reads furthest in the future, the
    default) or ``"lru"`` (least recently used); see docs/plan.md. ``shuffle_algo`` defaults to
    the reference's ``"py1e"``, so a dataset built with the reference's arguments yields its
    sequence; ``"astream"`` names astream's own block order (docs/order.md). ``pack_to``
    (astream's own): iterate fixed-length sequences of ``pack_to`` tokens packed from the
    integer array column ``pack_column``, with ``position_ids`` and ``segment_ids``;
    ``pack_last`` ``"pad"`` (with ``pack_pad_id``) or ``"drop"`` for each consumer's trailing
    tokens (docs/batches.md).
    ``format`` (``"mds"`` or ``"parquet"``), ``columns``, ``files`` and ``index_source`` are
    ``Stream``'s, for the single stream of ``remote``/``local`` (docs/parquet.md).
    ``random_memory`` (astream's own): bytes of samples that random access read by range and
    keeps in memory per process, so a second read costs no request (0 keeps none).
    ``map_memory`` (astream's own): bytes of shard files an iteration reads through memory
    maps, shared by the DataLoader workers of one rank; the other shards it reads are read by
    copy (``pread``), so the shard pages mapped in each process stay under this share whatever
    the order reads. The samples are the same either way; None maps every shard read.
    """

    pack: Any = None  # a PackSpec with pack_to (astream.packing.setup; docs/batches.md)
    _pack_shared: Any = None  # its pending resume, shared with DataLoader workers

    def __init__(
        self,
        *,
        streams: Sequence[Any] | None = None,
        remote: str | None = None,
        local: str | None = None,
        split: str | None = None,
        download_retry: int = 2,
        download_timeout: float = 60,
        validate_hash: str | None = None,
        keep_zip: bool = False,
        epoch_size: int | str | None = None,
        predownload: int | None = None,
        cache_limit: int | str | None = None,
        cache_policy: str = "next_use",
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        partition_algo: str = "relaxed",
        num_canonical_nodes: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        shuffle_algo: str = "py1e",
        shuffle_seed: int = 9176,
        shuffle_block_size: int | None = None,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: int | None = None,
        storage_options: dict[str, Any] | None = None,
        transform: Callable[[Any], Any] | None = None,
        stream_name: str = "stream",
        stream_config: dict[str, Any] | None = None,
        pack_to: int | None = None,
        pack_column: str = "input_ids",
        pack_last: str = "pad",
        pack_pad_id: int = 0,
        format: str = "mds",
        columns: list[str] | None = None,
        files: list[str] | None = None,
        index_source: str | None = None,
        range_first_batches: int = 1,
        random_memory: int = 64 << 20,
        map_memory: int | None = 64 << 20,
    ) -> None:
        kw = dict(locals())
        del kw["self"]
        steps = self._build(kw)
        step = next(steps)
        while True:
            # remote index loads run on astream's loop thread; local ones and the checks in
            # this thread (a local dataset never starts the loop thread to be built)
            got = step.run() if isinstance(step, CpuStep) else _bridge_run(step)
            try:
                step = steps.send(got)
            except StopIteration:
                return

    @classmethod
    def _arguments(cls, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments with the constructor's defaults filled in (TypeError as a call
        with an unknown argument would raise)."""
        import inspect

        bound = inspect.signature(StreamingCore.__init__).bind(None, **kwargs)
        bound.apply_defaults()
        args = dict(bound.arguments)
        del args["self"]
        return args

    def _build(self, kw: dict[str, Any]) -> Generator[Any, Any, None]:
        """The constructor's work, as a generator that yields the index loads (a coroutine, or
        a :class:`CpuStep` when every stream is local), then more :class:`CpuStep` (the checks,
        the engine), and is sent each one's result;
        shared by ``__init__`` and the async ``open``
        (:class:`astream.aio.AsyncStreamingDataset`)."""
        _check_arguments(kw)
        keep_zip, allow_unsafe_types = kw["keep_zip"], kw["allow_unsafe_types"]
        self.transform = kw["transform"]
        cfg = DatasetConfig.build(**{name: kw[name] for name in _CONFIG_ARGUMENTS})
        bs, ahead = cfg.batch_size, cfg.predownload
        if ahead is not None and bs is not None and ahead < bs:  # as the reference warns
            warnings.warn(
                f"predownload={ahead} is below batch_size={bs}: a batch may wait on its own "
                "downloads; set predownload >= batch_size",
                stacklevel=3,
            )
        self.cfg = cfg
        resolved_streams: list[Any] = []
        self.stream_specs, sources, stores = yield from resolve_steps(
            kw["streams"],
            kw["remote"],
            kw["local"],
            kw["split"],
            cfg,
            kw["storage_options"],
            keep_zip=keep_zip,
            stream_name=kw["stream_name"],
            stream_config=_with_format(kw),
            streams_out=resolved_streams,
        )
        self.streams: list[Any] = resolved_streams
        self.catalog = Catalog(sources)
        # the checks plan epoch 0 (seconds of CPU at ten million samples): ``open`` runs them
        # off the caller's event loop
        avg = yield CpuStep(lambda: self._check_catalog(allow_unsafe_types))
        ahead = cfg.predownload if cfg.predownload is not None else max(8 * cfg.batch_or_1, avg)
        make = functools.partial(
            Engine,
            self.catalog,
            stores,
            cache_limit=cfg.cache_limit,
            validate_hash=cfg.validate_hash,
            keep_zip=keep_zip,
            allow_unsafe_types=allow_unsafe_types,
            ahead=ahead,
            ahead_fixed=cfg.predownload is not None,
            cache_policy=kw["cache_policy"],
            range_first_batches=kw["range_first_batches"],
            random_memory=kw["random_memory"],
            map_memory=kw["map_memory"],
        )
        # the engine's and the epochs' shared counters (anonymous shared memory: system calls
        # and a first import, tens of ms in a fresh process): ``open`` makes them in a thread
        self.engine, self._epochs = yield CpuStep(lambda: (make(), _Epochs()))
        self._current: tuple[int, int] = (0, 0)  # (epoch, start) of this process's iteration
        self._progress: list[Any] = [0, None, 0]  # samples this process's iteration yielded
        self._worker_resume: dict[str, int] | None = None  # a worker's own loaded state
        self._worker_next: int | None = None  # a resumed worker's next epoch
        self._iters = (0, 0)  # (pid, iterations this DataLoader worker started): _worker_iteration
        self._loader_token: int | None = None  # set while a StreamingDataLoader starts workers
        self._hot: tuple[int, Any] | None = None  # the sample an override's super() call gets
        packing.setup(self, kw)  # pack_to: token packing (docs/batches.md)
        self._check_presets()

    def __getstate__(self) -> dict[str, Any]:
        """A pickled copy (a spawned DataLoader worker's, say) plans its own epochs: the plan
        cache is not pickled (a reference plan of ten million samples pickles to ~40 MB)."""
        state = self.__dict__.copy()
        state["_plans"] = {}
        return state

    def _check_catalog(self, allow_unsafe_types: bool) -> int:
        """Check the resolved streams against the settings; returns the average samples per
        shard."""
        cfg = self.cfg
        _check_hash_paths(self.catalog)
        key, plan = check_dataset(cfg, self.catalog, self.stream_specs, allow_unsafe_types)
        # kept for the first epoch, unless planning it warns (about batch_size=None, or a
        # reference plan's few samples: said again at each plan)
        self._plans = {key: plan} if plan is not None and cfg.batch_size is not None else {}
        if cfg.validate_hash is not None:
            check_hash_available(self.catalog, cfg.validate_hash)
        if cfg.cache_limit is not None and cfg.cache_limit < self.catalog.max_footprint:
            raise CacheError(
                f"cache_limit={cfg.cache_limit} bytes is smaller than the largest shard "
                f"({self.catalog.max_footprint} bytes raw + compressed): nothing could be read"
            )
        avg = max(1, self.catalog.num_samples // max(1, len(self.catalog.shards)))
        if cfg.cache_limit is not None and cfg.shuffle:
            self._warn_small_cache(avg)
        return avg

    def _warn_small_cache(self, avg_shard_samples: int) -> None:
        """A shuffle block spans several shards that are all read at once; a cache that cannot
        hold them refetches shards over and over (correct, but slow). Say so up front."""
        block = self._block_size()
        shards, ncn = len(self.catalog.shards), self.cfg.num_canonical_nodes
        # a block spans at most its canonical node's share of the shards (py1e's default block
        # is the whole share), and all canonical nodes together at most every shard
        per_node = min(-(-shards // ncn) + 1, -(-block // avg_shard_samples) + 1)
        spanned = min(shards, per_node * ncn)
        need = spanned * self.catalog.max_footprint
        assert self.cfg.cache_limit is not None
        if self.cfg.cache_limit < need:
            warnings.warn(
                f"cache_limit={self.cfg.cache_limit} bytes holds fewer shards than one shuffle "
                f"block reads at once (about {spanned} shards over {ncn} canonical node(s) x "
                f"{self.catalog.max_footprint} bytes = {need}): shards will be fetched again "
                "and again; raise cache_limit or lower shuffle_block_size",
                stacklevel=3,
            )

    def _settle_batch_size(self) -> None:
        """A dataset without ``batch_size`` takes the DataLoader's (the plan deals per-device
        batches, so the two must agree); a mismatch is warned about, naming both."""
        found, bs = _loader_batch_size()
        if self.cfg.batch_size is None:
            if bs is not None:
                self.batch_size = bs
            elif not found and _worker() is not None:
                raise ConfigError(
                    "StreamingDataset(batch_size=None) in a DataLoader worker whose DataLoader "
                    "cannot be seen (workers started by 'spawn' or 'forkserver'): pass "
                    "batch_size=<the DataLoader's batch_size> to StreamingDataset, or use "
                    "astream.StreamingDataLoader, which passes it on"
                )
        elif bs is not None and bs != self.cfg.batch_size:
            warnings.warn(
                f"StreamingDataset(batch_size={self.cfg.batch_size}) under a DataLoader with "
                f"batch_size={bs}: each DataLoader batch mixes the dataset's per-device batches, "
                "so the order differs from the planned one and checkpoints do not resume "
                "exactly; give both the same batch_size",
                stacklevel=3,
            )

    def _start_iteration(self) -> tuple[Iterator[np.ndarray[Any, Any]], list[int]]:
        if self.pack is not None:  # every packing path goes through astream.packing
            raise ConfigError(
                "pack_to: this way of iterating (aiter, async or column batches of samples) "
                "does not pack; iterate the dataset, ds.batches() or a StreamingDataLoader"
            )
        self._settle_batch_size()
        resume = self._worker_resume
        me = _worker()
        if resume is not None and me is not None:
            self._worker_iteration()
            self._worker_resume = None
            epoch, start, skip = resume["epoch"], resume["start"], resume["yielded"]
            self._current = (epoch, start)
            self._worker_next = epoch + 1
            self._epochs.worker_take(me[0])
            if (resume["worker"], resume["num_workers"]) != me:
                raise ConfigError(
                    f"this state was saved by DataLoader worker {resume['worker']} of "
                    f"{resume['num_workers']}; it is being loaded into worker {me[0]} of {me[1]} "
                    "(resume with the same num_workers, or use the loader-level state_dict, "
                    "which resumes on any number of workers)"
                )
        else:
            epoch, start = self._take_epoch()
            skip = 0
        place = detect(self.cfg.replication)
        plan = self.plan(epoch)
        batches = plan.worker_batches(place.world, place.rank, place.worker, start)
        self.engine.follow(plan, place.world, place.rank, place.worker, epoch, start, skip)
        self.engine.share_first(plan, place.world, place.rank, place.worker, start, skip)
        progress: list[Any] = [skip, None, 0]  # see Engine.iter_samples' cursor
        self._progress = progress
        return (_skip(batches, skip) if skip else batches), progress

    def __iter__(self) -> Iterator[dict[str, Any]]:
        check_resharding(self.cfg.replication)  # accelerate would split each rank's part
        if self.pack is not None:
            return packing.iter_packed(self)
        try:
            batches, progress = self._start_iteration()
        except StaleIteration:
            return iter(())
        return self._samples(batches, progress)

    def _sample_lists(self) -> Iterator[Any] | None:
        """The next iteration as one list iterator of decoded samples per planned batch
        (``Engine.iter_samples(lists=True)``), for the ``num_workers=0`` StreamingDataLoader;
        None (nothing started) where iterating does more than decode: ``pack_to``, a
        ``transform``, a ``__getitem__``/``get_item`` or ``__iter__`` override."""
        if (
            self.pack is not None
            or self.transform is not None
            or _overrides(self)
            or type(self).__iter__ is not StreamingCore.__iter__
        ):
            return None
        check_resharding(self.cfg.replication)
        batches, progress = self._start_iteration()
        return self.engine.iter_samples(batches, progress, lists=True)

    def _samples(self, batches: Iterator[Any], progress: list[Any]) -> Iterator[Any]:
        """Decoded samples of ``batches``, through a ``__getitem__``/``get_item`` override or
        ``transform`` when the dataset has one."""
        if _overrides(self):
            ids: collections.deque[int] = collections.deque()
            samples = self.engine.iter_samples(_recorded(batches, ids))
            return self._through_override(samples, ids, progress)
        if self.transform is not None:
            return self._transformed(self.engine.iter_samples(batches), progress, self.transform)
        return self.engine.iter_samples(batches, progress)  # counts without a per-sample step

    def _has_override(self) -> bool:
        """Whether this dataset's class overrides ``__getitem__`` or ``get_item``."""
        return _overrides(self)

    @staticmethod
    def _transformed(
        samples: Iterator[Any], progress: list[Any], transform: Callable[[Any], Any]
    ) -> Iterator[Any]:
        for x in samples:
            progress[0] += 1
            yield transform(x)

    def _through(self, i: int, x: Any) -> Any:
        """``self[i]`` (the subclass's override; ``transform`` inside it) with the decoded ``x``."""
        self._hot = (i, x)
        try:
            return self[i]
        finally:
            self._hot = None

    def _through_override(
        self, samples: Iterator[Any], ids: collections.deque[int], progress: list[Any]
    ) -> Iterator[Any]:
        for x in samples:
            progress[0] += 1
            yield self._through(ids.popleft(), x)

    def __len__(self) -> int:
        """Samples this rank yields in a whole epoch (all its workers together), as in the
        reference: the same before and after ``load_state_dict``. What is left of a resumed
        epoch is :meth:`remaining_len`."""
        epoch = self._epochs.owner_next()[0]
        place = detect(self.cfg.replication)
        return int(self.plan(epoch).rank_num_samples(place.world, place.rank, 0))

    def remaining_len(self) -> int:
        """Samples this rank yields in its next iteration (less than ``len`` after resuming
        mid-epoch)."""
        epoch, start = self._next_position()
        place = detect(self.cfg.replication)
        return int(self.plan(epoch).rank_num_samples(place.world, place.rank, start))

    # -- random access -------------------------------------------------------------------------
    def get_item(self, index: int) -> Any:
        hot = self._hot
        if hot is not None and hot[0] == index:
            return hot[1]  # iteration decoded it already; an override's super() call gets it
        n = self.catalog.num_samples
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for {n} samples")
        return self.engine.get(i)

    def _get(self, i: int) -> Any:
        """What ``get_item`` (perhaps overridden) gives, through ``transform``."""
        x = self.get_item(i)
        return x if self.transform is None else self.transform(x)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            return self._get(int(index))
        if isinstance(index, slice):
            return [self._get(i) for i in range(*index.indices(self.catalog.num_samples))]
        if isinstance(index, (np.ndarray, list, tuple)):
            return [self._get(int(i)) for i in np.asarray(index).reshape(-1)]
        got = type(index).__name__
        raise IndexTypeError(f"index must be an int, slice, list or array, got {got}")

    def __repr__(self) -> str:
        where = ", ".join(_redact(s.remote or s.local) for s in self.catalog.sources)
        return (
            f"{type(self).__name__}({where}: {self.catalog.num_samples} samples in "
            f"{len(self.catalog.shards)} shards, pid {os.getpid()})"
        )


def _redact(url: str) -> str:
    """``scheme://user:secret@host`` -> ``scheme://***@host``."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest.split("/", 1)[0]:
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url
