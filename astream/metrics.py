"""Metrics a trainer can read: per-dataset counters of every process, and a periodic logger.

Theory of operation
-------------------
Each process that reads a dataset keeps its own :class:`~astream.runtime.stats.Stats`
(``ds.stats``: bytes fetched, shards fetched, range requests, cache hits/misses, integrity
retries, samples, seconds the consumer waited) plus its cache's eviction count. DataLoader
workers are separate processes, so the main process cannot see their counters directly.
:class:`Metrics` bridges that simply: its ``worker_init_fn`` (pass it to the DataLoader) starts
a daemon thread in each worker that writes the worker's snapshot, as one small JSON file named
after its pid, into a private temp directory every ``interval`` seconds and once more when the
worker exits. :meth:`Metrics.snapshot` sums the latest file of every worker that ever ran
(workers of finished epochs included) and the main process's own counters.

Limits, stated plainly: a running worker's figures are up to ``interval`` seconds old; a worker
killed with SIGKILL loses what it counted since its last write; totals cover one node and one
rank (each rank has its own ``Metrics``); transient storage retries are not counted yet (the
retry layer keeps no counter) -- ``integrity_retries`` counts re-downloads after a bad hash.
"""

from __future__ import annotations

import json
import logging
import multiprocessing.util
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["COUNTERS", "Metrics", "process_snapshot"]

COUNTERS = (
    "bytes_fetched",
    "shards_fetched",
    "range_requests",
    "cache_hits",
    "cache_misses",
    "integrity_retries",
    "retries",
    "evictions",
    "samples",
    "wait_seconds",
)

_log = logging.getLogger("astream.metrics")


def process_snapshot(dataset: Any) -> dict[str, float]:
    """This process's counters for ``dataset`` (a StreamingDataset / AsyncStreamingDataset)."""
    snap = dict(dataset.stats.snapshot())
    snap["evictions"] = int(getattr(dataset.engine.space, "evictions", 0))
    return {k: snap.get(k, 0) for k in COUNTERS}


def _write(directory: str, snap: dict[str, float]) -> None:
    path = os.path.join(directory, f"{os.getpid()}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(snap, f)
    os.replace(tmp, path)


class _WorkerHook:
    """Picklable ``worker_init_fn``: publish this worker's snapshot every ``interval`` s."""

    def __init__(self, directory: str, interval: float, chained: Callable[[int], Any] | None):
        self.directory = directory
        self.interval = interval
        self.chained = chained

    def __call__(self, worker_id: int) -> None:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        if info is not None:
            ds = info.dataset
            stop = threading.Event()

            def publish() -> None:
                try:
                    _write(self.directory, process_snapshot(ds))
                except OSError:
                    pass  # the run ended and the directory is gone: nothing to report to

            def loop() -> None:
                while not stop.wait(self.interval):
                    publish()

            def final() -> None:
                stop.set()
                publish()

            threading.Thread(target=loop, name="astream-metrics", daemon=True).start()
            multiprocessing.util.Finalize(None, final, exitpriority=10)
        if self.chained is not None:
            self.chained(worker_id)


class Metrics:
    """Counters of a dataset across the main process and its DataLoader workers.

    ``m = Metrics(ds)``; ``StreamingDataLoader(ds, ..., worker_init_fn=m.worker_init_fn)``;
    ``m.snapshot()`` any time; ``m.start_logging(30)`` for a log line every 30 s; ``m.close()``
    (or ``with Metrics(ds) as m:``) at the end.
    """

    def __init__(self, dataset: Any, *, interval: float = 1.0) -> None:
        if not interval > 0:
            from astream.errors import ConfigError

            raise ConfigError(f"interval must be > 0 seconds, got {interval!r}")
        self.dataset = dataset
        self.interval = float(interval)
        self.directory = tempfile.mkdtemp(prefix="astream-metrics-")
        self._stop = threading.Event()
        self._logger_thread: threading.Thread | None = None

    @property
    def worker_init_fn(self) -> Callable[[int], None]:
        return _WorkerHook(self.directory, self.interval, None)

    def wrap_worker_init_fn(self, fn: Callable[[int], Any]) -> Callable[[int], None]:
        """Your own ``worker_init_fn``, run after the metrics hook."""
        return _WorkerHook(self.directory, self.interval, fn)

    def workers(self) -> dict[int, dict[str, float]]:
        """pid -> latest snapshot of every worker that has reported."""
        out: dict[int, dict[str, float]] = {}
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return out
        for name in names:
            if name.endswith(".json"):
                try:
                    with open(os.path.join(self.directory, name)) as f:
                        out[int(name[:-5])] = json.load(f)
                except (OSError, ValueError):
                    continue  # replaced while we read it: the next call sees the new one
        return out

    def snapshot(self) -> dict[str, float]:
        """Totals of this process and every reporting worker, plus ``processes``."""
        parts = [process_snapshot(self.dataset), *self.workers().values()]
        total: dict[str, float] = {k: sum(p.get(k, 0) for p in parts) for k in COUNTERS}
        total["processes"] = len(parts)
        return total

    def format(self, snap: dict[str, float] | None = None) -> str:
        s = snap or self.snapshot()
        return (
            f"{s['samples']:.0f} samples, {s['bytes_fetched'] / 1e6:.1f} MB fetched in "
            f"{s['shards_fetched']:.0f} shards / {s['range_requests']:.0f} requests, cache "
            f"hits {s['cache_hits']:.0f} misses {s['cache_misses']:.0f} evictions "
            f"{s['evictions']:.0f}, integrity retries {s['integrity_retries']:.0f}, waited "
            f"{s['wait_seconds']:.2f} s ({s['processes']:.0f} processes)"
        )

    def start_logging(
        self, interval: float = 30.0, logger: logging.Logger | None = None, level: int = 20
    ) -> None:
        """Log :meth:`format` every ``interval`` seconds from a daemon thread."""
        if self._logger_thread is not None:
            return
        log = logger or _log

        def loop() -> None:
            while not self._stop.wait(interval):
                log.log(level, "astream: %s", self.format())

        self._logger_thread = threading.Thread(target=loop, name="astream-log", daemon=True)
        self._logger_thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._logger_thread is not None:
            self._logger_thread.join()
            self._logger_thread = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Metrics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
