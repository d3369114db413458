"""A DataLoader worker that kills itself (SIGKILL) at a known point, for the kill -9 tests of
the shared-memory rings (imported by their child scripts).

Worker 0 dies on its third batch, its slot filled and not handed over yet. A worker killed
from outside at a random instant may die inside torch's ``done_event.is_set()``, holding a lock
the main process then waits on forever (a torch hang, not astream's); here it dies in
astream's code, where it holds no lock the main process takes."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from astream.torch import shm


def kill_worker_0_at_its_third_batch() -> None:
    """Patch the worker ring (before the DataLoader forks its workers)."""
    made = [0]

    def dying(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: shm.WorkerRing, *args: Any) -> Any:
            out = method(self, *args)
            made[0] += 1
            if self.worker == 0 and made[0] == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return out

        return run

    shm.WorkerRing.finish = dying(shm.WorkerRing.finish)  # type: ignore[method-assign]
    shm.WorkerRing.put = dying(shm.WorkerRing.put)  # type: ignore[method-assign]
