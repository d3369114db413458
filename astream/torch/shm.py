"""Zero-copy hand-over of column batches from DataLoader workers: a ring of shared slots.

Theory of operation
-------------------
Each DataLoader worker owns a small ring of *slots*: anonymous shared memory
(``memfd_create``, no name in ``/dev/shm``) mapped in the worker. A batch is decoded straight
into a free slot (the columnar decoder's allocator is a bump allocator over it), and what the
worker yields is a :class:`SlotBatch`: a handle that pickles to a few hundred bytes -- the
slot's id, the batch's sequence number and each column's dtype/shape/offset. The slot's file
descriptor travels only the first time the slot is used (``multiprocessing``'s ``DupFd``, the
mechanism torch's own tensor sharing uses); the main process maps it once and keeps the map.
Unpickling in the main process builds the batch dict: torch tensors (numpy arrays for
``str`` columns) that are views of that map. Nothing is copied between the processes.

Reuse never overwrites a batch the trainer still holds. A slot's 64-byte header holds two
counters: the sequence number of the batch written into it (set by the worker) and of the
batch released (set by the main process when the last array or tensor viewing that batch is
garbage-collected: a ``weakref.finalize`` on the batch's base array, which every column view
keeps alive). The worker writes only into a slot whose two counters are equal. When every
slot of the ring is busy -- a trainer keeping many batches, or a slot too small for this
batch -- the worker makes a new slot (the ring holds at most ``ring`` slots; beyond that the
slot is used once and dropped by the worker after its hand-over, like torch's default
per-batch shared memory). It never waits for the trainer.

Lifetime: a memfd is freed by the kernel when the last descriptor and map of it go away, so a
worker that exits or is killed (``kill -9``) takes its slots with it, apart from the batches
the trainer still holds; a killed main process takes everything. The main process keeps the
maps of the slots of the latest worker process of each (loader, worker id); a new worker with
that id (a new epoch without ``persistent_workers``) drops the previous one's maps.
"""

from __future__ import annotations

import math
import mmap
import os
import threading
import uuid
import weakref
from multiprocessing.reduction import DupFd
from typing import Any

import numpy as np
import torch

from astream.core.batchdecode import ColumnBatch
from astream.runtime.placement import dataloader_worker as _worker

__all__ = ["RingCollate", "RingOwner", "SlotBatch", "TreeBatch", "WorkerRing", "mapped_slots"]

_HEAD = 64
_ALIGN = 64
_WROTE, _FREED = 0, 1


