"""One process's figures for one dataset, as a plain JSON-able record.

Theory of operation
-------------------
Every process that reads a dataset (the main process, each DataLoader worker) counts into its
own :class:`~astream.runtime.stats.Stats`. :func:`process_record` reads them -- no locks: they
are ints that only grow, read from another thread between two adds -- together with what is
not a counter: the retry causes of the process's stores, the depth of the running iteration's
prefetch (shards and bytes downloading, downloaded and not yet opened, samples planned ahead)
and, in the main process only, the cache directory's occupancy (a directory scan; it is the
same figure for every process of the node, so one process reports it).

A record::

    {"pid": 123, "worker": 0 or None (the main process), "time": wall-clock seconds,
     "counters": {name: value for name in COUNTERS},
     "retry_causes": {"5xx": 2, "reset": 1, ...},
     "streams": [{"samples": ..., "bytes_fetched": ...}, ...],   # by stream index
     "prefetch": {name: value for name in PREFETCH},
     "cache": {"bytes": ..., "limit": ... or None}}               # main process only

Workers write theirs to files and the main process reads them (:mod:`astream.metrics.collect`);
:func:`totals` adds records up and :func:`by_worker` folds them per worker label, so that
counters stay monotonic when a new epoch starts new workers with the same worker ids.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from typing import Any

__all__ = [
    "COUNTERS",
    "PREFETCH",
    "by_worker",
    "cache_bytes",
    "process_record",
    "process_snapshot",
    "totals",
]

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
PREFETCH = ("shards_in_flight", "bytes_in_flight", "shards_ready", "bytes_ready", "samples_ahead")

Record = dict[str, Any]


def process_snapshot(dataset: Any) -> dict[str, float]:
    """This process's counters for ``dataset`` (a StreamingDataset / AsyncStreamingDataset)."""
    snap = dict(dataset.stats.snapshot())
    snap["evictions"] = int(getattr(dataset.engine.space, "evictions", 0))
    return {k: snap.get(k, 0) for k in COUNTERS}


def _streams(dataset: Any) -> list[dict[str, int]]:
    engine = dataset.engine
    stats = engine.stats
    sources = engine.catalog.sources
    if len(sources) == 1:
        return [{"samples": stats.samples, "bytes_fetched": stats.bytes_fetched}]
    per_bytes = dict(stats.stream_bytes)
    out = []
    seen: set[str] = set()
    for k, src in enumerate(sources):
        key = src.remote or ""
        # two streams with one remote root share its byte count: the first one reports it
        nbytes = 0 if key in seen else per_bytes.get(key, 0)
        seen.add(key)
        samples = stats.stream_samples[k] if k < len(stats.stream_samples) else 0
        out.append({"samples": samples, "bytes_fetched": nbytes})
    return out


def _prefetch(dataset: Any) -> dict[str, int]:
    live = dataset.engine.stats.live
    if live is None:
        return dict.fromkeys(PREFETCH, 0)
    pf, la = live[0](), live[1]()  # weak: a finished iteration's prefetcher is gone
    if pf is None or la is None:
        return dict.fromkeys(PREFETCH, 0)
    busy, busy_b, ready, ready_b = pf.depth()
    return dict(zip(PREFETCH, (busy, busy_b, ready, ready_b, la.queued), strict=True))


def process_record(dataset: Any, worker: int | None, *, cache: bool = False) -> Record:
    """This process's record for ``dataset``; ``worker`` is the DataLoader worker id (None in
    the main process); ``cache`` adds the cache directory's occupancy (a scan)."""
    rec: Record = {
        "pid": os.getpid(),
        "worker": worker,
        "time": time.time(),
        "counters": process_snapshot(dataset),
        "retry_causes": dataset.engine.stores.retry_causes(),
        "streams": _streams(dataset),
        "prefetch": _prefetch(dataset),
    }
    if cache:
        space = dataset.engine.space
        rec["cache"] = {"bytes": space.usage(), "limit": space.limit}
    return rec


def cache_bytes(roots: Iterable[str]) -> int | None:
    """Bytes in the cache directories ``roots`` right now, counted as ``cache_limit`` counts
    them (:func:`astream.runtime.cache.scan`), for a reader outside the job (``astream top``):
    directories it may not read are skipped. None when no root could be listed."""
    from astream.runtime.cache import scan

    got = scan(roots, unreadable_ok=True)
    return got.usage if got.listed else None


def worker_label(rec: Record) -> str:
    w = rec.get("worker")
    return "main" if w is None else str(w)


def totals(records: Iterable[Record]) -> dict[str, float]:
    """The counters of ``records`` added up, plus ``processes`` (how many records)."""
    out: dict[str, float] = dict.fromkeys(COUNTERS, 0)
    n = 0
    for rec in records:
        n += 1
        for k in COUNTERS:
            out[k] += rec["counters"].get(k, 0)
    out["processes"] = n
    return out


def by_worker(records: Iterable[Record]) -> dict[str, Record]:
    """Records folded per worker label (``main``, ``0``, ``1``...): counters, retry causes and
    streams added up over every process that had that label; prefetch depth and cache from the
    newest record of the label (a finished worker's depth is history, not a gauge)."""
    out: dict[str, Record] = {}
    for rec in sorted(records, key=lambda r: r.get("time", 0.0)):
        label = worker_label(rec)
        acc = out.get(label)
        if acc is None:
            acc = out[label] = {
                "worker": rec.get("worker"),
                "counters": dict.fromkeys(COUNTERS, 0),
                "retry_causes": {},
                "streams": [],
                "processes": 0,
            }
        acc["processes"] += 1
        acc["time"] = rec.get("time", 0.0)
        acc["pid"] = rec.get("pid")
        for k in COUNTERS:
            acc["counters"][k] += rec["counters"].get(k, 0)
        for cause, n in rec.get("retry_causes", {}).items():
            acc["retry_causes"][cause] = acc["retry_causes"].get(cause, 0) + n
        streams: list[dict[str, int]] = acc["streams"]
        for i, st in enumerate(rec.get("streams", [])):
            if i == len(streams):
                streams.append({"samples": 0, "bytes_fetched": 0})
            for field in ("samples", "bytes_fetched"):
                streams[i][field] += st.get(field, 0)
        acc["prefetch"] = dict(rec.get("prefetch", {}))
        if "cache" in rec:
            acc["cache"] = rec["cache"]
    return out
