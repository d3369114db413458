"""Where each consumer of a node is in its epoch, shared through one small file.

Theory of operation
-------------------
Next-use eviction (:mod:`astream.core.eviction`) computes every local rank's future from the
plan; what it cannot compute is how far each rank has got, since ranks without a process group,
or DataLoader workers running ahead, drift apart. So each consumer (local rank ``r``, worker
``w``) stores its current tick in slot ``r * W + w`` of ``.astream/clock-<key>`` under the
first cache root: a file of ``8 * ranks * W`` bytes, memory-mapped, one aligned 8-byte store
per batch (the value plus one, so 0 means "never written"). A rank's position is the least of
its workers' (its oldest batch in flight). Readers take a snapshot when they evict.

``key`` names the epoch, the job shape (nodes, ranks, workers, node) and the launch
(torchrun's ``TORCHELASTIC_RUN_ID`` or ``MASTER_ADDR:MASTER_PORT`` when set), so two jobs
sharing a cache directory keep separate files, and a new epoch never reads the last one's
ticks; the file of epoch ``e - 2`` is deleted when epoch ``e`` starts. A dead consumer's slot
keeps its last value: at worst the shards its rank would have read next are kept a little
longer. Nothing here is ever waited
on: a slot read while it is written gives the old or the new value (aligned 8-byte stores).
"""

from __future__ import annotations

import hashlib
import mmap
import os

import numpy as np

__all__ = ["NodeClocks"]


class NodeClocks:
    """The ticks of every consumer (rank x worker) of one node (see module docstring)."""

    def __init__(
        self, root: str, shape: tuple[int, int, int, int], epoch: int, local: int, worker: int
    ) -> None:
        _, ranks, workers, _ = shape
        d = os.path.join(root, ".astream")
        os.makedirs(d, exist_ok=True)
        self.path = os.path.join(d, f"clock-{_key(shape, epoch)}")
        if epoch >= 2:  # the file of two epochs ago is done with (the last one may not be yet)
            try:
                os.unlink(os.path.join(d, f"clock-{_key(shape, epoch - 2)}"))
            except FileNotFoundError:
                pass
        self.ranks, self.workers = ranks, workers
        size = 8 * ranks * workers
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if os.fstat(fd).st_size < size:
                os.ftruncate(fd, size)  # grows only; concurrent creators agree on the size
            self._mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self._a = np.frombuffer(self._mm, dtype=np.int64)
        self._slot = local * workers + worker

    def publish(self, tick: int) -> None:
        self._a[self._slot] = tick + 1

    def nows(self) -> list[int | None]:
        """Each local rank's tick (the least of its workers'), None where none was written."""
        snap = self._a.copy().reshape(self.ranks, self.workers)
        out: list[int | None] = []
        for row in snap:
            live = row[row > 0]
            out.append(int(live.min()) - 1 if len(live) else None)
        return out

    def close(self) -> None:
        del self._a
        try:
            self._mm.close()
        except BufferError:
            pass


def _key(shape: tuple[int, int, int, int], epoch: int) -> str:
    launch = os.environ.get("TORCHELASTIC_RUN_ID") or "{}:{}".format(
        os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    )
    return hashlib.sha256(f"{shape}\0{epoch}\0{launch}".encode()).hexdigest()[:16]
