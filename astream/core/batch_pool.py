"""Where a decoded batch's arrays live: fresh numpy memory (:func:`np_alloc`) or a reused
buffer of this process (:class:`BufferPool`, :data:`POOL`).

Pure: stdlib + numpy.
"""

from __future__ import annotations

import math
import weakref
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from astream.core.batchdecode import ColumnBatch

__all__ = ["POOL", "BufferPool", "np_alloc"]


def np_alloc(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """Private numpy memory, a fresh allocation per array."""
    return np.empty(shape, dtype)


_ALIGN = 64


class BufferPool:
    """Reused private buffers for the batches decoded in this process (the default of
    :meth:`ColumnBatch.finish`): a batch is laid out in one buffer (each array 64-byte
    aligned), and the buffer goes back to the pool when the batch's last array -- or anything
    viewing it, a torch tensor included -- is garbage-collected (a ``weakref.finalize`` on the
    buffer's base array, which every view keeps alive; numpy stops collapsing a view's base at
    the non-array buffer). A batch the consumer keeps is never overwritten: the pool then makes
    a new buffer. Reuse spares the page faults of fresh memory (about 800 per 3 MB batch) and
    the allocator's work; at most ``keep`` free buffers are kept. Batches under ``min_bytes``
    take fresh numpy memory: the C allocator recycles such sizes without new page faults, and
    the pool's per-array bookkeeping would cost more than it saves."""

    def __init__(self, keep: int = 2, min_bytes: int = 1 << 20) -> None:
        self.keep = keep
        self.min_bytes = min_bytes  # smaller batches: fresh numpy memory (malloc recycles it)
        self.free: list[bytearray] = []
        self.made = 0  # buffers made so far (tests)

    def finish(self, cb: ColumnBatch) -> dict[str, np.ndarray[Any, Any]]:
        need = cb.nbytes_bound()
        if need < self.min_bytes:
            return cb.finish(np_alloc)
        buf = None
        for k, b in enumerate(self.free):
            if len(b) >= need:
                buf = self.free.pop(k)
                break
        if buf is None:
            buf = bytearray(need + need // 4 + 4096)
            self.made += 1
        base: np.ndarray[Any, Any] = np.frombuffer(buf, np.uint8)
        at = [0]

        def alloc(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
            start = at[0]
            n = math.prod(shape) * dtype.itemsize
            if start + n > len(buf):  # pragma: no cover - nbytes_bound is an upper bound
                return np.empty(shape, dtype)
            at[0] = -(-(start + n) // _ALIGN) * _ALIGN
            return base[start : start + n].view(dtype).reshape(shape)

        out = cb.finish(alloc)
        weakref.finalize(base, self._back, buf)
        return out

    def _back(self, buf: bytearray) -> None:
        """A batch's buffer is free again: keep the ``keep`` largest free buffers."""
        free = self.free
        free.append(buf)
        if len(free) > self.keep:
            free.remove(min(free, key=len))


POOL = BufferPool()
