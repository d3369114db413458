"""A measuring, latency- and bandwidth-shaping HTTP proxy for the cold-storage scenarios.

Theory of operation
-------------------
The proxy sits between a library's S3 client and the S3 emulator. Every request waits
``latency_ms`` before it is forwarded (a fixed per-request cost, like a real object store's
first-byte latency); response bodies are streamed back in chunks, paced so that the whole
proxy never exceeds ``bandwidth_mbps`` and no single answer exceeds ``conn_mbps`` (megabytes
per second; 0 = unlimited). A per-answer cap is how a real object store behaves: one
connection tops out at tens of MB/s, and a client gets more only by reading over several at
once. It counts requests and body bytes in both directions, which is how the benchmark
measures what each library transferred.

Control endpoints live under ``/__bench__/`` (an S3 bucket name cannot contain ``_``):
``GET stats`` returns the counters (requests, body bytes, the peak number of requests in
flight, answers with a status of 400 or more) as JSON, ``POST reset`` zeroes them, ``POST config``
with query ``latency_ms`` / ``bandwidth_mbps`` / ``conn_mbps`` / ``close`` changes the shaping.

Connections: by default the proxy keeps client connections alive, as a real object store does.
With ``close=1`` every answer carries ``Connection: close``, as moto's own server does: a client
then opens a connection per request. The two differ for a client that shares one pooled
connection between processes (a connection opened before a fork and used by the children):
under keep-alive their requests and answers interleave on one socket; under ``close`` no
connection outlives its answer, so nothing is shared. Run as a process:
``python -m benchmarks.proxy --upstream http://127.0.0.1:PORT``; it prints ``READY <port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import aiohttp
from aiohttp import web

_LOG = bool(os.environ.get("BENCH_PROXY_LOG"))
_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "te"}


class Proxy:
    def __init__(
        self,
        upstream: str,
        latency_ms: float = 0.0,
        bandwidth_mbps: float = 0.0,
        conn_mbps: float = 0.0,
    ):
        self.upstream = upstream.rstrip("/")
        self.latency_ms = latency_ms
        self.bandwidth_mbps = bandwidth_mbps
        self.conn_mbps = conn_mbps  # the cap of one answer's body, MB/s (0: none)
        self.close_connections = False  # True: every answer closes its connection
        self.session: aiohttp.ClientSession | None = None
        self._pace_lock = asyncio.Lock()
        self._next_free = 0.0
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.ranged_requests = 0
        self.bytes_out = 0
        self.bytes_in = 0
        self.error_responses = 0  # answers with status >= 400 (a 412 is a failed If-Match)
        self.hangups = 0  # answers the client closed before their end (a GET cut short)
        self.in_flight = 0
        self.peak_in_flight = 0  # requests being served at once, at most (since the reset)

    def stats(self) -> dict[str, float]:
        return {
            "requests": self.requests,
            "ranged_requests": self.ranged_requests,
            "bytes_out": self.bytes_out,
            "bytes_in": self.bytes_in,
            "error_responses": self.error_responses,
            "hangups": self.hangups,
            "peak_in_flight": self.peak_in_flight,
            "latency_ms": self.latency_ms,
            "bandwidth_mbps": self.bandwidth_mbps,
            "conn_mbps": self.conn_mbps,
            "close": float(self.close_connections),
        }

    async def _pace(self, nbytes: int) -> None:
        if self.bandwidth_mbps <= 0:
            return
        async with self._pace_lock:
            now = time.monotonic()
            start = max(now, self._next_free)
            self._next_free = start + nbytes / (self.bandwidth_mbps * 1e6)
            delay = self._next_free - now
        await asyncio.sleep(delay)

    async def control(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if what == "reset":
            self.reset()
        elif what == "config":
            q = request.query
            self.latency_ms = float(q.get("latency_ms", self.latency_ms))
            self.bandwidth_mbps = float(q.get("bandwidth_mbps", self.bandwidth_mbps))
            self.conn_mbps = float(q.get("conn_mbps", self.conn_mbps))
            self.close_connections = bool(float(q.get("close", self.close_connections)))
        elif what != "stats":
            raise web.HTTPNotFound()
        return web.json_response(self.stats())

    async def forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            return await self._forward(request)
        finally:
            self.in_flight -= 1

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        t0 = time.monotonic()
        self.requests += 1
        if "Range" in request.headers:
            self.ranged_requests += 1
        body = await request.read()
        self.bytes_in += len(body)
        if self.latency_ms > 0:
            await asyncio.sleep(self.latency_ms / 1000)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        url = self.upstream + request.raw_path
        sent = 0
        status = "-"
        if _LOG:
            _log("start", request, t0)
        try:
            async with self.session.request(
                request.method, url, headers=headers, data=body or None, allow_redirects=False
            ) as up:
                status = str(up.status)
                if up.status >= 400:
                    self.error_responses += 1
                resp = web.StreamResponse(status=up.status)
                if self.close_connections:
                    resp.force_close()  # aiohttp then answers "Connection: close"
                for k, v in up.headers.items():
                    if k.lower() not in _HOP:
                        resp.headers.add(k, v)
                await resp.prepare(request)
                own = time.monotonic()  # when this answer may send its next chunk
                async for chunk in up.content.iter_chunked(1 << 18):
                    await self._pace(len(chunk))
                    if self.conn_mbps > 0:
                        now = time.monotonic()
                        own = max(own, now) + len(chunk) / (self.conn_mbps * 1e6)
                        await asyncio.sleep(own - now)
                    self.bytes_out += len(chunk)
                    sent += len(chunk)
                    try:
                        await resp.write(chunk)
                    except ConnectionError:  # the client stopped reading (a cut GET)
                        self.hangups += 1
                        status = f"{status} client gone"
                        return resp
                await resp.write_eof()
                return resp
        except BaseException as e:
            status = f"{status} {type(e).__name__}"
            raise
        finally:
            if _LOG:
                _log(f"end {status} {sent}B {time.monotonic() - t0:.3f}s", request, t0)


def _log(what: str, request: web.Request, t0: float) -> None:
    """One request-log line (``BENCH_PROXY_LOG=1``): the time, the client's connection (its
    port tells a reused keep-alive connection from a new one), the request and its range."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    port = peer[1] if peer else "-"
    rng = request.headers.get("Range", "-")
    print(
        f"{t0:.3f} conn={port} {request.method} {request.raw_path} range={rng} {what}",
        file=sys.stderr,
        flush=True,
    )


