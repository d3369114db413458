"""Column batches through a torch DataLoader: the dataset side of ``batch_format=``.

Theory of operation
-------------------
:class:`BatchDataset` is an ``IterableDataset`` over an astream ``StreamingDataset`` whose
items are whole planned batches (``{column: tensor or array}``), for a DataLoader with
automatic batching off (``batch_size=None``). ``StreamingDataLoader(ds, batch_size=B,
batch_format=...)`` builds one; with a plain DataLoader the recipe is
``DataLoader(ds.batch_view(batch_format="torch"), batch_size=None, num_workers=N)``.

In the main process (``num_workers=0``) a batch is decoded into private memory. In a
DataLoader worker it is decoded into the worker's shared-memory ring and handed over as a
handle (:mod:`astream.torch.shm`). Either way the order, epochs, ``state_dict`` and resumption
are those of the wrapped dataset: the view holds it and runs its iteration machinery.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from torch.utils.data import IterableDataset

from astream.runtime.placement import dataloader_worker as _worker
from astream.torch.shm import RingOwner, WorkerRing

__all__ = ["BatchDataset", "RingView", "identity"]


def identity(x: Any) -> Any:
    """The collate function of a loader of whole batches (module level: spawn pickles it)."""
    return x


class RingView(RingOwner, IterableDataset):  # type: ignore[type-arg]
    """What the batch views share: in a DataLoader worker with ``shared_memory``, batches are
    built in that worker's ring of ``ring`` slots (:class:`~astream.torch.shm.RingOwner`)."""

    def _init_ring(self, shared_memory: bool, ring: int) -> None:
        from astream.errors import ConfigError

        if isinstance(ring, bool) or not isinstance(ring, int) or ring < 1:
            raise ConfigError(f"ring must be an int >= 1, got {ring!r}")
        self.shared_memory = bool(shared_memory)
        self._own_ring(ring)


class BatchDataset(RingView):
    """Planned batches of ``dataset`` as items (see the module docstring)."""

    def __init__(
        self,
        dataset: Any,
        batch_format: str = "torch",
        ragged: str = "pad",
        drop_last: bool = False,
        shared_memory: bool = True,
        ring: int = 4,
    ) -> None:

        dataset._check_batch_output(None, ragged)
        dataset._batch_converter(batch_format)  # checks the name
        self._init_ring(shared_memory, ring)
        self.dataset = dataset
        self.batch_format = batch_format
        self.ragged = ragged
        self.drop_last = bool(drop_last)

    def __iter__(self) -> Iterator[Any]:
        ds = self.dataset
        convert = ds._batch_converter(self.batch_format)
        me = _worker()
        finish = None
        if me is not None and self.shared_memory:
            ring = self._ring
            if ring is None or ring.pid != os.getpid():
                ring = self._ring = WorkerRing(self.group, me[0], self.ring)
            as_torch = self.batch_format == "torch"

            def finish(cb: Any) -> Any:
                return ring.finish(cb, as_torch)

        return ds._column_batches(convert, self.ragged, self.drop_last, finish)  # type: ignore[no-any-return]

    def __len__(self) -> int:
        """Batches of this rank's next epoch (the whole epoch, as ``len`` of the dataset)."""
        n = len(self.dataset)
        bs = int(self.dataset.cfg.batch_or_1)
        return n // bs if self.drop_last else -(-n // bs)
