"""A fault-injecting HTTP proxy for reliability tests and benchmarks.

Theory of operation
-------------------
:class:`FaultProxy` listens on 127.0.0.1 and forwards every request, path and headers unchanged
(``Host`` included, so signed requests stay valid), to one upstream server, streaming the
response back. On the way it can, per request:

- wait ``latency`` seconds before forwarding (a fixed per-request cost, like a far region);
- cap the response bandwidth shared by all connections at ``bandwidth`` bytes/s;
- answer ``503``/``500`` itself (``error_rate``), close the connection before any response
  (``reset_rate``), or send the headers and half the body and then close (``truncate_rate``);
  ``401``/``403`` (credentials refused) are answered only when planned.

Faults are drawn from ``random.Random(seed)``, so a run is repeatable, and can also be scheduled
exactly with :meth:`FaultProxy.plan` (the next N requests get these faults, in order), optionally
only for requests whose path contains a substring. ``only_get=True`` (default) spares everything
but GET requests from random faults. Counters: requests and response bytes per path, faults
injected per kind, and the ``Range`` header of every GET. The proxy runs in its own loop
thread, so it serves sync and async callers.
"""

from __future__ import annotations

import asyncio
import collections
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from astream.testing.servers import AppServer, ThreadedApp

__all__ = ["FAULTS", "FaultProxy", "ProxyStats"]

FAULTS = ("503", "500", "reset", "truncate")
PLANNED_ONLY = ("401", "403")  # answered by the proxy itself, only through plan()
_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


@dataclass
class ProxyStats:
    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    bytes: collections.Counter[str] = field(default_factory=collections.Counter)
    faults: collections.Counter[str] = field(default_factory=collections.Counter)
    methods: collections.Counter[str] = field(default_factory=collections.Counter)
    ranges: list[tuple[str, str]] = field(default_factory=list)  # (path, Range header) of GETs
    # (path, range, status) of the GETs the upstream answered; the range is the ``Range``
    # header or, when there is none, Azure's ``x-ms-range``
    answered: list[tuple[str, str, int]] = field(default_factory=list)
    # (path, Range header, fault) of every request given a fault
    faulted: list[tuple[str, str, str]] = field(default_factory=list)
    # (path, range as in ``answered``) of every request held by a gate (:meth:`FaultProxy.hold`)
    held: list[tuple[str, str]] = field(default_factory=list)

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def total_bytes(self) -> int:
        return sum(self.bytes.values())


