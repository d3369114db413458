"""A DataLoader worker that kills itself (SIGKILL) at a known point, for the kill -9 tests of
the shared-memory rings (imported by their child scripts).

Worker 0 dies as it takes the slot of its fourth batch: its earlier batches are in the main
process or on their way, and the main process has its first batch before the worker can get
that far (the worker's fourth batch is asked for only after the main process took its third,
with torch's default two batches in flight per worker). A worker killed from outside at a
random instant may die inside torch's ``done_event.is_set()``, holding a lock the main process
then waits on forever (a torch hang, not astream's); here it dies in astream's code, where it
holds no lock the main process takes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from astream.torch import shm


def kill_worker_0_at_its_fourth_batch() -> None:
    """Patch the worker ring (before the DataLoader forks its workers)."""
    taken = [0]

    def dying(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: shm.WorkerRing, *args: Any) -> Any:
            out = method(self, *args)
            taken[0] += 1  # a slot per batch (a batch with no tensor takes none)
            if self.worker == 0 and taken[0] == 4:
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        return run

    shm.WorkerRing.take = dying(shm.WorkerRing.take)  # type: ignore[method-assign]
