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

import weakref
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _InfiniteConstantSampler

from astream.errors import ConfigError
from astream.placement import detect
from astream.torch.dataset import StreamingDataset

__all__ = ["StreamingDataLoader"]


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


class StreamingDataLoader(DataLoader):  # type: ignore[type-arg]
    """``torch.utils.data.DataLoader`` plus ``state_dict``/``load_state_dict``."""

    def __init__(self, dataset: StreamingDataset, *args: Any, **kwargs: Any) -> None:
        if not isinstance(dataset, StreamingDataset):
            raise ConfigError(
                f"StreamingDataLoader needs an astream StreamingDataset, got {type(dataset)!r}"
            )
        super().__init__(dataset, *args, **kwargs)
        from astream.dataset import MAX_WORKERS

        if self.num_workers > MAX_WORKERS:
            raise ConfigError(
                f"num_workers={self.num_workers} is above the supported maximum {MAX_WORKERS} "
                "DataLoader workers per rank"
            )
        if dataset.batch_size is None and self.batch_size is not None:
            dataset.batch_size = self.batch_size
        elif (
            dataset.batch_size is not None
            and self.batch_size is not None
            and dataset.batch_size != self.batch_size
        ):
            raise ConfigError(
                f"StreamingDataLoader batch_size={self.batch_size} differs from the dataset's "
                f"batch_size={dataset.batch_size}; they must match for exact resumption"
            )
        self.num_samples_yielded = 0
        self._start = 0
        if self.batch_sampler is not None:
            self.batch_sampler.sampler = _EpochSampler(self)  # type: ignore[attr-defined]

    def set_epoch(self, epoch: int) -> None:
        """Run ``epoch`` next, unless it is the epoch the next iteration already runs (perhaps
        resuming mid-way from ``load_state_dict``, which this keeps). Trainers call it at every
        epoch start, which is how a checkpoint taken at an epoch's end resumes in the next."""
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        if ds._normal(*ds._epochs.owner_next())[0] != epoch:
            ds.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        epoch, start = ds._take_epoch()
        gen = ds._epochs.reset(epoch, start)  # what every worker's next iteration runs
        self._start = start
        self.num_samples_yielded = 0
        try:
            for batch in super().__iter__():
                self.num_samples_yielded += _batch_len(batch)
                yield batch
        finally:
            ds._current = (epoch, start)
            if ds._epochs.generation() == gen:  # no set_epoch/load_state_dict since
                ds._epochs.reset(epoch + 1, 0)

    def remaining_len(self) -> int:
        """Batches this rank's next iteration yields (fewer than ``len`` after resuming)."""
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        n = ds.remaining_len()
        bs = self.batch_size or 1
        return n // bs if self.drop_last else -(-n // bs)

    def _ranks(self) -> int:
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        return detect(ds.cfg.replication).world.num_ranks

    def state_dict(self) -> dict[str, Any]:
        """The dataset's state at the samples this loader has yielded (all ranks)."""
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        consumed = self.num_samples_yielded * self._ranks()
        return ds.state_dict(consumed, from_beginning=False)

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        ds: StreamingDataset = self.dataset  # type: ignore[assignment]
        ds.load_state_dict(obj)
        self.num_samples_yielded = 0