class FaultProxy(AppServer):
    """``FaultProxy(upstream_url, seed=0, ...)``; ``start()`` then point clients at ``.url``."""

    def __init__(
        self,
        upstream: str,
        *,
        seed: int = 0,
        latency: float = 0.0,
        bandwidth: float | None = None,
        error_rate: float = 0.0,
        reset_rate: float = 0.0,
        truncate_rate: float = 0.0,
        only_get: bool = True,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.latency = latency
        self.bandwidth = bandwidth
        self.error_rate = error_rate
        self.reset_rate = reset_rate
        self.truncate_rate = truncate_rate
        self.only_get = only_get
        self.stats = ProxyStats()
        self._rng = random.Random(seed)
        self._plan: collections.deque[tuple[str, str, str | Callable[[str], bool]]] = (
            collections.deque()
        )
        self._lock = threading.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._bw_next = 0.0
        self._gates: list[tuple[Callable[[str, str, str], bool], threading.Event]] = []
        app = web.Application(client_max_size=1 << 34)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_cleanup.append(self._close_session)
        self._app = ThreadedApp(app)

    def stop(self) -> None:
        for _, gate in self._gates:
            gate.set()  # no request waits on a gate past the proxy's end
        self._app.stop()

    def configure(self, **settings: float | bool | None) -> None:
        """Change ``latency``, ``bandwidth``, ``*_rate`` or ``only_get`` while running."""
        with self._lock:
            for name, value in settings.items():
                if not hasattr(self, name) or name.startswith("_"):
                    raise AttributeError(f"FaultProxy has no setting {name!r}")
                setattr(self, name, value)

    def plan(self, *faults: str, path: str = "", rng: str | Callable[[str], bool] = "") -> None:
        """Give the next requests (whose path contains ``path``, and whose range, as in
        ``stats.answered``, is ``rng`` or passes it when it is a test) these faults, in
        order."""
        for f in faults:
            if f not in (*FAULTS, *PLANNED_ONLY, "ok"):
                raise ValueError(f"unknown fault {f!r}; one of {FAULTS + PLANNED_ONLY} or 'ok'")
        with self._lock:
            self._plan.extend((f, path, rng) for f in faults)

    def hold(self, match: Callable[[str, str, str], bool]) -> threading.Event:
        """Hold every request for which ``match(method, path, range)`` is true (the range as
        in ``stats.answered``), before it is forwarded, until the returned event is set (a
        test then acts on the upstream, say rewrites an object, at a known point of a
        client's requests). Held requests are recorded in ``stats.held``; :meth:`stop`
        releases them."""
        gate = threading.Event()
        with self._lock:
            self._gates.append((match, gate))
        return gate

    def reset_stats(self) -> None:
        with self._lock:
            self.stats = ProxyStats()
            self._plan.clear()

    def _choose(self, method: str, path: str, rng: str) -> str:
        with self._lock:
            for i, (fault, where, which) in enumerate(self._plan):
                if where in path and (
                    not which or (which(rng) if callable(which) else which == rng)
                ):
                    del self._plan[i]
                    return fault
            if self.only_get and method != "GET":
                return "ok"
            r = self._rng.random()
            for name, rate in (
                ("503", self.error_rate / 2),
                ("500", self.error_rate / 2),
                ("reset", self.reset_rate),
                ("truncate", self.truncate_rate),
            ):
                if r < rate:
                    return name
                r -= rate
            return "ok"

    async def _close_session(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def _throttle(self, n: int) -> None:
        bw = self.bandwidth
        if not bw:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        start = max(now, self._bw_next)
        self._bw_next = start + n / bw
        if self._bw_next > now:
            await asyncio.sleep(self._bw_next - now)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        with self._lock:
            self.stats.requests[path] += 1
            self.stats.methods[request.method] += 1
            if request.method == "GET":
                self.stats.ranges.append((path, request.headers.get("Range", "")))
        rng = request.headers.get("Range") or request.headers.get("x-ms-range") or ""
        fault = self._choose(request.method, path, rng)
        if fault != "ok":
            with self._lock:
                self.stats.faults[fault] += 1
                self.stats.faulted.append((path, request.headers.get("Range", ""), fault))
        for match, gate in list(self._gates):
            if not gate.is_set() and match(request.method, path, rng):
                with self._lock:
                    self.stats.held.append((path, rng))
                while not gate.is_set():  # polled: no executor thread held per request
                    await asyncio.sleep(0.01)
        if self.latency:
            await asyncio.sleep(self.latency)
        body = await request.read()
        if fault in ("503", "500", *PLANNED_ONLY):
            return web.Response(status=int(fault), text=f"injected {fault}")
        if fault == "reset":
            assert request.transport is not None
            request.transport.close()
            raise web.HTTPServiceUnavailable()  # never sent: the connection is gone
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256),
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None),
            )
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = self.upstream + request.rel_url.raw_path_qs
        async with self._session.request(
            request.method, url, headers=headers, data=body or None, allow_redirects=False
        ) as up:
            if request.method == "GET":
                with self._lock:
                    self.stats.answered.append((path, rng, up.status))
            out_headers = {k: v for k, v in up.headers.items() if k.lower() not in _HOP}
            resp = web.StreamResponse(status=up.status, reason=up.reason, headers=out_headers)
            if up.content_length is None and "Content-Length" not in out_headers:
                resp.enable_chunked_encoding()
            await resp.prepare(request)
            limit = None
            if fault == "truncate":
                limit = (up.content_length or 0) // 2
            sent = 0
            async for chunk in up.content.iter_chunked(1 << 16):
                if limit is not None and sent + len(chunk) >= limit:
                    chunk = chunk[: limit - sent]
                    self._count(path, len(chunk))
                    await resp.write(chunk)
                    assert request.transport is not None
                    request.transport.close()
                    return resp
                await self._throttle(len(chunk))
                self._count(path, len(chunk))
                await resp.write(chunk)
                sent += len(chunk)
            if limit is not None:  # nothing to cut (empty body): drop the connection anyway
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write_eof()
            return resp

    def _count(self, path: str, n: int) -> None:
        with self._lock:
            self.stats.bytes[path] += n
