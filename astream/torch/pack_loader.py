"""Packed sequences through a torch DataLoader (``pack_to=``): the loader side.

Theory of operation
-------------------
:class:`PackView` is the ``IterableDataset`` a :class:`~astream.StreamingDataLoader` hands to
torch for a packing dataset: each item (or each stacked batch, with ``batch_format``) carries
the cursor of its stream after it, under :data:`astream.packing.KEY`. :class:`PackCollate`
(in the worker) takes the cursor out of a batch's last item before the user's ``collate_fn``
sees the items, and returns ``(batch, cursor)``. :class:`LoaderPack` (in the main process)
unwraps that pair, keeps each stream's latest cursor and which stream comes next, and turns them
into the rank's checkpoint (:func:`astream.packing.make_state`). The cursor of a batch is that
of the batch the trainer received, whatever the workers have prefetched beyond it.

With ``batch_format`` in a DataLoader worker, the ``batch_size`` sequences of a batch are
copied straight into a slot of the worker's shared-memory ring (:class:`astream.packing.
PackedBatch` is the stacking, :class:`astream.torch.shm.WorkerRing` the ring) and the worker
yields ``(SlotBatch handle, cursor)``: the DataLoader moves a few hundred bytes per batch, and
the main process gets ``[batch_size, pack_to]`` tensors (or arrays) viewing the slot. The
values are those of stacking the sequences in private memory (``num_workers=0``,
``ds.batches()``), which the same :class:`~astream.packing.PackedBatch` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from torch.utils.data import default_collate, default_convert

from astream.core.world import World
from astream.errors import ConfigError
from astream.packing import KEY, PackedBatch, chunks, group, iter_packed, make_state
from astream.runtime.placement import dataloader_worker, detect
from astream.torch.batches import RingView
from astream.torch.shm import WorkerRing

__all__ = ["LoaderPack", "PackCollate", "PackView", "pack_loader_args"]


class PackView(RingView):
    """Packed sequences of ``dataset`` (with their cursors when ``carry``); ``size``: stacked
    ``size`` at a time and converted to ``batch_format``. In a DataLoader worker with
    ``shared_memory`` (the default), each stacked batch is built in the worker's ring of
    ``ring`` shared-memory slots and handed over as a handle (:mod:`astream.torch.shm`)."""

    def __init__(
        self,
        dataset: Any,
        size: int | None = None,
        batch_format: str | None = None,
        drop_last: bool = False,
        carry: bool = True,
        shared_memory: bool = True,
        ring: int = 4,
    ) -> None:
        self._init_ring(shared_memory, ring)
        self.dataset = dataset
        self.size = size
        self.batch_format = batch_format
        self.drop_last = drop_last
        self.carry = carry

    def __iter__(self) -> Iterator[Any]:
        items = iter_packed(self.dataset, carry=self.carry)
        if self.size is None:
            return items
        assert self.batch_format is not None
        me = dataloader_worker()
        if me is not None and self.shared_memory:
            ring = self._ring
            if ring is None or ring.pid != os.getpid():
                ring = self._ring = WorkerRing(self.group, me[0], self.ring)
            return _handed(chunks(items, self.size, self.drop_last), ring,
                           self.batch_format == "torch")  # fmt: skip
        convert = self.dataset._batch_converter(self.batch_format)
        return (_converted(b, convert) for b in group(items, self.size, self.drop_last))


def _handed(
    bufs: Iterator[list[dict[str, Any]]], ring: WorkerRing, as_torch: bool
) -> Iterator[Any]:
    """Each chunk of sequences stacked in a ring slot: its handle, with the chunk's cursor
    (``(handle, cursor)``) when the sequences carry one."""
    for buf in bufs:
        cur = buf[-1].get(KEY)
        handle = ring.finish(PackedBatch(buf), as_torch)  # type: ignore[arg-type]
        yield handle if cur is None else (handle, cur)


def _converted(batch: dict[str, Any], convert: Callable[[dict[str, Any]], Any]) -> Any:
    cur = batch.pop(KEY, None)
    out = convert(batch)
    if cur is not None:
        out[KEY] = cur
    return out


class PackCollate:
    """``collate_fn`` of a packing loader: ``(fn(items without the cursor), cursor)``."""

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __call__(self, items: Any) -> tuple[Any, tuple[int, int, int]]:
        if isinstance(items, tuple):  # a batch in a shared-memory slot: (handle, cursor)
            return self.fn(items[0]), items[1]
        if isinstance(items, dict):  # automatic batching off: one item (or stacked batch)
            cur = items.pop(KEY)
            return self.fn(items), cur
        cur = items[-1][KEY]
        for x in items:
            x.pop(KEY, None)
        return self.fn(items), cur


def _identity(x: Any) -> Any:
    return x


def pack_loader_args(
    ds: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    batch_format: str | None,
    ragged: str,
    shared_memory: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The view and DataLoader arguments of a ``StreamingDataLoader`` over a packing dataset.
    The loader's ``batch_size`` counts sequences; the dataset's (samples per planned batch,
    the unit dealt to ranks and workers) defaults to it. ``shared_memory``: stacked batches
    (``batch_format``) cross from workers through their rings, else by torch's pickling."""
    if args:
        raise ConfigError(
            "StreamingDataLoader over a packing dataset (pack_to=): pass the DataLoader's "
            "arguments by keyword (batch_size=..., num_workers=...)"
        )
    for name in ("sampler", "batch_sampler", "shuffle"):
        if kwargs.get(name) not in (None, False):
            raise ConfigError(f"{name} does not apply to a StreamingDataset loader")
    bs = kwargs.get("batch_size", 1)
    if bs is not None and (isinstance(bs, bool) or not isinstance(bs, int) or bs < 1):
        raise ConfigError(f"batch_size must be an int >= 1 or None, got {bs!r}")
    if ds.batch_size is None and bs is not None:
        ds.batch_size = bs
    if batch_format is None:
        fn = kwargs.get("collate_fn")
        if fn is None:
            fn = default_collate if bs is not None else default_convert
        kwargs["collate_fn"] = PackCollate(fn)
        return PackView(ds), kwargs
    if kwargs.get("collate_fn") is not None:
        raise ConfigError(
            "collate_fn cannot be combined with batch_format: the batch is built as columns by "
            "astream (drop batch_format to collate sequences yourself)"
        )
    if bs is None:
        raise ConfigError("batch_format needs batch_size >= 1, got None")
    if ragged != "pad":
        raise ConfigError(
            f"ragged={ragged!r} does not apply with pack_to: packed sequences all have "
            "pack_to tokens"
        )
    ds._batch_converter(batch_format)  # checks the name
    drop_last = bool(kwargs.pop("drop_last", False))
    kwargs.update(batch_size=None, collate_fn=PackCollate(_identity))
    return PackView(ds, bs, batch_format, drop_last, shared_memory=shared_memory), kwargs