async def serve(
    upstream: str, port: int, latency_ms: float, bandwidth_mbps: float, conn_mbps: float = 0.0
) -> None:
    proxy = Proxy(upstream, latency_ms, bandwidth_mbps, conn_mbps)
    # One upstream connection per request: moto's threaded werkzeug server occasionally never
    # answers a request sent on a reused keep-alive connection, which showed up as a client's
    # 60 s read timeout. A stalled upstream read now fails after 20 s instead of hanging.
    connector = aiohttp.TCPConnector(limit=256, force_close=True)
    proxy.session = aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=20),
    )
    app = web.Application(client_max_size=1 << 31)
    app.router.add_route("*", "/__bench__/{what}", proxy.control)
    app.router.add_route("*", "/{tail:.*}", proxy.forward)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"READY {bound}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0)
    ap.add_argument("--conn-mbps", type=float, default=0.0, help="cap of one answer, MB/s")
    ap.add_argument("--exit-with-parent", action="store_true", help="exit on stdin EOF")
    a = ap.parse_args()
    if a.exit_with_parent:
        from benchmarks.servers import exit_with_parent

        exit_with_parent()
    try:
        asyncio.run(serve(a.upstream, a.port, a.latency_ms, a.bandwidth_mbps, a.conn_mbps))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