def _round(n: int, to: int) -> int:
    return -(-n // to) * to


class _Slot:
    __slots__ = ("announced", "capacity", "fd", "head", "id", "mm", "oneoff", "premade", "raw")

    def __init__(self, sid: int, capacity: int, oneoff: bool, fd: int = -1) -> None:
        self.id = sid
        self.capacity = capacity
        self.oneoff = oneoff
        self.premade = fd >= 0  # made by the main process before the fork: it has its own fd
        self.fd = fd if fd >= 0 else os.memfd_create(f"astream-batch-{sid}", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, capacity)
            self.mm = mmap.mmap(self.fd, capacity)
        except BaseException:
            os.close(self.fd)
            raise
        self.raw = np.frombuffer(self.mm, np.uint8)
        self.head = self.raw[:_HEAD].view(np.int64)
        self.announced = False

    def free(self) -> bool:
        return bool(self.head[_WROTE] == self.head[_FREED])

    def close(self) -> None:
        """The worker's side only: batches the trainer holds keep their own map."""
        self.raw = self.head = None  # type: ignore[assignment]
        try:
            self.mm.close()
        except BufferError:
            pass  # an array of this slot is still referenced in the worker
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class WorkerRing:
    """The slots of one DataLoader worker (made in the worker, on first use)."""

    def __init__(
        self,
        group: str,
        worker: int,
        ring: int = 4,
        min_bytes: int = 1 << 20,
        premade: list[int] | None = None,
    ) -> None:
        self.group = group
        self.worker = worker
        self.ring = ring
        self.min_bytes = min_bytes
        self.premade = list(premade or ())  # memfds the main process made for this worker
        self.slots: list[_Slot] = []
        self.retired: list[int] = []
        self._next_id = 0
        self.pid = os.getpid()
        self.lock = threading.Lock()  # handles pickle in the queue's feeder thread

    def _new(self, need: int, oneoff: bool) -> _Slot:
        cap = _round(max(self.min_bytes, need + need // 4 + _HEAD), mmap.PAGESIZE)
        premade = self.premade
        # slot k of the ring uses the main process's k-th premade memfd (see RingOwner.premake)
        fd = premade[self._next_id] if not oneoff and self._next_id < len(premade) else -1
        slot = _Slot(self._next_id, cap, oneoff, fd)
        self._next_id += 1
        return slot

    def take(self, need: int) -> _Slot:
        """A free slot of at least ``need`` bytes (after the header)."""
        with self.lock:
            free = [s for s in self.slots if s.free()]
            for s in free:
                if s.capacity - _HEAD >= need:
                    return s
            if free:  # free but too small: replace the smallest
                small = min(free, key=lambda s: s.capacity)
                self.slots.remove(small)
                self.retired.append(small.id)
                small.close()
            if len(self.slots) < self.ring:
                slot = self._new(need, oneoff=False)
                self.slots.append(slot)
                return slot
            return self._new(need, oneoff=True)

    def finish(self, cb: ColumnBatch, as_torch: bool) -> SlotBatch:
        """Decode ``cb`` into a free slot; the handle to yield."""
        slot = self.take(cb.nbytes_bound())
        at = [_HEAD]
        layout: list[tuple[str, str, tuple[int, ...], int]] = []
        raw = slot.raw

        def alloc(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
            start = at[0]
            n = int(np.prod(shape)) * dtype.itemsize
            if start + n > slot.capacity:
                raise AssertionError("batch outgrew its bound")  # nbytes_bound is an upper bound
            at[0] = _round(start + n, _ALIGN)
            return raw[start : start + n].view(dtype).reshape(shape)

        seq = int(slot.head[_WROTE]) + 1
        out = cb.finish(alloc)
        slot.head[_WROTE] = seq
        for key, arr in out.items():
            off = int(arr.__array_interface__["data"][0] - raw.__array_interface__["data"][0])
            layout.append((key, arr.dtype.str, tuple(arr.shape), off))
        return SlotBatch(self, slot, seq, layout, cb.size, as_torch)

    def put(self, obj: Any) -> Any:
        """Copy the CPU tensors of a collated batch (nested in plain dicts, lists and tuples)
        into a free slot: the handle to yield (``obj`` itself when it holds no such tensor)."""
        leaves: list[torch.Tensor] = []
        tree = _flatten(obj, leaves)
        if not leaves:
            return obj
        sizes = [t.numel() * t.element_size() for t in leaves]
        slot = self.take(sum(_round(n, _ALIGN) for n in sizes))
        raw = slot.raw
        at = _HEAD
        where: list[int] = []
        for t, n in zip(leaves, sizes):
            if n:
                raw[at : at + n] = t.reshape(-1).view(torch.uint8).numpy()
            where.append(at)
            at += _round(n, _ALIGN)
        seq = int(slot.head[_WROTE]) + 1
        slot.head[_WROTE] = seq
        return TreeBatch(self, slot, seq, _place(tree, leaves, where))

    def _reduce_args(self, slot: _Slot) -> tuple[Any, list[int]]:
        with self.lock:
            fd: Any = None
            if not slot.announced:
                fd = _PREMADE_FD if slot.premade else DupFd(slot.fd)
                slot.announced = True
                if slot.oneoff:
                    slot.close()  # DupFd holds its own duplicate until the main process takes it
            retired, self.retired = self.retired, []
            return fd, retired


class SlotBatch:
    """A batch in a worker's slot: pickles to a handle, unpickles to the batch dict."""

    __slots__ = ("as_torch", "layout", "ring", "rows", "seq", "slot")

    def __init__(
        self,
        ring: WorkerRing,
        slot: _Slot,
        seq: int,
        layout: list[tuple[str, str, tuple[int, ...], int]],
        rows: int,
        as_torch: bool,
    ) -> None:
        self.as_torch = as_torch
        self.ring = ring
        self.slot = slot
        self.seq = seq
        self.layout = layout
        self.rows = rows

    def __reduce__(self) -> Any:
        r, s = self.ring, self.slot
        fd, retired = r._reduce_args(s)
        owner = (r.group, r.worker, r.pid)
        args = (owner, s.id, s.capacity, s.oneoff, fd, retired, self.seq, self.layout)
        return _rebuild, (*args, self.as_torch)


class _T(tuple):  # type: ignore[type-arg]
    """A tensor of a collated batch in its slot: ``(offset, dtype, shape)``."""

    __slots__ = ()


def _ringable(t: Any) -> bool:
    """A plain dense CPU tensor whose bytes and shape say all of it (anything else -- a
    subclass, a view with strides, a tensor that needs grad -- goes through torch's pickling)."""
    return (
        type(t) is torch.Tensor
        and t.device.type == "cpu"
        and t.layout == torch.strided
        and not t.requires_grad
        and not t.is_quantized
        and not t.is_conj()
        and not t.is_neg()
        and not any(getattr(t, "names", None) or ())
        and t.is_contiguous()
    )


def _flatten(obj: Any, leaves: list[torch.Tensor]) -> Any:
    """``obj`` with each ringable tensor replaced by its index in ``leaves``, as an ``_T``; only
    exact ``dict``/``list``/``tuple`` containers are entered (any other object is kept, and
    pickled as usual)."""
    t = type(obj)
    if t is torch.Tensor and _ringable(obj):
        leaves.append(obj)
        return _T((len(leaves) - 1,))
    if t is dict:
        return {k: _flatten(v, leaves) for k, v in obj.items()}
    if t is list:
        return [_flatten(v, leaves) for v in obj]
    if t is tuple:
        return tuple(_flatten(v, leaves) for v in obj)
    return obj


def _place(tree: Any, leaves: list[torch.Tensor], where: list[int]) -> Any:
    t = type(tree)
    if t is _T:
        x = leaves[tree[0]]
        return _T((where[tree[0]], x.dtype, tuple(x.shape)))
    if t is dict:
        return {k: _place(v, leaves, where) for k, v in tree.items()}
    if t is list:
        return [_place(v, leaves, where) for v in tree]
    if t is tuple:
        return tuple(_place(v, leaves, where) for v in tree)
    return tree


def _unflatten(tree: Any, base: np.ndarray[Any, Any]) -> Any:
    t = type(tree)
    if t is _T:
        off, dtype, shape = tree
        n = math.prod(shape) * dtype.itemsize
        return torch.from_numpy(base[off : off + n]).view(dtype).view(shape)
    if t is dict:
        return {k: _unflatten(v, base) for k, v in tree.items()}
    if t is list:
        return [_unflatten(v, base) for v in tree]
    if t is tuple:
        return tuple(_unflatten(v, base) for v in tree)
    return tree


class TreeBatch:
    """A collated batch whose tensors are in a worker's slot: pickles to a handle (the
    batch's structure, its non-tensor values, each tensor's offset, dtype and shape),
    unpickles to the same structure with tensors that view the slot."""

    __slots__ = ("ring", "seq", "slot", "tree")

    def __init__(self, ring: WorkerRing, slot: _Slot, seq: int, tree: Any) -> None:
        self.ring = ring
        self.slot = slot
        self.seq = seq
        self.tree = tree

    def __reduce__(self) -> Any:
        r, s = self.ring, self.slot
        fd, retired = r._reduce_args(s)
        owner = (r.group, r.worker, r.pid)
        return _rebuild_tree, (owner, s.id, s.capacity, s.oneoff, fd, retired, self.seq, self.tree)


class RingOwner:
    """What owns a worker's ring of ``ring`` slots (a batch view, a collate wrapper): the ring
    is made in the worker on first use and never pickled; the main process's maps of its
    slots die with the owner.

    Premade slots (:meth:`premake`, forked workers only): a slot's descriptor normally
    crosses to the main process with the slot's first batch by ``DupFd`` -- a connection to
    the worker's resource-sharer thread, an authentication handshake and the descriptor
    passed back, several round trips that each wait for a busy process's GIL (50-120 ms for
    a worker's first batch on the 2-core benchmark machine, while that worker starts its
    downloads and the main process reads the next worker's first batch). The loader makes
    the memfds of each worker's first ``ring`` slots itself before it forks the workers: a
    worker inherits them, sizes and fills them as its own, and the first batch of such a
    slot crosses as a handle only; the main process maps its own descriptor."""

    def _own_ring(self, ring: int) -> None:
        self.ring = ring
        self.group = new_group()
        self._ring: WorkerRing | None = None
        self._premade: dict[int, list[int]] | None = None
        weakref.finalize(self, forget_group, self.group)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_ring"] = None
        state["_premade"] = None  # descriptors are inherited by a fork, never pickled
        return state

    def premake(self, workers: int) -> dict[int, list[int]]:
        """In the main process, right before it forks ``workers`` workers: empty memfds for
        each worker's first ``ring`` slots (no memory until a worker sizes and fills one).
        Returns them; :func:`adopt_premade` registers each worker's once its pid is known."""
        made: dict[int, list[int]] = {}
        try:
            for w in range(workers):
                made[w] = [
                    os.memfd_create(f"astream-batch-{w}-{k}", os.MFD_CLOEXEC)
                    for k in range(self.ring)
                ]
        except BaseException:
            _close_fds(made)
            raise
        self._premade = made
        return made

    def _worker_ring(self, worker: int) -> WorkerRing:
        """This worker's ring (made on first use in this process), on the descriptors the
        main process premade for it when it forked this worker; the other workers' inherited
        descriptors are closed here."""
        ring = self._ring
        if ring is None or ring.pid != os.getpid():
            made, self._premade = self._premade, None
            mine = None
            if made is not None:
                mine = made.pop(worker, None)
                _close_fds(made)
            ring = self._ring = WorkerRing(self.group, worker, self.ring, premade=mine)
        return ring


class RingCollate(RingOwner):
    """A DataLoader ``collate_fn`` around the user's: in a worker, the collated batch's
    tensors are copied into the worker's ring and the handle is what the DataLoader pickles
    (one small message per batch; the slot's descriptor crosses once). In the main process
    (``num_workers=0``) it is the user's collate unchanged."""

    def __init__(self, collate: Any, ring: int = 4) -> None:
        self.collate = collate
        self._own_ring(ring)

    def __call__(self, samples: Any) -> Any:
        out = self.collate(samples)
        me = _worker()
        if me is None:
            return out
        return self._worker_ring(me[0]).put(out)


# -- main process side --------------------------------------------------------------------------
_MAPS: dict[tuple[str, int, int, int], mmap.mmap] = {}  # (group, worker, pid, slot) -> map
_PIDS: dict[tuple[str, int], int] = {}  # (group, worker) -> latest worker pid
# (group, worker, pid) -> this process's descriptors of the slots premade for that worker
_PREMADE: dict[tuple[str, int, int], list[int]] = {}
_PREMADE_FD = "premade"  # a handle's ``fd`` for a premade slot: the main process has its own
# reentrant: a loader's finalizer (forget_group) may run from a garbage collection that starts
# while this thread holds the lock in _slot_map; a plain Lock would deadlock the trainer there
_LOCK = threading.RLock()


def _close_fds(made: dict[int, list[int]]) -> None:
    for fds in made.values():
        for fd in fds:
            if fd >= 0:
                os.close(fd)
    made.clear()


def adopt_premade(group: str, worker: int, pid: int, fds: list[int]) -> None:
    """Keep ``fds`` (premade by :meth:`RingOwner.premake`) as worker ``worker``'s (process
    ``pid``): its premade slots are mapped from them."""
    with _LOCK:
        old = _PREMADE.pop((group, worker, pid), None)
        _PREMADE[(group, worker, pid)] = list(fds)
    if old:
        _close_fds({0: old})


def premade_fds(group: str | None = None) -> int:
    """Premade slot descriptors this process keeps, not mapped yet, of one loader's ``group``
    or of all (for tests)."""
    return sum(fd >= 0 for key, fds in _PREMADE.items() if group in (None, key[0]) for fd in fds)


def _drop_premade(keep: Any) -> None:
    """Close the premade descriptors whose (group, worker, pid) fail ``keep`` (under _LOCK)."""
    for key in [k for k in _PREMADE if not keep(k)]:
        _close_fds({0: _PREMADE.pop(key, [])})


def mapped_slots(group: str | None = None) -> int:
    """Slot maps this process keeps, of one loader's ``group`` or of all (for tests and leak
    checks)."""
    return sum(1 for key in _MAPS if group in (None, key[0]))


def _release(head: np.ndarray[Any, Any], seq: int) -> None:
    if head[_FREED] < seq:
        head[_FREED] = seq


def _slot_map(
    owner: tuple[str, int, int], sid: int, capacity: int, oneoff: bool, fd: Any, retired: list[int]
) -> mmap.mmap:
    """This process's map of a worker's slot (made from ``fd`` the first time it comes)."""
    group, worker, pid = owner
    with _LOCK:
        if _PIDS.get((group, worker)) != pid:
            for key in [k for k in _MAPS if k[:2] == (group, worker)]:
                _MAPS.pop(key, None)  # that worker is gone: live batches keep their own maps
            _drop_premade(lambda k: k[:2] != (group, worker) or k[2] == pid)
            _PIDS[(group, worker)] = pid
        for old in retired:
            _MAPS.pop((group, worker, pid, old), None)
        key = (group, worker, pid, sid)
        if fd == _PREMADE_FD:
            fds = _PREMADE.get((group, worker, pid))
            if fds is None or sid >= len(fds) or fds[sid] < 0:
                raise RuntimeError(
                    f"astream: batch slot {sid} of DataLoader worker {worker} (pid {pid}) was "
                    "premade by another process (a batch handle delivered to another process?)"
                )
            try:
                mm = mmap.mmap(fds[sid], capacity)
            finally:
                os.close(fds[sid])
                fds[sid] = -1
            _MAPS[key] = mm  # a premade slot is a ring slot, never a one-off
            return mm
        if fd is not None:
            try:
                f = fd.detach()
            except (EOFError, OSError) as exc:
                raise RuntimeError(
                    f"astream: DataLoader worker {worker} (pid {pid}) died before handing over "
                    f"its batch slot {sid} (killed by signal?): {exc!r}"
                ) from None
            try:
                mm = mmap.mmap(f, capacity)
            finally:
                os.close(f)
            if not oneoff:
                _MAPS[key] = mm
            return mm
        found = _MAPS.get(key)
        if found is None:
            raise RuntimeError(
                f"astream: batch slot {sid} of DataLoader worker {worker} (pid {pid}) is not "
                "mapped in this process (a batch handle delivered to another process?)"
            )
        return found


def _slot_base(mm: mmap.mmap, seq: int) -> np.ndarray[Any, Any]:
    """The slot as bytes; when it and every view of it are gone, batch ``seq`` is released."""
    base = np.frombuffer(mm, np.uint8)
    weakref.finalize(base, _release, np.frombuffer(mm, np.int64, _HEAD // 8), seq)
    return base


def _rebuild(
    owner: tuple[str, int, int],
    sid: int,
    capacity: int,
    oneoff: bool,
    fd: Any,
    retired: list[int],
    seq: int,
    layout: list[tuple[str, str, tuple[int, ...], int]],
    as_torch: bool,
) -> dict[str, Any]:
    base = _slot_base(_slot_map(owner, sid, capacity, oneoff, fd, retired), seq)
    out: dict[str, Any] = {}
    for name, dtype, shape, off in layout:
        dt = np.dtype(dtype)
        n = int(np.prod(shape)) * dt.itemsize
        arr = base[off : off + n].view(dt).reshape(shape)
        out[name] = torch.from_numpy(arr) if as_torch and dt.kind not in "US" else arr
    return out


def _rebuild_tree(
    owner: tuple[str, int, int],
    sid: int,
    capacity: int,
    oneoff: bool,
    fd: Any,
    retired: list[int],
    seq: int,
    tree: Any,
) -> Any:
    base = _slot_base(_slot_map(owner, sid, capacity, oneoff, fd, retired), seq)
    return _unflatten(tree, base)


def new_group() -> str:
    return uuid.uuid4().hex


def forget_group(group: str) -> None:
    """Drop the maps of a loader's slots (its batch view is gone; held batches keep theirs)."""
    with _LOCK:
        for key in [k for k in _MAPS if k[0] == group]:
            _MAPS.pop(key, None)  # pop: a reentrant call may have dropped it meanwhile
        for key2 in [k for k in _PIDS if k[0] == group]:
            _PIDS.pop(key2, None)
        _drop_premade(lambda k: k[0] != group)
