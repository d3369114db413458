"""Metrics across the processes of one rank: the worker bridge, the exporter, the logger.

Theory of operation
-------------------
Each process that reads a dataset keeps its own :class:`~astream.runtime.stats.Stats`
(``ds.stats``). DataLoader workers are separate processes, so the main process cannot see their
counters directly. :class:`Metrics` bridges that simply: its ``worker_init_fn`` (pass it to the
DataLoader) starts a daemon thread in each worker that writes the worker's record
(:mod:`astream.metrics.record`), as one small JSON file named after its pid, into the job's
directory (:mod:`astream.metrics.registry`) every ``interval`` seconds and once more when the
worker exits. :meth:`Metrics.snapshot` sums the latest file of every worker that ever ran
(workers of finished epochs included) and the main process's own counters, read now.

The main process also writes its own record there every ``interval`` seconds (``announce``,
on by default), so that ``astream top`` sees the whole job from the files alone. With
``prometheus_port`` (or :meth:`Metrics.serve`) the main process serves the same records in the
Prometheus text format (:mod:`astream.metrics.prometheus`): one scrape per rank sees all its
workers. :meth:`Metrics.collector` hands the same families to a ``prometheus_client`` registry,
and ``otel=`` to OpenTelemetry (:mod:`astream.metrics.otel`); all three read
:meth:`Metrics.families` (:mod:`astream.metrics.families`) when they are asked. Nothing of this
exists without a ``Metrics``: the dataset itself starts no thread and opens no port; its
counters are plain int adds.

Limits, stated plainly: a running worker's figures are up to ``interval`` seconds old; a worker
killed with SIGKILL loses what it counted since its last write; totals cover one node and one
rank (each rank has its own ``Metrics``); retries are counted per process and store, so two
datasets of one process reading the same remote with the same settings share their count.
"""

from __future__ import annotations

import logging
import multiprocessing.util
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from astream.metrics import registry
from astream.metrics.families import Family, families
from astream.metrics.record import (
    COUNTERS,
    Record,
    process_record,
    process_snapshot,
    totals,
)

__all__ = ["COUNTERS", "Metrics", "process_snapshot"]

_log = logging.getLogger("astream.metrics")


def _write(directory: str, rec: Record) -> None:
    registry.write_json(os.path.join(directory, f"{registry.PROC_PREFIX}{rec['pid']}.json"), rec)


class _WorkerHook:
    """Picklable ``worker_init_fn``: publish this worker's record every ``interval`` s."""

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
            lock = threading.Lock()  # the periodic and the final publish, one at a time

            def publish() -> None:
                with lock:
                    try:
                        _write(self.directory, process_record(ds, worker_id))
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


class _Collector:
    """``prometheus_client`` collector (its ``collect()`` protocol) over ``Metrics.families``."""

    def __init__(self, metrics: Metrics, counter: Any, gauge: Any) -> None:
        self.metrics = metrics
        self.kinds = {"counter": counter, "gauge": gauge}

    def collect(self) -> Any:
        if self.metrics.closed:
            return
        for fam in self.metrics.families():
            out = self.kinds[fam.kind](fam.name, fam.help, labels=list(fam.labels))
            for labels, value in fam.samples:
                out.add_metric([labels[k] for k in fam.labels], value)
            yield out

    def describe(self) -> Any:
        return []  # no families at registration: prometheus_client then skips the name check


