"""``StreamingDataLoader``: a torch DataLoader that can checkpoint and resume mid-epoch.

Theory of operation
-------------------
Before it starts (or, with ``persistent_workers=True``, resumes) its workers, the loader settles
in the main process which epoch runs and from which global position (a fresh epoch, or what
``load_state_dict`` asked for), and writes that into the epoch state the dataset shares with its
workers (see :mod:`astream.dataset`); every worker's next iteration runs that epoch slice. The
loader counts the samples it has handed out; ``state_dict`` turns that into a global position by
multiplying by the number of (replica) ranks -- every rank consumes the same number of batches
per step. Resuming on another World or with another ``num_workers`` works because the epoch plan
deals any global position to any World.

``len(loader)`` is the whole epoch's batches for this rank, before and after ``load_state_dict``
(as the reference's, and as Lightning expects when it restores a loader mid-epoch);
:meth:`StreamingDataLoader.remaining_len` is what is left of a resumed epoch.
"""

from __future__ import annotations

import gc
import itertools
import multiprocessing
import os
import threading
import warnings
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.fetch import _IterableDatasetFetcher
from torch.utils.data._utils.pin_memory import pin_memory as _pin
from torch.utils.data.dataloader import _InfiniteConstantSampler, _SingleProcessDataLoaderIter

from astream import bridge
from astream.core.batchdecode import batch_rows
from astream.core.world import World
from astream.errors import ConfigError
from astream.runtime.lead import LeadEnds, close_writers, open_pipes
from astream.runtime.placement import detect
from astream.torch.batches import identity as _identity
from astream.torch.dataset import StreamingDataset
from astream.torch.shm import RingCollate, adopt_premade

__all__ = ["StreamingDataLoader"]

# the longest the workers' start waits for the first answer to the main process's reads of
# their first batches (runtime/lead.py); on a stalled server they start after it regardless
_LEAD_HEAD_START_S = 0.1


def _batch_len(batch: Any) -> int:
    """Samples in one collated batch: a tensor/array (rows), a dict of columns (its first
    column), a list of columns (tensors), or a plain list of samples."""
    if hasattr(batch, "shape") and len(batch.shape):
        return int(batch.shape[0])
    if isinstance(batch, dict):
        return _batch_len(next(iter(batch.values()))) if batch else 0
    if isinstance(batch, (list, tuple)):
        if batch and hasattr(batch[0], "shape") and len(batch[0].shape):
            return int(batch[0].shape[0])  # default_collate of tuple samples: column tensors
        return len(batch)
    return 1


class _EpochSampler(_InfiniteConstantSampler):
    """The index sampler of an iterable-dataset loader, with the ``set_epoch`` that trainers
    (Lightning, the Hugging Face Trainer) call on a loader's sampler at each epoch start."""

    def __init__(self, loader: StreamingDataLoader) -> None:
        super().__init__()
        self._loader = weakref.ref(loader)

    def set_epoch(self, epoch: int) -> None:
        loader = self._loader()
        if loader is not None:
            loader.set_epoch(epoch)


class _ListFetcher(_IterableDatasetFetcher):
    """torch's fetcher of an iterable dataset, fed one list iterator of decoded samples per
    planned batch (``StreamingCore._sample_lists``) instead of one sample per ``next``: a
    loader batch is the next ``batch_size`` samples of those lists, the last one short
    (dropped with ``drop_last``), exactly as torch's fetcher cuts the sample stream. Samples
    are taken from the shared list iterators, so the dataset's own count of consumed samples
    moves as it does under torch's fetcher."""

    def __init__(self, dataset: Any, lists: Any, batch_size: int, collate_fn: Any, drop: bool):
        self.dataset = dataset
        self.auto_collation = True
        self.collate_fn = collate_fn
        self.drop_last = drop
        self.dataset_iter = lists
        self.ended = False
        self.batch_size = batch_size
        self._it: Any = None  # the current planned batch's list iterator

    def take(self) -> Any:
        """The next loader batch, collated (StopIteration at the end)."""
        if self.ended:
            raise StopIteration
        bs = self.batch_size
        it = self._it
        if it is None:  # the common case: a planned batch is a loader batch
            try:
                it = next(self.dataset_iter)
            except StopIteration:
                self.ended = True
                raise
            if it.__length_hint__() == bs:
                return self.collate_fn(list(it))
        data = list(itertools.islice(it, bs))
        while len(data) < bs:
            try:
                it = next(self.dataset_iter)
            except StopIteration:
                self.ended = True
                it = None
                break
            data += itertools.islice(it, bs - len(data))
        self._it = it if it is not None and it.__length_hint__() else None
        if not data or (self.drop_last and len(data) < bs):
            raise StopIteration
        return self.collate_fn(data)

    def fetch(self, possibly_batched_index: Any) -> Any:
        return self.take()


