"""The Prometheus text exposition of a job's records, and a tiny HTTP endpoint serving it.

Theory of operation
-------------------
:func:`render` turns the records of one rank's processes (:mod:`astream.metrics.record`) into
the Prometheus text format, version 0.0.4: ``# HELP`` and ``# TYPE`` lines, then one sample
per label set, for every family of :mod:`astream.metrics.families` (which defines the names and
the labels: ``rank``, ``worker``, and ``stream`` or ``cause`` where they apply). A counter's
series carries the ``_total`` suffix.

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

from astream.metrics.families import Family, families
from astream.metrics.record import Record

__all__ = ["CONTENT_TYPE", "Exporter", "render", "text"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _esc(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    return repr(float(v))


def text(fams: Iterable[Family]) -> str:
    """The exposition of ``fams`` (:func:`astream.metrics.families.families`)."""
    lines: list[str] = []
    for fam in fams:
        name = f"{fam.name}_total" if fam.kind == "counter" else fam.name
        lines.append(f"# HELP {name} {fam.help}")
        lines.append(f"# TYPE {name} {fam.kind}")
        for labels, value in fam.samples:
            body = ",".join(f'{k}="{_esc(labels[k])}"' for k in fam.labels)
            lines.append(f"{name}{{{body}}} {_num(value)}")
    return "\n".join(lines) + "\n"


def render(records: Iterable[Record], *, rank: int, streams: list[dict[str, Any]]) -> str:
    """The exposition text of one rank: ``records`` of its processes, ``streams`` its
    datasets' streams (``{"remote": ..., "local": ...}`` by index)."""
    return text(families(records, rank=rank, streams=streams))


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
