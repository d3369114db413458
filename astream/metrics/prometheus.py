"""The Prometheus text exposition of a job's records, and a tiny HTTP endpoint serving it.

Theory of operation
-------------------
:func:`render` turns the records of one rank's processes (:mod:`astream.metrics.record`) into
the Prometheus text format, version 0.0.4: ``# HELP`` and ``# TYPE`` lines, then one sample
per label set. Labels: ``rank`` (the process's ``RANK``), ``worker`` (``main`` or the
DataLoader worker id; the workers of every epoch that had that id are added up, so counters
never go down when a new epoch starts new workers), and where it applies ``stream`` (the
stream's index; ``astream_stream_info`` maps it to the remote and local paths) or ``cause``.

:class:`Exporter` serves ``GET /metrics`` from a ``ThreadingHTTPServer`` (stdlib only) in a
daemon thread, bound to 127.0.0.1 unless told otherwise; each scrape calls a function that
builds fresh records (the main process's own, read now, and the workers' latest files). It
exists only while a :class:`~astream.metrics.Metrics` asked for it: no port and no thread
otherwise. ``close()`` shuts the server down and joins its thread.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Callable, Iterable
from typing import Any

from astream.metrics.record import COUNTERS, PREFETCH, Record, by_worker

__all__ = ["CONTENT_TYPE", "Exporter", "render"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

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


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


class _Out:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_: str) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, object], value: float) -> None:
        body = ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items())
        self.lines.append(f"{name}{{{body}}} {_num(value)}")


def render(records: Iterable[Record], *, rank: int, streams: list[dict[str, Any]]) -> str:
    """The exposition text of one rank: ``records`` of its processes, ``streams`` its
    datasets' streams (``{"remote": ..., "local": ...}`` by index)."""
    folded = by_worker(records)
    out = _Out()
    r = str(rank)
    for name in COUNTERS:
        metric = f"astream_{name}_total"
        out.family(metric, "counter", _COUNTER_HELP[name])
        for label, acc in folded.items():
            out.sample(metric, {"rank": r, "worker": label}, acc["counters"][name])
    out.family("astream_retries_by_cause_total", "counter", "Retried faults by cause.")
    for label, acc in folded.items():
        for cause, n in sorted(acc["retry_causes"].items()):
            out.sample(
                "astream_retries_by_cause_total", {"rank": r, "worker": label, "cause": cause}, n
            )
    for name, help_ in (
        ("samples", "Samples yielded, by stream."),
        ("bytes_fetched", "Bytes received from remote stores, by stream."),
    ):
        metric = f"astream_stream_{name}_total"
        out.family(metric, "counter", help_)
        for label, acc in folded.items():
            for k, st in enumerate(acc["streams"]):
                out.sample(metric, {"rank": r, "worker": label, "stream": k}, st[name])
    for name in PREFETCH:
        metric = f"astream_prefetch_{name}"
        out.family(metric, "gauge", _PREFETCH_HELP[name])
        for label, acc in folded.items():
            out.sample(metric, {"rank": r, "worker": label}, acc["prefetch"].get(name, 0))
    cache = next((acc["cache"] for acc in folded.values() if "cache" in acc), None)
    if cache is not None:
        out.family("astream_cache_bytes", "gauge", "Bytes in the cache directories now.")
        out.sample("astream_cache_bytes", {"rank": r}, cache["bytes"])
        if cache.get("limit") is not None:
            out.family("astream_cache_limit_bytes", "gauge", "The cache_limit in force.")
            out.sample("astream_cache_limit_bytes", {"rank": r}, cache["limit"])
    out.family("astream_processes", "gauge", "Processes that reported, workers of past epochs too.")
    out.sample("astream_processes", {"rank": r}, sum(a["processes"] for a in folded.values()))
    out.family("astream_stream_info", "gauge", "Stream index to its remote and local paths.")
    for k, st in enumerate(streams):
        labels = {"rank": r, "stream": k, "remote": st.get("remote") or "", "local": st["local"]}
        out.sample("astream_stream_info", labels, 1)
    return "\n".join(out.lines) + "\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] not in ("/metrics", "/"):
            self.send_error(404, "only /metrics is served here")
            return
        try:
            body = self.server.produce().encode()
        except Exception as exc:  # a scrape must never kill the server thread
            self.send_error(500, f"astream metrics failed: {type(exc).__name__}: {exc}")
            return
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # scrapes every few seconds would flood stderr


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr: tuple[str, int], produce: Callable[[], str]) -> None:
        self.produce = produce
        super().__init__(addr, _Handler)


class Exporter:
    """``GET http://host:port/metrics`` -> ``produce()``; ``port=0`` picks a free port."""

    def __init__(self, produce: Callable[[], str], *, port: int, host: str = "127.0.0.1") -> None:
        self._server = _Server((host, port), produce)
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="astream-metrics-http",
            daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