class _LeanIter(_SingleProcessDataLoaderIter):
    """torch's ``num_workers=0`` iterator for a StreamingDataLoader, less the per-batch work
    that does nothing here: the profiler range (kept while a torch profiler records), the
    index sampler (an iterable dataset's yields only ``None``) and, for sample dicts, one
    generator step per sample (:class:`_ListFetcher`). Batches, their order, ``pin_memory``,
    the warning past ``len`` and the end are torch's."""

    def __init__(self, loader: StreamingDataLoader, lists: Any) -> None:
        if lists is None:
            super().__init__(loader)  # batch_format: the view's items are whole batches
            self._take = self._next_item
        else:
            # torch's __init__ less its fetcher, which would start a second iteration
            super(_SingleProcessDataLoaderIter, self).__init__(loader)
            if self._timeout != 0:
                raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
            self._dataset_fetcher = _ListFetcher(
                self._dataset, lists, int(loader.batch_size or 1), self._collate_fn, self._drop_last
            )
            self._take = self._dataset_fetcher.take

    def _next_item(self) -> Any:
        return self._collate_fn(next(self._dataset_fetcher.dataset_iter))

    def _next_data(self) -> Any:
        data = self._take()
        if self._pin_memory:
            data = _pin(data, self._pin_memory_device)  # type: ignore[no-untyped-call]
        return data

    def __next__(self) -> Any:
        if torch.autograd._profiler_enabled():  # type: ignore[attr-defined]
            return super().__next__()
        data = self._next_data()
        self._num_yielded += 1
        limit = self._IterableDataset_len_called
        if limit is not None and self._num_yielded > limit:
            warnings.warn(
                f"Length of IterableDataset {self._dataset} was reported to be {limit}"
                f"(when accessing len(dataloader)), but {self._num_yielded} samples have been "
                "fetched. ",
                stacklevel=2,
            )
        return data