class LoaderPack:
    """The main process's view of a packing loader's progress (see the module docstring)."""

    def __init__(self) -> None:
        self.state: tuple[int, int, World, int] | None = None
        self.cursors: list[list[int]] = []
        self.next = 0
        self.done = False

    def begin(self, ds: Any, epoch: int, start: int, workers: int) -> None:
        place = detect(ds.cfg.replication)
        w = place.world
        world = World(w.num_nodes, w.ranks_per_node, workers)
        begin, rot, cursors = ds._pack_shared.resolve(epoch, start, world)
        self.state = (epoch, begin, world, place.rank)
        self.cursors = cursors.tolist() if cursors is not None else [[0, 0]] * workers
        self.next = rot
        self.done = False

    def record(self, out: Any) -> Any:
        batch, cur = out
        stream, samples, offset = (int(x) for x in cur)
        self.cursors[stream] = [samples, offset]
        self.next = (stream + 1) % len(self.cursors)
        return batch

    def state_dict(self, ds: Any) -> dict[str, Any]:
        if self.state is None:  # never iterated: where the next iteration starts
            epoch, start = ds._next_position()
            return ds._state(epoch, start, detect(ds.cfg.replication).world)  # type: ignore[no-any-return]
        epoch, start, world, rank = self.state
        if self.done:
            return ds._state(epoch + 1, 0, world)  # type: ignore[no-any-return]
        return make_state(ds, epoch, start, world, rank, self.cursors, self.next)