class Metrics:
    """Counters of a dataset across the main process and its DataLoader workers.

    ``m = Metrics(ds)``; ``StreamingDataLoader(ds, ..., worker_init_fn=m.worker_init_fn)``;
    ``m.snapshot()`` any time; ``m.start_logging(30)`` for a log line every 30 s;
    ``prometheus_port=9400`` (or ``m.serve(9400)``) for a Prometheus endpoint;
    ``otel=True`` (the global MeterProvider) or ``otel=provider`` for OpenTelemetry
    instruments (:mod:`astream.metrics.otel`); ``m.collector()`` for ``prometheus_client``;
    ``m.close()`` (or ``with Metrics(ds) as m:``) at the end.

    ``announce`` (default True) makes the job visible to ``astream top`` on this node (the
    main process writes its record every ``interval`` s); ``runtime_dir`` overrides where
    (default: ``$ASTREAM_RUNTIME_DIR``, see :mod:`astream.metrics.registry`).
    """

    # the published record's cache figure is rescanned unless the last scan is younger than
    # SCAN_SHARE times its own duration (see _cache_figure); a number here fixes that period
    cache_scan_every: float | None = None
    SCAN_SHARE = 20
    closed = False

    def __init__(
        self,
        dataset: Any,
        *,
        interval: float = 1.0,
        prometheus_port: int | None = None,
        prometheus_host: str = "127.0.0.1",
        announce: bool = True,
        runtime_dir: str | None = None,
        otel: Any = False,
    ) -> None:
        from astream.errors import ConfigError

        if not interval > 0:
            raise ConfigError(f"interval must be > 0 seconds, got {interval!r}")
        if prometheus_port is not None and (
            isinstance(prometheus_port, bool)
            or not isinstance(prometheus_port, int)
            or not 0 <= prometheus_port <= 65535
        ):
            raise ConfigError(
                f"prometheus_port must be an int in 0..65535 (0: any free port), got "
                f"{prometheus_port!r}"
            )
        self.dataset = dataset
        self.interval = float(interval)
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.runtime_dir = runtime_dir
        self.otel: Any = None
        want_otel = otel is not False and otel is not None
        if want_otel:
            from astream.metrics.otel import import_api

            if otel is not True and not callable(getattr(otel, "get_meter", None)):
                raise ConfigError(
                    f"otel must be True (the global MeterProvider) or a MeterProvider, got {otel!r}"
                )
            import_api("otel")  # a ConfigError before anything starts if it is missing
        registry.prune(runtime_dir)
        self.directory = registry.new_job_dir(runtime_dir)
        self._stop = threading.Event()
        self._logger_thread: threading.Thread | None = None
        self._publisher: threading.Thread | None = None
        self._cache: tuple[float, float, dict[str, Any]] | None = None  # (at, took, figure)
        self._cache_lock = threading.Lock()
        self.exporter: Any = None
        self._write_job()
        if want_otel:
            from astream.metrics.otel import OtelBridge

            self.otel = OtelBridge(self.families, None if otel is True else otel)
        if announce:
            self._publisher = threading.Thread(
                target=self._publish_loop, name="astream-metrics", daemon=True
            )
            self._publisher.start()
        if prometheus_port is not None:
            try:
                self.serve(prometheus_port, prometheus_host)
            except BaseException:
                self.close()
                raise

    # -- who we are ------------------------------------------------------------------------
    def streams(self) -> list[dict[str, Any]]:
        """The dataset's streams, by index: ``{"remote": url or None, "local": dir}``."""
        return [
            {"remote": src.remote, "local": src.local}
            for src in self.dataset.engine.catalog.sources
        ]

    def _write_job(self) -> None:
        registry.write_json(
            os.path.join(self.directory, registry.JOB_FILE),
            {
                "pid": os.getpid(),
                "rank": self.rank,
                "local_rank": int(os.environ.get("LOCAL_RANK", "0") or 0),
                "argv": sys.argv[:8],
                "started": time.time(),
                "interval": self.interval,
                "streams": self.streams(),
                "url": None if self.exporter is None else self.exporter.url,
            },
        )

    @property
    def worker_init_fn(self) -> Callable[[int], None]:
        return _WorkerHook(self.directory, self.interval, None)

    def wrap_worker_init_fn(self, fn: Callable[[int], Any]) -> Callable[[int], None]:
        """Your own ``worker_init_fn``, run after the metrics hook."""
        return _WorkerHook(self.directory, self.interval, fn)

    # -- reading -----------------------------------------------------------------------------
    def main_record(self, fresh: bool = False) -> Record:
        """This process's record, read now, with the cache's occupancy (:meth:`_cache_figure`;
        ``fresh``: scanned for this read)."""
        rec = process_record(self.dataset, None)
        rec["cache"] = self._cache_figure(fresh)
        return rec

    def _cache_figure(self, fresh: bool) -> dict[str, Any]:
        """``{"bytes", "limit"}`` of the cache: a scan of its directories. There is no other
        count: the processes sharing a cache (workers, ranks, other jobs) share it through the
        file system alone, and ``cache_limit`` is enforced on this same scan.

        ``fresh`` (an exporter's read: a scrape, a collection): scanned for this read, so the
        figure is what is on disk now; a read asked while another's scan runs takes that scan.
        A scrape thus costs one scan (what every download costs under ``cache_limit``), as
        often as the scraper asks. Otherwise (the record published every ``interval`` for
        ``astream top``, forever): scanned again only once the last scan is older than
        ``SCAN_SHARE`` times its own duration, so publishing costs at most 1/SCAN_SHARE of one
        core: a cache of thousands of files (milliseconds a scan) is current to within a
        publish; one of a million files lags by ``SCAN_SHARE`` scans' time. ``top`` scans the
        directories itself and shows this figure only where it cannot list them.
        ``cache_scan_every`` (seconds) fixes the published figure's period instead."""
        asked = time.monotonic()
        with self._cache_lock:
            start = time.monotonic()
            if self._cache is not None:
                at, took, figure = self._cache
                if at >= asked:  # scanned after this read was asked: as current as ours
                    return figure
                every = self.cache_scan_every
                wait = took * self.SCAN_SHARE if every is None else every
                if not fresh and start - at < wait:
                    return figure
            space = self.dataset.engine.space
            figure = {"bytes": space.usage(), "limit": space.limit}
            self._cache = (start, time.monotonic() - start, figure)
            return figure

    def worker_records(self) -> list[Record]:
        """The latest record of every worker that has reported (finished epochs' too)."""
        return registry.read_records(self.directory, skip_pid=os.getpid())

    def records(self) -> list[Record]:
        """This process's record and every worker's."""
        return [self.main_record(fresh=True), *self.worker_records()]

    def workers(self) -> dict[int, dict[str, float]]:
        """pid -> latest counters of every worker that has reported."""
        return {int(r["pid"]): dict(r["counters"]) for r in self.worker_records()}

    def snapshot(self) -> dict[str, float]:
        """Totals of this process and every reporting worker, plus ``processes``."""
        return totals([{"counters": process_snapshot(self.dataset)}, *self.worker_records()])

    # -- publishing ----------------------------------------------------------------------------
    def _publish_loop(self) -> None:
        while True:
            try:
                _write(self.directory, self.main_record())
            except OSError:
                pass  # the directory went away (closed): the loop ends below
            if self._stop.wait(self.interval):
                return

    def families(self) -> list[Family]:
        """Every metric family of this rank, read now (what each exporter ships)."""
        return families(self.records(), rank=self.rank, streams=self.streams())

    def prometheus_text(self) -> str:
        """The Prometheus exposition of this rank (what the endpoint serves)."""
        from astream.metrics.prometheus import text

        return text(self.families())

    def collector(self) -> Any:
        """A ``prometheus_client`` collector of this rank's families, for an application
        that already serves ``prometheus_client`` metrics:
        ``prometheus_client.REGISTRY.register(metrics.collector())``. Unregister it before
        :meth:`close` (after it, it reports nothing)."""
        try:
            from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        except ImportError as exc:
            from astream.errors import ConfigError

            raise ConfigError(
                "Metrics.collector() needs prometheus_client, which is not installed: "
                "pip install prometheus-client (or use prometheus_port=, which needs nothing)"
            ) from exc
        return _Collector(self, CounterMetricFamily, GaugeMetricFamily)

    def serve(self, port: int = 0, host: str = "127.0.0.1") -> str:
        """Serve :meth:`prometheus_text` at ``http://host:port/metrics``; returns the URL.
        ``port=0`` picks a free port. One endpoint per ``Metrics``."""
        from astream.metrics.prometheus import Exporter

        if self.exporter is not None:
            from astream.errors import ConfigError

            raise ConfigError(f"this Metrics already serves {self.exporter.url}")
        try:
            self.exporter = Exporter(self.prometheus_text, port=port, host=host)
        except OSError as exc:
            from astream.errors import ConfigError

            raise ConfigError(
                f"prometheus_port={port}: cannot listen on {host}:{port} ({exc.strerror or exc})"
            ) from exc
        self._write_job()
        return str(self.exporter.url)

    @property
    def url(self) -> str | None:
        """The Prometheus endpoint's URL, None if not serving."""
        return None if self.exporter is None else str(self.exporter.url)

    def format(self, snap: dict[str, float] | None = None) -> str:
        s = snap or self.snapshot()
        return (
            f"{s['samples']:.0f} samples, {s['bytes_fetched'] / 1e6:.1f} MB fetched in "
            f"{s['shards_fetched']:.0f} shards / {s['range_requests']:.0f} requests, cache "
            f"hits {s['cache_hits']:.0f} misses {s['cache_misses']:.0f} evictions "
            f"{s['evictions']:.0f}, retries {s['retries']:.0f}, integrity retries "
            f"{s['integrity_retries']:.0f}, waited "
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
        """Stop the endpoint and the threads, and remove the job's directory."""
        self._stop.set()
        self.closed = True
        if self.otel is not None:
            self.otel.close()
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        for t in (self._logger_thread, self._publisher):
            if t is not None:
                t.join()
        self._logger_thread = self._publisher = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> Metrics:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
