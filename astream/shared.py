"""An int64 array shared by a process and its torch DataLoader workers.

Anonymous shared memory (``multiprocessing.RawArray``): forked workers inherit it, spawned
workers get it through the worker's start arguments (pickled while a process is being
spawned), and any other copy (``copy.deepcopy``, ``pickle.dumps``) gets a private array with
the same values, so a copied dataset never writes into its original's state.

Subclasses set ``SIZE`` (the number of int64 slots) and read and write ``self._a``.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.sharedctypes  # RawArray imports it on first use: here, at import
from typing import Any

import numpy as np

MAX_WORKERS = 1024  # DataLoader workers per rank whose state a shared array can track


class StaleIteration(Exception):
    """A DataLoader worker is starting an iteration its loader has already left (see
    ``astream.dataset.epochs._Epochs.set_iteration``): it runs empty and takes nothing shared."""


class SharedInts:
    """``SIZE`` int64 slots in anonymous shared memory, zeroed or set from ``values``."""

    SIZE = 0

    def __init__(self, values: np.ndarray[Any, Any] | None = None) -> None:
        self._raw = multiprocessing.RawArray("q", self.SIZE)
        self._a = np.frombuffer(self._raw, dtype=np.int64)
        if values is not None:
            self._a[:] = values

    def __getstate__(self) -> dict[str, Any]:
        from multiprocessing import context

        if context.get_spawning_popen() is not None:  # a worker being spawned: share
            return {"raw": self._raw}
        return {"values": self._a.copy()}  # any other copy: private

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "raw" in state:
            self._raw = state["raw"]
            self._a = np.frombuffer(self._raw, dtype=np.int64)
        else:
            SharedInts.__init__(self, state["values"])
