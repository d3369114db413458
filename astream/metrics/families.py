"""The metric families of one rank, independent of the exporter that ships them.

Theory of operation
-------------------
:data:`CATALOGUE` names every family astream exports -- name, kind (``counter`` or ``gauge``),
help text and label names -- once. :func:`families` fills it from the records of one rank's
processes (:mod:`astream.metrics.record`): each family gets its samples, one per label set.
Every exporter is a thin translation of that list, so they cannot drift apart:

- :func:`astream.metrics.prometheus.render`: the Prometheus text exposition (the endpoint);
- :meth:`astream.metrics.Metrics.collector`: a ``prometheus_client`` collector;
- :mod:`astream.metrics.otel`: OpenTelemetry observable instruments.

Names follow Prometheus: a counter family is named without its ``_total`` suffix (the text
exposition and ``prometheus_client`` add it to the sample; OpenTelemetry's own Prometheus
exporter adds it too), so ``astream_samples`` is the OpenTelemetry instrument and
``astream_samples_total`` the Prometheus series. Labels: ``rank`` (the process's ``RANK``),
``worker`` (``main`` or the DataLoader worker id; the workers of every epoch that had that id
are added up, so counters never go down when a new epoch starts new workers), and where it
applies ``stream`` (the stream's index; ``astream_stream_info`` maps it to the remote and local
paths) or ``cause``. Label values are strings.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from astream.metrics.record import COUNTERS, PREFETCH, Record, by_worker

__all__ = ["CATALOGUE", "Family", "families"]

_COUNTER_HELP = {
    "bytes_fetched": "Bytes received from remote stores.",
    "shards_fetched": "Whole-shard downloads completed.",
    "range_requests": "GET requests issued (shard parts and random-access ranges).",
    "cache_hits": "Shard opens served from the local cache.",
    "cache_misses": "Shard opens that had to wait for a download.",
    "integrity_retries": "Downloads redone after a hash mismatch.",
    "retries": "Transient storage failures retried.",
    "evictions": "Shards evicted to honour cache_limit.",
    "samples": "Samples yielded or returned.",
    "wait_seconds": "Seconds the consumer waited for data to arrive (the stall).",
}
_PREFETCH_HELP = {
    "shards_in_flight": "Prefetch downloads started or queued, not finished.",
    "bytes_in_flight": "Bytes of the prefetch downloads in flight.",
    "shards_ready": "Shards prefetched and not yet opened by the consumer.",
    "bytes_ready": "Bytes of the shards prefetched and not yet opened.",
    "samples_ahead": "Samples planned ahead of the consumer.",
}


@dataclass
class Family:
    """One metric: ``name`` (a counter's without ``_total``), ``kind``, ``help``, ``labels``
    (names, in order) and ``samples``: ``(label values by name, value)`` pairs."""

    name: str
    kind: str
    help: str
    labels: tuple[str, ...]
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


_W = ("rank", "worker")
CATALOGUE: tuple[Family, ...] = (
    *(Family(f"astream_{c}", "counter", _COUNTER_HELP[c], _W) for c in COUNTERS),
    Family("astream_retries_by_cause", "counter", "Retried faults by cause.", (*_W, "cause")),
    Family("astream_stream_samples", "counter", "Samples yielded, by stream.", (*_W, "stream")),
    Family(
        "astream_stream_bytes_fetched",
        "counter",
        "Bytes received from remote stores, by stream.",
        (*_W, "stream"),
    ),
    *(Family(f"astream_prefetch_{p}", "gauge", _PREFETCH_HELP[p], _W) for p in PREFETCH),
    Family("astream_cache_bytes", "gauge", "Bytes in the cache directories now.", ("rank",)),
    Family("astream_cache_limit_bytes", "gauge", "The cache_limit in force.", ("rank",)),
    Family(
        "astream_processes",
        "gauge",
        "Processes that reported, workers of past epochs too.",
        ("rank",),
    ),
    Family(
        "astream_stream_info",
        "gauge",
        "Stream index to its remote and local paths.",
        ("rank", "stream", "remote", "local"),
    ),
)


def families(
    records: Iterable[Record], *, rank: int, streams: list[dict[str, Any]]
) -> list[Family]:
    """Every family of :data:`CATALOGUE`, in its order, with the samples of one rank:
    ``records`` of its processes, ``streams`` its dataset's streams (``{"remote", "local"}``
    by index). A family with nothing to report (no cache limit, no retry yet) has no samples."""
    folded = by_worker(records)
    out = {f.name: Family(f.name, f.kind, f.help, f.labels) for f in CATALOGUE}
    r = str(rank)

    def add(name: str, labels: dict[str, str], value: float) -> None:
        out[name].samples.append((labels, value))

    for label, acc in folded.items():
        w = {"rank": r, "worker": label}
        for c in COUNTERS:
            add(f"astream_{c}", w, acc["counters"][c])
        for cause, n in sorted(acc["retry_causes"].items()):
            add("astream_retries_by_cause", {**w, "cause": cause}, n)
        for k, st in enumerate(acc["streams"]):
            add("astream_stream_samples", {**w, "stream": str(k)}, st["samples"])
            add("astream_stream_bytes_fetched", {**w, "stream": str(k)}, st["bytes_fetched"])
        for p in PREFETCH:
            add(f"astream_prefetch_{p}", w, acc["prefetch"].get(p, 0))
    cache = next((acc["cache"] for acc in folded.values() if "cache" in acc), None)
    if cache is not None:
        add("astream_cache_bytes", {"rank": r}, cache["bytes"])
        if cache.get("limit") is not None:
            add("astream_cache_limit_bytes", {"rank": r}, cache["limit"])
    add("astream_processes", {"rank": r}, sum(a["processes"] for a in folded.values()))
    for k, st in enumerate(streams):
        labels = {
            "rank": r,
            "stream": str(k),
            "remote": st.get("remote") or "",
            "local": str(st["local"]),
        }
        add("astream_stream_info", labels, 1)
    return list(out.values())
