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

Epochs: every ``__iter__`` in the process that owns the dataset starts the next epoch (or the
one a checkpoint resumes). DataLoader workers are copies, so :class:`StreamingDataLoader`
settles the epoch in the main process before it starts its workers; with a plain torch
DataLoader and workers, call ``set_epoch`` yourself.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import numpy as np

from astream.core.state import LoaderState
from astream.errors import CacheError
from astream.placement import detect
from astream.runtime.catalog import Catalog, check_hash_available
from astream.runtime.config import DatasetConfig, resolve_sources
from astream.runtime.engine import Engine
from astream.runtime.stats import Stats

__all__ = ["StreamingCore"]


class StreamingCore:
    """Stream MDS samples from ``remote`` (cached under ``local``) in a planned order.

    Parameters follow mosaicml-streaming's ``StreamingDataset``; see docs/migrating.md for the
    few whose meaning differs. ``astream.StreamingDataset`` is this plus torch's
    ``IterableDataset``; asyncio programs without torch can use this class directly
    (``astream.aio.AsyncStreamingDataset``).
    """

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
        sampling_method: str = "balanced",
        sampling_granularity: int = 1,
        partition_algo: str = "relaxed",
        num_canonical_nodes: int | None = None,
        batch_size: int | None = None,
        shuffle: bool = False,
        shuffle_algo: str = "astream",
        shuffle_seed: int = 9176,
        shuffle_block_size: int | None = None,
        batching_method: str = "random",
        allow_unsafe_types: bool = False,
        replication: int | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        cfg = DatasetConfig.build(
            download_retry=download_retry,
            download_timeout=download_timeout,
            validate_hash=validate_hash,
            epoch_size=epoch_size,
            predownload=predownload,
            cache_limit=cache_limit,
            sampling_method=sampling_method,
            sampling_granularity=sampling_granularity,
            partition_algo=partition_algo,
            num_canonical_nodes=num_canonical_nodes,
            batch_size=batch_size,
            shuffle=shuffle,
            shuffle_algo=shuffle_algo,
            shuffle_seed=shuffle_seed,
            shuffle_block_size=shuffle_block_size,
            batching_method=batching_method,
            replication=replication,
        )
        self.cfg = cfg
        self.stream_specs, sources, stores = resolve_sources(
            streams, remote, local, split, cfg, storage_options
        )
        self.catalog = Catalog(sources)
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
        )
        self._next_epoch = 0
        self._resume: tuple[int, int] | None = None
        self._pinned: tuple[int, int] | None = None  # set by StreamingDataLoader for workers
        self._current: tuple[int, int] = (0, 0)  # (epoch, start) of the latest iteration
        self._plans: dict[tuple[int, int | None], Any] = {}

    def _warn_small_cache(self, avg_shard_samples: int) -> None:
        """A shuffle block spans several shards that are all read at once; a cache that cannot
        hold them refetches shards over and over (correct, but slow). Say so up front."""
        from astream.core.order import default_block_size

        block = self.cfg.shuffle_block_size or default_block_size(
            [spec.shard_sizes for spec in self.stream_specs]
        )
        spanned = min(len(self.catalog.shards), -(-block // avg_shard_samples) + 1)
        need = spanned * self.cfg.num_canonical_nodes * self.catalog.max_footprint
        assert self.cfg.cache_limit is not None
        if self.cfg.cache_limit < need:
            warnings.warn(
                f"cache_limit={self.cfg.cache_limit} bytes holds fewer shards than one shuffle "
                f"block reads at once (about {spanned} x {self.cfg.num_canonical_nodes} canonical "
                f"node(s) x {self.catalog.max_footprint} bytes = {need}): shards will be fetched "
                "again and again; raise cache_limit or lower shuffle_block_size",
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
    def shards(self) -> list[Any]:
        return self.catalog.entries

    @property
    def stats(self) -> Stats:
        """Counters of this process (bytes fetched, hits, misses, waits...)."""
        return self.engine.stats

    def cache_usage(self) -> int:
        """Bytes under the local directories now (what ``cache_limit`` bounds)."""
        return self.engine.space.usage()

    # -- the plan ------------------------------------------------------------------------------
    def plan(self, epoch: int) -> Any:
        """The epoch plan (cached for the latest epoch)."""
        kwargs = self.cfg.plan_kwargs()
        if self.cfg.batching_method == "stratified":
            # every global batch holds the exact stream proportions: the stratum is the
            # global batch, so it depends on the number of (replica) ranks
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

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run ``epoch`` from its start."""
        self._next_epoch = int(epoch)
        self._resume = None

    def _take_epoch(self) -> tuple[int, int]:
        if self._pinned is not None:
            return self._pinned
        if self._resume is not None:
            epoch, start = self._resume
        else:
            epoch, start = self._next_epoch, 0
        if start >= self.plan(epoch).num_samples:
            epoch, start = epoch + 1, 0
        self._resume = None
        self._next_epoch = epoch + 1
        self._current = (epoch, start)
        return epoch, start

    def _batches(self, epoch: int, start: int) -> Iterator[np.ndarray[Any, Any]]:
        place = detect(self.cfg.replication)
        return self.plan(epoch).worker_batches(place.world, place.rank, place.worker, start)  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        epoch, start = self._take_epoch()
        return self.engine.iter_samples(self._batches(epoch, start))

    async def aiter(self) -> AsyncIterator[dict[str, Any]]:
        """``async for sample in ds.aiter()``: the next epoch on the caller's loop, in the order
        the synchronous path gives with ``num_workers=0``. No thread is added."""
        epoch, start = self._take_epoch()
        async for sample in self.engine.aiter_samples(self._batches(epoch, start)):
            yield sample

    async def aclose(self) -> None:
        """Close the connections ``aiter``/``aget`` opened on the running loop."""
        await self.engine.aclose()

    async def aiter_batches(self) -> AsyncIterator[list[dict[str, Any]]]:
        """Like :meth:`aiter`, grouped into the planned per-device batches."""
        size = self.cfg.batch_or_1
        batch: list[dict[str, Any]] = []
        async for sample in self.aiter():
            batch.append(sample)
            if len(batch) == size:
                yield batch
                batch = []
        if batch:
            yield batch

    def __len__(self) -> int:
        """Samples this rank yields in the next epoch (all its workers together)."""
        epoch, start = self._pinned or self._resume or (self._next_epoch, 0)
        place = detect(self.cfg.replication)
        return int(self.plan(epoch).rank_num_samples(place.world, place.rank, start))

    # -- random access -------------------------------------------------------------------------
    def get_item(self, index: int) -> dict[str, Any]:
        n = self.catalog.num_samples
        i = int(index)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for {n} samples")
        return self.engine.get(i)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            return self.get_item(int(index))
        if isinstance(index, slice):
            return [self.get_item(i) for i in range(*index.indices(self.catalog.num_samples))]
        if isinstance(index, (np.ndarray, list, tuple)):
            return [self.get_item(int(i)) for i in np.asarray(index).reshape(-1)]
        raise TypeError(f"index must be an int, slice, list or array, got {type(index).__name__}")

    async def aget(self, index: int) -> dict[str, Any]:
        n = self.catalog.num_samples
        i = int(index) + (n if int(index) < 0 else 0)
        if not 0 <= i < n:
            raise IndexError(f"sample index {index} out of range for {n} samples")
        return await self.engine.aget(i)

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self, num_samples: int, from_beginning: bool) -> dict[str, Any]:
        """Where the job is: ``num_samples`` consumed by all ranks together, counted from the
        start of the epoch (``from_beginning``) or from where this iteration resumed. Keys are
        the reference's (:class:`~astream.core.state.LoaderState`)."""
        epoch, start = self._pinned or self._current
        pos = int(num_samples) if from_beginning else start + int(num_samples)
        world = detect(self.cfg.replication).world
        return LoaderState(
            epoch=epoch,
            sample_in_epoch=pos,
            shuffle_seed=self.cfg.shuffle_seed,
            num_canonical_nodes=self.cfg.num_canonical_nodes,
            initial_physical_nodes=world.num_nodes,
            initial_ranks_per_node=world.ranks_per_node,
        ).to_dict()

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume at ``obj`` (ours, or the reference's ``state_dict``) on the next iteration,
        on this or any other World."""
        state = LoaderState.from_dict(obj)
        changes: dict[str, Any] = {}
        for key in ("num_canonical_nodes", "shuffle_seed"):
            if getattr(state, key) != getattr(self.cfg, key):
                changes[key] = getattr(state, key)
        if changes:
            self.cfg = self.cfg.replace(**changes)
            self._plans.clear()
        self._resume = (state.epoch, state.sample_in_epoch)
        self._pinned = None

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