class StreamingDataLoader(DataLoader):  # type: ignore[type-arg]
    """``torch.utils.data.DataLoader`` plus ``state_dict``/``load_state_dict``.

    ``batch_format="numpy"|"torch"`` (with ``ragged="pad"|"offsets"``): each batch is a dict
    of columns decoded as a whole, handed over from workers through shared memory
    (docs/batches.md); ``collate_fn`` does not apply then.

    ``handover``: how batches cross from DataLoader workers. ``None`` (default) or ``"ring"``:
    through each worker's ring of shared-memory slots (collated batches: the CPU tensors the
    ``collate_fn`` returns, in plain dicts/lists/tuples, are copied into a slot and a handle
    crosses); ``"torch"``: torch's own pickling (a shared-memory segment per tensor).
    With ``pack_to``, stacked batches (``batch_format``) follow ``handover`` the same way;
    packed sequences collated by a ``collate_fn`` always use torch's pickling.
    """

    def __init__(
        self,
        dataset: StreamingDataset,
        *args: Any,
        batch_format: str | None = None,
        ragged: str = "pad",
        handover: str | None = None,
        **kwargs: Any,
    ) -> None:
        if handover not in (None, "ring", "torch"):
            raise ConfigError(f"handover must be 'ring' or 'torch', got {handover!r}")
        if not isinstance(dataset, StreamingDataset):
            raise ConfigError(
                f"StreamingDataLoader needs an astream StreamingDataset, got {type(dataset)!r}"
            )
        self._core = dataset
        self._columns = batch_format is not None
        self._pack: Any = None
        self._worker_iter = 0  # iterations of the current (persistent) workers, from 0
        if dataset.pack is not None:  # pack_to: sequences with their cursors (torch/pack_loader.py)
            if handover == "ring" and batch_format is None:
                raise ConfigError(
                    "handover='ring' with pack_to and no batch_format: packed sequences "
                    "collated by a collate_fn are handed over by torch's own pickling (pass "
                    "batch_format to stack packed batches in the workers' rings)"
                )
            from astream.torch.pack_loader import LoaderPack, pack_loader_args

            dataset, kwargs = pack_loader_args(
                dataset, args, kwargs, batch_format, ragged, shared_memory=handover != "torch"
            )
            self._pack, self._columns, args = LoaderPack(), False, ()
        elif batch_format is not None:
            ring = handover != "torch"
            dataset, kwargs = self._batch_mode(dataset, args, kwargs, batch_format, ragged, ring)
            args = ()
        super().__init__(dataset, *args, **kwargs)
        if (
            not self._columns
            and self._pack is None
            and handover != "torch"
            and self.num_workers > 0
            and self.batch_sampler is not None
        ):
            # collated batches cross through the workers' shared-memory rings (torch/shm.py)
            self.collate_fn = RingCollate(self.collate_fn)
        from astream.shared import MAX_WORKERS

        if self.num_workers > MAX_WORKERS:
            raise ConfigError(
                f"num_workers={self.num_workers} is above the supported maximum {MAX_WORKERS} "
                "DataLoader workers per rank"
            )
        core = self._core
        if self._columns or self._pack is not None:
            pass  # the batch size was settled by _batch_mode / pack_loader_args
        elif core.batch_size is None and self.batch_size is not None:
            core.batch_size = self.batch_size
        elif (
            core.batch_size is not None
            and self.batch_size is not None
            and core.batch_size != self.batch_size
        ):
            raise ConfigError(
                f"StreamingDataLoader batch_size={self.batch_size} differs from the dataset's "
                f"batch_size={core.batch_size}; they must match for exact resumption"
            )
        self.num_samples_yielded = 0
        self._start = 0
        # [True] while the main process's reads of the workers' first batches may go on
        self._lead_live: list[bool] = [False]
        if self.batch_sampler is not None:
            self.batch_sampler.sampler = _EpochSampler(self)  # type: ignore[attr-defined]

    @staticmethod
    def _batch_mode(
        ds: StreamingDataset,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        batch_format: str,
        ragged: str,
        shared_memory: bool = True,
    ) -> tuple[Any, dict[str, Any]]:
        """The batch view and DataLoader arguments of a ``batch_format`` loader."""
        if args:
            raise ConfigError(
                "StreamingDataLoader(batch_format=...): pass the DataLoader's arguments by "
                "keyword (batch_size=..., num_workers=...)"
            )
        if kwargs.get("collate_fn") is not None:
            raise ConfigError(
                "collate_fn cannot be combined with batch_format: the batch is built as "
                "columns by astream (drop batch_format to collate samples yourself)"
            )
        for name in ("sampler", "batch_sampler", "shuffle"):
            if kwargs.get(name) not in (None, False):
                raise ConfigError(f"{name} does not apply to a StreamingDataset loader")
        bs = kwargs.pop("batch_size", 1)
        if bs is None or isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
            raise ConfigError(f"batch_format needs batch_size >= 1, got {bs!r}")
        if ds.batch_size is None:
            ds.batch_size = bs
        elif ds.batch_size != bs:
            raise ConfigError(
                f"StreamingDataLoader batch_size={bs} differs from the dataset's "
                f"batch_size={ds.batch_size}; they must match for exact resumption"
            )
        drop_last = bool(kwargs.pop("drop_last", False))
        view = ds.batch_view(
            batch_format, ragged=ragged, drop_last=drop_last, shared_memory=shared_memory
        )
        kwargs.update(batch_size=None, collate_fn=_identity)
        return view, kwargs

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next, unless it is the epoch the next iteration already runs (perhaps
        resuming mid-way from ``load_state_dict``, which this keeps). Trainers call it at every
        epoch start, which is how a checkpoint taken at an epoch's end resumes in the next."""
        ds = self._core
        if ds._normal(*ds._epochs.owner_next())[0] != epoch:
            ds.set_epoch(epoch)

    def _get_iterator(self) -> Any:
        """torch's iterator, with this process's objects frozen while it forks the workers:
        a forked worker's garbage collector then never walks the objects it inherited (torch's
        and the trainer's heap), so its first collections neither cost a full pass over them
        nor touch, and so copy, their pages (the Python docs' advice for fork without exec)."""
        if self.num_workers == 0:
            if self._pack is not None or self.timeout != 0:
                return super()._get_iterator()
            if self._columns:
                return _LeanIter(self, None)
            if self._auto_collation and self.dataset is self._core:
                lists = self._core._sample_lists()
                if lists is not None:
                    return _LeanIter(self, lists)
            return super()._get_iterator()
        lead = self._lead_plan()
        # the workers' copies of the dataset carry this loader's token: their iterations are
        # counted against the loader's (dataset._Epochs.set_iteration), a plain DataLoader's not
        core = self._core
        core._loader_token = token = int.from_bytes(os.urandom(7), "little") + 1
        self._worker_iter = 0
        core._epochs.set_iteration(0, token)
        ring = self.collate_fn if isinstance(self.collate_fn, RingCollate) else None
        premade = ring.premake(self.num_workers) if ring is not None and self._forks() else None
        live = self._lead_live = [lead is not None]
        submitted = frozen = False
        try:
            if lead is not None:  # the first batches' GETs go out while torch starts the workers
                under_way = threading.Event()
                bridge.submit(self._core.engine.lead_first(lead[2], lead[1], live, under_way))
                submitted = True
                # a fork parks the loop thread (astream/bridge.py): first let the requests
                # reach the server, which then answers them during the forks (runtime/lead.py)
                under_way.wait(_LEAD_HEAD_START_S)
            gc.freeze()
            frozen = True
            it = super()._get_iterator()
        except BaseException:
            if lead is not None:
                live[0] = False  # no GET starts now; each message then finds no reader
                self._core.engine._lead = None
                lead[0].close()
                if not submitted:  # no reads to drop the write ends
                    close_writers(lead[1])
            if premade is not None:
                for fds in premade.values():
                    for fd in fds:
                        os.close(fd)
            raise
        finally:
            if frozen:
                gc.unfreeze()
            core._loader_token = None
            if ring is not None:
                ring._premade = None  # forked: a later fork must not inherit them
        if premade is not None:
            assert ring is not None
            for w, proc in enumerate(it._workers):  # type: ignore[attr-defined]
                adopt_premade(ring.group, w, proc.pid, premade[w])
        if lead is not None:
            self._core.engine._lead = None
            lead[0].close()  # the workers hold their read ends now
        return it

    def _forks(self) -> bool:
        """Whether this loader's workers are forked (what :meth:`RingOwner.premake` needs)."""
        ctx = self.multiprocessing_context
        method = ctx.get_start_method() if ctx is not None else multiprocessing.get_start_method()
        return bool(method == "fork")

    def _lead_plan(self) -> tuple[LeadEnds, list[Any], list[Any]] | None:
        """Before the workers start: the pipes and each worker's first-batch ranges, when this
        process is to read them while the workers start (astream/runtime/lead.py): a cold
        iteration that reads by ranges at all, of samples (not packed sequences)."""
        ds = self._core
        engine = ds.engine
        if (
            self._pack is not None
            or ds.cfg.batch_size is None
            or ds._worker_resume is not None
            or not engine._may_range()
        ):
            return None
        epoch, start = ds._current  # set by __iter__ (_take_epoch)
        try:
            place = detect(ds.cfg.replication)
            w = place.world
            world = World(w.num_nodes, w.ranks_per_node, self.num_workers)
            plan = ds.plan(epoch)
            per_worker = []
            for worker in range(self.num_workers):
                first = next(iter(plan.worker_batches(world, place.rank, worker, start)), None)
                per_worker.append([] if first is None else engine.lead_wants(first))
        except Exception:  # whatever it is, each worker meets it (and reports it) itself
            return None
        if not any(per_worker):
            return None
        ends, writers = open_pipes(self.num_workers)
        engine._lead = ends
        return ends, writers, per_worker

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds = self._core
        epoch, start = ds._take_epoch()
        gen = ds._epochs.reset(epoch, start)  # what every worker's next iteration runs
        if self.num_workers > 0 and self.persistent_workers and self._iterator is not None:
            # the next iteration of persistent workers (new ones: _get_iterator); one of them
            # still starting an earlier iteration runs that one empty (dataset._Epochs)
            self._worker_iter += 1
            ds._epochs.set_iteration(self._worker_iter)
        self._start = start
        self.num_samples_yielded = 0
        pack = self._pack
        if pack is not None:
            pack.begin(ds, epoch, start, max(1, self.num_workers))
        try:
            count = batch_rows if self._columns else _batch_len
            engine = ds.engine
            for batch in super().__iter__():
                if pack is not None:
                    batch = pack.record(batch)
                self.num_samples_yielded += count(batch)
                # this process read the workers' first batches by ranges (runtime/lead.py):
                # their shards' files, once downloaded by any worker, hold those versions
                engine.sweep_versions()
                yield batch
            if pack is not None:
                pack.done = True
        finally:
            self._lead_live[0] = False  # an iteration left early: no GET starts past it
            ds._current = (epoch, start)
            if ds._epochs.generation() == gen:  # no set_epoch/load_state_dict since
                ds._epochs.reset(epoch + 1, 0)

    def remaining_len(self) -> int:
        """Batches this rank's next iteration yields (fewer than ``len`` after resuming)."""
        ds = self._core
        if self._pack is not None:
            raise ConfigError(
                "remaining_len with pack_to: the number of packed sequences depends on the "
                "token counts of samples not read yet"
            )
        n = ds.remaining_len()
        bs = ds.cfg.batch_or_1 if self._columns else self.batch_size or 1
        drop = self.dataset.drop_last if self._columns else self.drop_last  # type: ignore[attr-defined]
        return n // bs if drop else -(-n // bs)

    def _ranks(self) -> int:
        ds = self._core
        return detect(ds.cfg.replication).world.num_ranks

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state at the samples this loader has yielded (all ranks)."""
        ds = self._core
        if self._pack is not None:
            return self._pack.state_dict(ds)  # type: ignore[no-any-return]
        consumed = self.num_samples_yielded * self._ranks()
        return ds.state_dict(consumed, from_beginning=False)

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        ds = self._core
        ds.load_state_dict(obj)
        self.num_samples_yielded = 0
