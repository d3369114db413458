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
the World, so the global order is the same on 1 GPU or 512.

Epochs (:class:`_Epochs`): the process that builds the dataset (the *owner*) and its DataLoader
workers share a small array of int64 in anonymous shared memory: the epoch (and resume
position) the next worker iteration starts from, and per worker slot the number of iterations
that worker has started since. Worker ``w``'s ``k``-th iteration runs epoch ``base + k`` (from
the resume position when ``k == 0``), so a plain ``DataLoader(ds, num_workers=N)`` -- fresh
workers each epoch or ``persistent_workers=True`` -- walks epochs 0, 1, 2... exactly as
:class:`StreamingDataLoader` and ``num_workers=0`` do. ``set_epoch``, ``load_state_dict`` and
the owner's own iterations rewrite the base and zero the slots. The memory dies with the job:
a killed run leaves nothing that shifts the next one's epochs.

Transforms: a subclass that overrides ``__getitem__`` or ``get_item`` (the reference's
documented way to decode or augment) gets every iterated sample through its override: the
engine decodes the planned batch as usual and the override's ``super()`` call is served the
already-decoded sample. ``transform=`` is a plain callable that ``__getitem__`` applies to what
``get_item`` returns, in iteration as in random access (so a ``__getitem__`` override receives
the transformed sample, a ``get_item`` override's result is transformed). Neither costs anything
when absent.
"""

from __future__ import annotations

import asyncio
import collections
import os
import sys
import time
import warnings
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from astream.core.eviction import check_policy
from astream.core.state import LoaderState
from astream.errors import CacheError, ConfigError, IndexTypeError, SettingError
from astream.runtime.catalog import Catalog, check_hash_available
from astream.runtime.config import DatasetConfig, check_dataset, resolve_steps
from astream.runtime.engine import Engine
from astream.runtime.placement import dataloader_worker as _worker
from astream.runtime.placement import detect, resharding_error
from astream.runtime.stats import Stats
from astream.shared import MAX_WORKERS, SharedInts, StaleIteration

__all__ = ["StreamingCore"]

SLICE_S = 0.002  # the longest astream keeps the caller's loop on hot data (see aiter)
_BASE, _START, _GEN, _KEEP_END, _OWNER, _ITER, _SLOTS = 0, 1, 2, 3, 4, 5, 6


class _Epochs(SharedInts):
    """Epoch bookkeeping shared by the owner process and its DataLoader workers (see the
    module docstring). Anonymous shared memory: forked workers inherit it, spawned ones get it
    through the worker's start arguments; any other copy (``copy.deepcopy``, ``pickle.dumps``)
    gets a private array with the same values."""

    SIZE = _SLOTS + MAX_WORKERS

    def reset(self, epoch: int, start: int, keep_end: bool = False) -> int:
        """The next iteration of every consumer runs ``epoch`` from ``start``; returns the
        generation this reset made (see :meth:`generation`). ``keep_end``: a ``start`` at the
        end of the epoch is an (empty) iteration of that epoch for the owner too, not the start
        of the next one (a no-argument state taken after the last sample)."""
        a = self._a
        a[_SLOTS:] = 0
        a[_BASE], a[_START], a[_KEEP_END] = epoch, start, int(keep_end)
        a[_GEN] += 1
        return int(a[_GEN])

    def keeps_end(self) -> bool:
        return bool(self._a[_KEEP_END]) and not int(self._a[_SLOTS:].max())

    def set_iteration(self, n: int, owner: int | None = None) -> None:
        """The StreamingDataLoader whose workers carry ``owner`` (a token it gives them when
        it starts them; None: the same as before) runs iteration ``n`` of them (0: the first
        after they start; persistent workers count on). A worker starting an earlier one --
        torch makes a persistent worker's iterator only after the worker acknowledges the
        iteration, so a slow worker can still be starting one the trainer left early when the
        next begins -- must not take that next iteration's position (nor a packed resume's
        cursors) for it."""
        if owner is not None:
            self._a[_OWNER] = owner
        self._a[_ITER] = n

    def iteration_of(self, owner: int | None) -> int:
        """The iteration set for the workers carrying ``owner``; -1 for any other worker (a
        plain DataLoader's: every iteration it starts is current)."""
        a = self._a
        return int(a[_ITER]) if owner is not None and int(a[_OWNER]) == owner else -1

    def generation(self) -> int:
        return int(self._a[_GEN])

    def owner_next(self) -> tuple[int, int]:
        """(epoch, start) the owner's next iteration runs: after whatever workers started."""
        k = int(self._a[_SLOTS:].max())
        base = int(self._a[_BASE])
        return (base, int(self._a[_START])) if k == 0 else (base + k, 0)

    def owner_current(self) -> tuple[int, int] | None:
        """(epoch, start) of the latest iteration workers started since the last reset."""
        k = int(self._a[_SLOTS:].max())
        if k == 0:
            return None
        return int(self._a[_BASE]) + k - 1, int(self._a[_START]) if k == 1 else 0

    def worker_take(self, worker: int) -> tuple[int, int]:
        """(epoch, start) of worker ``worker``'s next iteration; counts it."""
        if not 0 <= worker < MAX_WORKERS:
            raise ConfigError(f"num_workers: at most {MAX_WORKERS} DataLoader workers per rank")
        a = self._a
        k = int(a[_SLOTS + worker])
        a[_SLOTS + worker] = k + 1
        return int(a[_BASE]) + k, int(a[_START]) if k == 0 else 0


class _Warmer:
    """Computes the shuffle blocks an async iteration will read next, in a thread, before it
    reads them: a block's permutation (up to 2**20 samples: ~40-80 ms of numpy) would
    otherwise be computed on the caller's loop when the first sample of the block is due."""

    def __init__(self, ds: StreamingCore, epoch: int, start: int) -> None:
        self.plan = ds.plan(epoch)
        self.ranks = detect(ds.cfg.replication).world.num_ranks
        ncn = self.plan.num_canonical_nodes
        self.width = ncn  # positions p..p+ncn-1 touch every canonical node once
        self.step = max(1, self.plan.block_size * ncn)  # global positions per block, all nodes
        self.ahead = ds.engine.ahead * self.ranks  # the engine plans that far ahead of us
        self.pos = start
        self.next_at = start
        self.task: asyncio.Future[None] | None = None

    def advance(self, n: int) -> None:
        """The consumer took ``n`` more samples: warm, block by block, every block up to one
        block past what the engine's lookahead may plan next."""
        self.pos += n * self.ranks
        if self.task is not None and not self.task.done():
            return
        target = min(self.pos + self.ahead + self.step, self.plan.num_samples - self.width)
        if target >= self.next_at:
            lo, self.next_at = self.next_at, target + 1
            self.task = asyncio.ensure_future(asyncio.to_thread(self._warm, lo, target))

    def _warm(self, lo: int, hi: int) -> None:
        try:
            for p in range(lo, hi + 1, self.step):
                self.plan.global_ids(p, p + self.width)
            self.plan.global_ids(hi, hi + self.width)
        except Exception:  # only a cache warm-up: the reader computes what it needs anyway
            pass


def _bridge_run(coro: Any) -> Any:
    from astream import bridge

    return bridge.run(coro)


def _loader_batch_size() -> tuple[bool, int | None]:
    """(found, batch_size) of the torch DataLoader iterating us, read from its iterator on the
    call stack (in the main process, or in a forked worker whose stack still holds the parent's
    frames). ``found`` is False when no DataLoader iterator is on the stack (spawned workers)."""
    mod = sys.modules.get("torch.utils.data.dataloader")
    if mod is None:
        return False, None
    base = mod._BaseDataLoaderIter
    f: Any = sys._getframe(1)
    while f is not None:
        # only a loader iterator's __init__ (torch's, torchdata's) is asked for its locals:
        # reading ``f_locals`` snapshots a frame's variables, keeping the caller's objects alive
        code = f.f_code
        asked = code.co_name == "__init__" and "dataloader" in code.co_filename.lower()
        me = f.f_locals.get("self") if asked else None
        if isinstance(me, base):
            sampler = getattr(me, "_index_sampler", None)
            bs = getattr(sampler, "batch_size", None)
            return True, bs if isinstance(bs, int) else None
        f = f.f_back
    return False, None


def _overrides(obj: object) -> bool:
    """Whether ``type(obj)`` overrides ``__getitem__`` or ``get_item`` of StreamingCore."""
    cls: Any = type(obj)
    return cls.__getitem__ is not StreamingCore.__getitem__ or (
        cls.get_item is not StreamingCore.get_item
    )


def _recorded(
    batches: Iterable[np.ndarray[Any, Any]], ids: collections.deque[int]
) -> Iterator[Any]:
    for b in batches:
        ids.extend(b.tolist())
        yield b


def _yielded(cursor: list[Any]) -> int:
    """Samples consumed so far, from an iteration's cursor (see ``Engine.iter_samples``)."""
    done, it, size = cursor
    return int(done) if it is None else int(done) + size - it.__length_hint__()


def _same(x: Any) -> Any:
    return x


def _full_only(batches: Iterator[Any], size: int, progress: list[Any]) -> Iterator[Any]:
    """``batches`` less a short one (the epoch's last); it still counts as consumed."""
    from astream.core.batchdecode import batch_rows

    for b in batches:
        rows = b.rows if hasattr(b, "rows") else batch_rows(b)
        if rows == size:
            yield b


def _skip(batches: Iterator[np.ndarray[Any, Any]], n: int) -> Iterator[np.ndarray[Any, Any]]:
    """``batches`` less their first ``n`` samples."""
    for b in batches:
        if n >= len(b):
            n -= len(b)
            continue
        yield b[n:]
        n = 0
        break
    yield from batches


def _with_format(kw: dict[str, Any]) -> dict[str, Any] | None:
    """``stream_config`` with the dataset's ``format``/``columns``/``files``/``index_source``
    added (they build the single stream of ``remote``/``local``); a clash or a use with
    ``streams`` is refused."""
    from astream.stream import FORMATS

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


class StreamingCore:
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
    ) -> None:
        kw = dict(locals())
        del kw["self"]
        steps = self._build(kw)
        load = next(steps)  # the index loads, run on astream's loop thread
        try:
            steps.send(_bridge_run(load))
        except StopIteration:
            return
        raise AssertionError("_build yields once")  # pragma: no cover

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
        """The constructor's work, as a generator that yields the one coroutine doing I/O
        (the index loads) and is sent its result; shared by ``__init__`` and the async
        ``open`` (:class:`astream.aio.AsyncStreamingDataset`)."""
        transform = kw["transform"]
        streams, remote, local, split = kw["streams"], kw["remote"], kw["local"], kw["split"]
        keep_zip, allow_unsafe_types = kw["keep_zip"], kw["allow_unsafe_types"]
        check_policy(kw["cache_policy"])
        first = kw["range_first_batches"]
        # batches read by ranges while the first shards download: a few matter, and past
        # 2**20 the plan of those batches alone would be larger than any epoch astream reads
        if isinstance(first, bool) or not isinstance(first, int) or not 0 <= first <= 1 << 20:
            raise ConfigError(
                f"range_first_batches must be an int in 0..{1 << 20}, got {first!r}"
            )
        if transform is not None and not callable(transform):
            raise ConfigError(f"transform must be a callable, got {type(transform).__name__}")
        self.transform = transform
        cfg = DatasetConfig.build(
            **{
                name: kw[name]
                for name in (
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
            }
        )
        self.cfg = cfg
        resolved_streams: list[Any] = []
        self.stream_specs, sources, stores = yield from resolve_steps(
            streams,
            remote,
            local,
            split,
            cfg,
            kw["storage_options"],
            keep_zip=keep_zip,
            stream_name=kw["stream_name"],
            stream_config=_with_format(kw),
            streams_out=resolved_streams,
        )
        self.streams: list[Any] = resolved_streams
        self.catalog = Catalog(sources)
        _check_hash_paths(self.catalog)
        check_dataset(cfg, self.catalog, self.stream_specs, allow_unsafe_types)
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
        ahead = cfg.predownload if cfg.predownload is not None else max(8 * cfg.batch_or_1, avg)
        self.engine = Engine(
            self.catalog,
            stores,
            cache_limit=cfg.cache_limit,
            validate_hash=cfg.validate_hash,
            keep_zip=keep_zip,
            allow_unsafe_types=allow_unsafe_types,
            ahead=ahead,
            ahead_fixed=cfg.predownload is not None,
            cache_policy=kw["cache_policy"],
            range_first_batches=first,
        )
        self._epochs = _Epochs()
        self._current: tuple[int, int] = (0, 0)  # (epoch, start) of this process's iteration
        self._progress: list[Any] = [0, None, 0]  # samples this process's iteration yielded
        self._worker_resume: dict[str, int] | None = None  # a worker's own loaded state
        self._worker_next: int | None = None  # a resumed worker's next epoch
        self._iters = (0, 0)  # (pid, iterations this DataLoader worker started): _worker_iteration
        self._loader_token: int | None = None  # set while a StreamingDataLoader starts workers
        self._hot: tuple[int, Any] | None = None  # the sample an override's super() call gets
        self._plans: dict[tuple[int, int | None], Any] = {}
        from astream.packing import setup

        setup(self, kw)  # pack_to: token packing (docs/batches.md)
        self._check_presets()

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

    # -- properties the reference exposes -----------------------------------------------------
    @property
    def batch_size(self) -> int | None:
        return self.cfg.batch_size

    @batch_size.setter
    def batch_size(self, value: int | None) -> None:
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
    def epoch_size(self) -> int:
        """Samples in one epoch over all ranks, after mixing and ``epoch_size`` (no padding)."""
        return int(self.plan(self._epochs.owner_next()[0]).num_samples)

    @property
    def next_epoch(self) -> int:
        """The epoch the next iteration of this dataset starts (or resumes)."""
        return self._epochs.owner_next()[0]

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

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

    # -- the plan ------------------------------------------------------------------------------
    def plan(self, epoch: int) -> Any:
        """The epoch plan (cached for the latest epoch)."""
        kwargs = self.cfg.plan_kwargs()
        if self.cfg.batching_method in ("stratified", "per_stream"):
            # stratified: every global batch holds the exact stream proportions; per_stream:
            # every global batch comes from one stream. Either way the unit is the global
            # batch, so it depends on the number of (replica) ranks
            ranks = detect(self.cfg.replication).world.num_ranks
            kwargs["global_batch_size"] = self.cfg.batch_or_1 * ranks
        key = (epoch, kwargs.get("global_batch_size"))
        plan = self._plans.get(key)
        if plan is None:
            from astream.core.order import plan_epoch

            if self.cfg.batch_size is None:
                warnings.warn(
                    "StreamingDataset(batch_size=None): assuming 1; pass the per-device batch "
                    "size so resumption and the worker split match the DataLoader",
                    stacklevel=3,
                )
            plan = plan_epoch(self.stream_specs, epoch=epoch, **kwargs)
            self._plans = {key: plan}
        return plan

    def _normal(self, epoch: int, start: int) -> tuple[int, int]:
        """A position at (or past) the end of an epoch is the start of the next one; the start
        of an empty epoch is that epoch (the reference runs it, yielding nothing, so the
        epoch a state names after it is the same)."""
        if start > 0 and start >= self.plan(epoch).num_samples:
            return epoch + 1, 0
        return epoch, start

    def _plan_and_warm(self, epoch: int, start: int) -> None:
        """The epoch's plan and the shuffle blocks of its first positions (see aiter)."""
        plan = self.plan(epoch)
        ncn = plan.num_canonical_nodes
        if self.cfg.shuffle and start < plan.num_samples:
            plan.global_ids(start, min(start + ncn, plan.num_samples))

    def _next_position(self) -> tuple[int, int]:
        """(epoch, start) the owner's next iteration runs."""
        epoch, start = self._epochs.owner_next()
        return (epoch, start) if self._epochs.keeps_end() else self._normal(epoch, start)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration (of this process or of its DataLoader workers, persistent
        or not) run ``epoch`` from its start."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ConfigError(f"epoch must be an int >= 0, got {epoch!r}")
        self._epochs.reset(int(epoch), 0)
        self._worker_resume = self._worker_next = None
        if self._pack_shared is not None:
            self._pack_shared.clear()

    def _worker_iteration(self) -> None:
        """Count this DataLoader worker's iterations; raise ``StaleIteration`` when the one
        starting now is one its loader has already left (see ``_Epochs.set_iteration``)."""
        pid, n = self._iters
        n = n if pid == os.getpid() else 0
        self._iters = (os.getpid(), n + 1)
        if n < self._epochs.iteration_of(self._loader_token):
            raise StaleIteration

    def _take_epoch(self) -> tuple[int, int]:
        """Epoch and start of the iteration beginning now in this process (see module doc)."""
        me = _worker()
        if me is not None:
            self._worker_iteration()
        if me is None:
            epoch, start = self._next_position()
            self._epochs.reset(epoch + 1, 0)
        elif self._worker_next is not None:
            epoch, start = self._worker_next, 0
            self._worker_next += 1
            self._epochs.worker_take(me[0])
        else:
            epoch, start = self._epochs.worker_take(me[0])
        self._current = (epoch, start)
        return epoch, start

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
        if detect(self.cfg.replication).world.num_ranks > 1:
            err = resharding_error()  # accelerate would split each rank's part again
            if err is not None:
                raise err
        if self.pack is not None:
            from astream.packing import iter_packed

            return iter_packed(self)
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
        if detect(self.cfg.replication).world.num_ranks > 1:
            err = resharding_error()
            if err is not None:
                raise err
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

    # -- batch output (columns) ----------------------------------------------------------------
    def _batch_converter(self, batch_format: str) -> Callable[[dict[str, Any]], Any]:
        """What turns a batch of numpy columns into ``batch_format`` (torch: the torch class)."""
        if batch_format == "numpy":
            return _same
        if batch_format == "torch":
            raise ConfigError(
                "batch_format='torch' needs astream.StreamingDataset (the torch dataset); "
                f"{type(self).__name__} gives batch_format='numpy'"
            )
        raise ConfigError(f"batch_format must be 'numpy' or 'torch', got {batch_format!r}")

    def _check_batch_output(self, batch_size: int | None, ragged: str) -> None:
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
            if self.cfg.batch_size is None:
                self.batch_size = batch_size
            elif batch_size != self.cfg.batch_size:
                raise ConfigError(
                    f"batch_size={batch_size} differs from the dataset's batch_size="
                    f"{self.cfg.batch_size}: batches are the planned per-device batches"
                )
        if ragged not in ("pad", "offsets"):
            raise ConfigError(f"ragged must be 'pad' or 'offsets', got {ragged!r}")
        if _overrides(self) or self.transform is not None:
            raise ConfigError(
                "batch output has no per-sample step: a transform= or a __getitem__/get_item "
                "override cannot run on it (iterate samples, or transform the batch)"
            )

    def batches(
        self,
        batch_size: int | None = None,
        *,
        batch_format: str = "numpy",
        ragged: str = "pad",
        drop_last: bool = False,
    ) -> Iterator[dict[str, Any]]:
        """The next epoch as planned per-device batches of columns: ``{column: array}``, with
        no Python object per sample (layout per encoding: docs/batches.md). Same order,
        epochs, ``state_dict`` and resumption as iterating samples with ``num_workers=0``.

        ``batch_size``: the dataset's (a dataset built without one plans with this one).
        ``batch_format``: ``"numpy"`` or ``"torch"`` (``astream.StreamingDataset`` only).
        ``ragged``: variable-size columns as ``"pad"`` (``(n, max)`` zero-padded plus
        ``<col>_len``) or ``"offsets"`` (flat values plus ``<col>_offsets``, ``n + 1``).
        ``drop_last``: skip the epoch's last batch when it is short.
        """
        if self.pack is not None:
            from astream.packing import packed_batches

            return packed_batches(self, batch_size, batch_format, ragged, drop_last)
        self._check_batch_output(batch_size, ragged)
        convert = self._batch_converter(batch_format)
        return self._column_batches(convert, ragged, drop_last, None)

    def _column_batches(
        self,
        convert: Callable[[dict[str, Any]], Any],
        ragged: str,
        drop_last: bool,
        finish: Callable[[Any], Any] | None,
    ) -> Iterator[Any]:
        """One iteration of column batches; ``finish(column_batch)`` overrides where a batch is
        allocated (a worker's shared memory)."""
        if detect(self.cfg.replication).world.num_ranks > 1:
            err = resharding_error()
            if err is not None:
                raise err
        try:
            batches, progress = self._start_iteration()
        except StaleIteration:
            return iter(())
        if finish is None:

            def finish(cb: Any) -> Any:
                return convert(cb.finish())

        out = self.engine.iter_columns(batches, finish, ragged, progress)
        if not drop_last:
            return out
        return _full_only(out, self.cfg.batch_or_1, progress)

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

    async def aiter(
        self,
        batch_size: int | None = None,
        *,
        collate: Callable[[list[Any]], Any] | None = None,
        drop_last: bool = False,
        io: str = "thread",
    ) -> AsyncIterator[Any]:
        """``async for sample in ds.aiter()``: the next epoch on the caller's loop, in the order
        the synchronous path gives with ``num_workers=0`` (through a subclass's ``__getitem__``
        or ``get_item`` override and ``transform``, as iteration is).

        ``batch_size``: yield lists of that many consecutive samples instead (the last one
        shorter unless ``drop_last``), passed through ``collate`` if given; a dataset built
        without ``batch_size`` plans with this one. The loop is given back at least once per
        planned batch and whenever about 2 ms have passed since astream last gave it back.
        ``io``: where downloads run (see :meth:`astream.runtime.engine.Engine.aiter_batches`):
        ``"thread"`` (default; astream's I/O thread, so they go on while a synchronous step
        blocks the loop) or ``"loop"`` (the caller's loop, no astream I/O thread). Planning and
        the shuffle blocks are computed in the loop's default executor either way.
        """
        if batch_size is not None:
            if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
                raise ConfigError(f"batch_size must be an int >= 1, got {batch_size!r}")
            if self.cfg.batch_size is None:
                self.batch_size = batch_size
        if collate is not None and batch_size is None:
            raise ConfigError("collate needs batch_size: it is applied to each batch")
        if io not in ("thread", "loop"):  # before the epoch is taken
            raise ConfigError(f"io must be 'thread' or 'loop', got {io!r}")
        # planning an epoch is numpy work proportional to the shards (tens of ms on large
        # datasets): done in a thread, the loop is free meanwhile
        await asyncio.to_thread(self._plan_and_warm, *self._next_position())
        batches, progress = self._start_iteration()
        warm = _Warmer(self, *self._current) if self.cfg.shuffle else None
        override = _overrides(self)
        ids: collections.deque[int] = collections.deque()
        if override:
            batches = _recorded(batches, ids)
        transform = self.transform
        source = self.engine.aiter_batches(batches, io=io)
        clock = time.perf_counter
        buf: list[Any] = []
        try:
            async for out in source:
                if warm is not None:
                    warm.advance(len(out))
                if override:
                    out = [self._through(ids.popleft(), x) for x in out]
                elif transform is not None:
                    out = [transform(x) for x in out]
                if batch_size is not None:
                    buf.extend(out)
                    while len(buf) >= batch_size:
                        batch, buf = buf[:batch_size], buf[batch_size:]
                        progress[0] += batch_size
                        yield batch if collate is None else collate(batch)
                    continue
                mark = clock()
                for k, x in enumerate(out, 1):
                    progress[0] += 1
                    yield x
                    if not k & 31 and clock() - mark > SLICE_S:
                        await asyncio.sleep(0)
                        mark = clock()
            if buf and not drop_last:
                progress[0] += len(buf)
                yield buf if collate is None else collate(buf)
        finally:
            await source.aclose()

    async def aclose(self) -> None:
        """Close the connections ``io="loop"`` reads opened on the running loop."""
        await self.engine.aclose()

    async def aiter_batches(self) -> AsyncIterator[list[Any]]:
        """Like :meth:`aiter`, grouped into the planned per-device batches (lists)."""
        async for batch in self.aiter(self.cfg.batch_or_1):
            yield batch

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

    async def aget(self, index: int, *, io: str = "thread") -> Any:
        """``ds[index]`` for a coroutine: the read (a cached map, or two ranged GETs) runs on
        astream's I/O thread (``io="thread"``) or on the caller's loop (``io="loop"``); the
        loop is never blocked."""
        n = self.catalog.num_samples
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"index must be an int, got {type(index).__name__}")
        i = int(index) + (n if int(index) < 0 else 0)
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for {n} samples")
        if io == "thread":
            from astream import bridge

            x = await asyncio.wrap_future(bridge.submit(self.engine.aget(i)))
        elif io == "loop":
            x = await self.engine.aget(i)
        else:
            raise ConfigError(f"io must be 'thread' or 'loop', got {io!r}")
        return self._through(i, x) if _overrides(self) or self.transform is not None else x

    async def aget_many(
        self, indices: Iterable[int], *, concurrency: int = 16, io: str = "thread"
    ) -> list[Any]:
        """Samples ``indices``, in that order, read ``concurrency`` at a time."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        ids = [int(i) for i in indices]
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int) -> Any:
            async with sem:
                return await self.aget(i, io=io)

        return list(await asyncio.gather(*(one(i) for i in ids)))

    # -- checkpoints ---------------------------------------------------------------------------
    def _position(self) -> tuple[int, int]:
        """(epoch, start) of the iteration this process's checkpoints count from."""
        if _worker() is None:
            current = self._epochs.owner_current()  # workers of a plain DataLoader
            if current is not None:
                return current
        return self._current

    def state_dict(
        self, num_samples: int | None = None, from_beginning: bool = True
    ) -> dict[str, Any]:
        """Where the job is.

        With the reference's arguments: ``num_samples`` consumed by all ranks together, counted
        from the start of the epoch (``from_beginning``) or from where this iteration resumed.
        Keys are the reference's (:class:`~astream.core.state.LoaderState`).

        Without arguments (the stateful-iterable protocol of torchdata's
        ``StatefulDataLoader``): where *this* consumer is -- the process iterating with
        ``num_workers=0`` (counted in samples it yielded, times the ranks), or, inside a
        DataLoader worker, that worker (its own samples; resumable by the same worker of the
        same ``num_workers``).
        """
        if self.pack is not None:
            from astream.packing import owner_state

            if num_samples is not None:
                raise ConfigError(
                    "state_dict(num_samples=...) with pack_to: packed streams advance by "
                    "tokens, not samples; call state_dict() (or StreamingDataLoader.state_dict)"
                )
            return owner_state(self)
        epoch, start = self._position()
        world = detect(self.cfg.replication).world
        me = _worker()
        if num_samples is None:
            if me is not None:
                state = self._state(epoch, start, world)
                state["astream_worker"] = {
                    "worker": me[0],
                    "num_workers": me[1],
                    "yielded": _yielded(self._progress),
                }
                return state
            state = self._state(epoch, start + _yielded(self._progress) * world.num_ranks, world)
            # a state taken after the last sample resumes into that (finished) epoch, as the
            # iterator it describes would (torchdata): the next iteration is empty, then E+1
            state["astream_exact_end"] = True
            return state
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)):
            raise ConfigError(f"num_samples must be an int, got {num_samples!r}")
        pos = int(num_samples) if from_beginning else start + int(num_samples)
        return self._state(epoch, pos, world)

    def _state(self, epoch: int, pos: int, world: Any) -> dict[str, Any]:
        return LoaderState(
            epoch=epoch,
            sample_in_epoch=pos,
            shuffle_seed=self.cfg.shuffle_seed,
            num_canonical_nodes=self.cfg.num_canonical_nodes,
            # kept from the checkpoint a reference algorithm resumed from, as the reference
            initial_physical_nodes=self.cfg.initial_physical_nodes or world.num_nodes,
            initial_ranks_per_node=world.ranks_per_node,
        ).to_dict()

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume at ``obj`` (ours, or the reference's ``state_dict``) on the next iteration,
        on this or any other World, in this process and its DataLoader workers (with
        ``pack_to``: exact on the same World, else see docs/batches.md)."""
        if self.pack is not None:
            from astream.packing import load_state

            load_state(self, obj, self._load_position)
            return
        self._load_position(obj)

    def _load_position(self, obj: dict[str, Any]) -> None:
        ours = ("astream_worker", "astream_exact_end")
        worker_part = obj.get("astream_worker") if isinstance(obj, dict) else None
        exact_end = bool(obj.get("astream_exact_end")) if isinstance(obj, dict) else False
        state = LoaderState.from_dict(
            {k: v for k, v in obj.items() if k not in ours} if isinstance(obj, dict) else obj
        )
        changes: dict[str, Any] = {}
        for key in ("num_canonical_nodes", "shuffle_seed"):
            if getattr(state, key) != getattr(self.cfg, key):
                changes[key] = getattr(state, key)
        # kept, as the reference keeps it, for the checkpoints this run writes; a reference
        # algorithm also re-deals the order from it (astream's order never reads it)
        initial = state.initial_physical_nodes
        if initial != self.cfg.initial_physical_nodes:
            changes["initial_physical_nodes"] = initial
        if changes:
            planned = self.cfg.plan_kwargs()
            self.cfg = self.cfg.replace(**changes)
            if self.cfg.plan_kwargs() != planned:  # not initial_physical_nodes under "astream"
                self._plans.clear()
        if worker_part is not None:
            if _worker() is None:
                raise ConfigError(
                    "this state was saved inside DataLoader worker "
                    f"{worker_part.get('worker')}; load it in a worker (as torchdata's "
                    "StatefulDataLoader does), or save with num_workers=0"
                )
            self._worker_resume = {
                "epoch": state.epoch,
                "start": state.sample_in_epoch,
                "worker": int(worker_part["worker"]),
                "num_workers": int(worker_part["num_workers"]),
                "yielded": int(worker_part["yielded"]),
            }
            return
        if exact_end and state.sample_in_epoch >= self.plan(state.epoch).num_samples:
            self._epochs.reset(state.epoch, self.plan(state.epoch).num_samples, keep_end=True)
        else:
            self._epochs.reset(*self._normal(state.epoch, state.sample_in_epoch))
        self._worker_resume = self._worker_next = None

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
