"""A fast in-memory stand-in for S3's read path, with a fixed latency per request: to measure
what a client costs when the server is not the bottleneck.

Theory of operation
-------------------
moto, the S3 emulator the tests and the other benchmarks use, spends 3-6 ms of one core per
request (its handler; werkzeug also closes every connection) and so serves ~150-300 requests/s
on this machine: a 10,000-file footer index is bound by it (and by the shaping proxy, one Python
process, ~1,000-1,400 requests/s), whatever the client does. This server answers the subset of
S3 that a reading client and the harness send, from memory, on one aiohttp process with
HTTP/1.1 keep-alive (as S3 does), and waits ``latency_ms`` before each answer (an ``asyncio``
sleep: no CPU, so any number of requests wait at once, like a real store's first-byte latency):

- ``PUT /bucket/key`` (plain bodies and the SDK's ``aws-chunked`` encoding), ``PUT /bucket``;
- ``GET``/``HEAD /bucket/key``, with ``Range`` (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``;
  206 and ``Content-Range``, 416 past the end) and ``If-Match`` (412 on another ETag);
- ``GET /bucket?list-type=2`` (ListObjectsV2: ``prefix``, ``start-after``,
  ``continuation-token``, ``max-keys``; keys in byte order, as S3 lists them).

It does **not** check signatures, and knows nothing else (no multipart upload, no versions,
no delimiters): a benchmark tool, not an emulator for tests. The ETag is the MD5 of the body,
as S3's for a single-part upload. Control endpoints under ``/__bench__/`` match
``benchmarks/proxy.py``'s (``GET stats``: requests, the most in flight at once, this process's
CPU seconds; ``POST reset``; ``POST config?latency_ms=``), so the harness drives it like the
proxy. Run: ``python -m benchmarks.fast_s3 [--latency-ms 20]``; it prints ``READY <port>``.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import socket
import sys
import time
from xml.sax.saxutils import escape

from aiohttp import web

_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
_LAST_MODIFIED = "2026-12-01T00:00:00.000Z"
_LAST_MODIFIED_HTTP = "Tue, 01 Dec 2026 00:00:00 GMT"


def decode_aws_chunked(raw: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body: ``<hex size>[;ext]\\r\\n<data>\\r\\n`` chunks up
    to a zero-size one, then optional trailers (the SDK's checksum), which are dropped."""
    out, i = bytearray(), 0
    while True:
        eol = raw.index(b"\r\n", i)
        size = int(raw[i:eol].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        out += raw[eol + 2 : eol + 2 + size]
        i = eol + 2 + size + 2


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """``[start, end)`` of a ``bytes=`` range over ``size`` bytes, or None when it starts past
    the end (416)."""
    spec = header.strip().removeprefix("bytes=")
    first, _, last = spec.partition("-")
    if not first:  # the last n bytes
        n = int(last)
        return (max(0, size - n), size) if size else None
    start = int(first)
    if start >= size:
        return None
    end = min(size, int(last) + 1) if last else size
    return start, end


class FastS3:
    def __init__(self, latency_ms: float = 0.0) -> None:
        self.latency_ms = latency_ms
        self.buckets: dict[str, dict[str, tuple[bytes, str]]] = {}
        self.reset()

    def reset(self) -> None:
        self.requests = 0
        self.in_flight = 0
        self.peak_in_flight = 0

    async def control(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if what == "stats":
            return web.json_response(
                {
                    "requests": self.requests,
                    "peak_in_flight": self.peak_in_flight,
                    "latency_ms": self.latency_ms,
                    "cpu_s": time.process_time(),
                }
            )
        if what == "reset":
            self.reset()
        elif what == "config":
            self.latency_ms = float(request.query.get("latency_ms", self.latency_ms))
        else:
            raise web.HTTPNotFound()
        return web.json_response({"ok": True})

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            body = await request.read()  # before the wait: a PUT is answered once received
            if self.latency_ms:
                await asyncio.sleep(self.latency_ms / 1000)
            return self._answer(request, body)
        finally:
            self.in_flight -= 1

    def _answer(self, request: web.Request, body: bytes) -> web.StreamResponse:
        bucket, _, key = request.match_info["path"].partition("/")
        method = request.method
        if not key:
            if method == "PUT":
                self.buckets.setdefault(bucket, {})
                return web.Response()
            if bucket not in self.buckets:
                return _error(404, "NoSuchBucket")
            if method == "GET" and request.query.get("list-type") == "2":
                return self._list(bucket, request)
            return _error(400, "NotImplemented")
        objects = self.buckets.get(bucket)
        if objects is None:
            return _error(404, "NoSuchBucket")
        if method == "PUT":
            if "aws-chunked" in request.headers.get("Content-Encoding", "") or request.headers.get(
                "x-amz-content-sha256", ""
            ).startswith("STREAMING-"):
                body = decode_aws_chunked(body)
            etag = f'"{hashlib.md5(body).hexdigest()}"'
            objects[key] = (body, etag)
            return web.Response(headers={"ETag": etag})
        if method not in ("GET", "HEAD"):
            return _error(400, "NotImplemented")
        found = objects.get(key)
        if found is None:
            return _error(404, "NoSuchKey", head=method == "HEAD")
        data, etag = found
        match = request.headers.get("If-Match")
        if match is not None and match.strip('"') != etag.strip('"'):
            return _error(412, "PreconditionFailed", head=method == "HEAD")
        headers = {
            "ETag": etag,
            "Last-Modified": _LAST_MODIFIED_HTTP,
            "Accept-Ranges": "bytes",
            "Content-Type": "binary/octet-stream",
            "x-amz-request-id": "FASTS3",
        }
        rng = request.headers.get("Range")
        status, part = 200, data
        if rng is not None:
            span = parse_range(rng, len(data))
            if span is None:
                return _error(416, "InvalidRange", head=method == "HEAD")
            status, part = 206, data[span[0] : span[1]]
            headers["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{len(data)}"
        if method == "HEAD":
            headers["Content-Length"] = str(len(part))
            return web.Response(status=status, headers=headers)
        return web.Response(status=status, body=part, headers=headers)

    def _list(self, bucket: str, request: web.Request) -> web.Response:
        q = request.query
        prefix = q.get("prefix", "")
        limit = max(1, min(1000, int(q.get("max-keys", "1000"))))
        after = q.get("continuation-token") or q.get("start-after") or ""
        objects = self.buckets[bucket]
        keys = sorted(
            (k for k in objects if k.startswith(prefix) and k > after), key=lambda k: k.encode()
        )
        page, more = keys[:limit], len(keys) > limit
        items = "".join(
            f"<Contents><Key>{escape(k)}</Key><LastModified>{_LAST_MODIFIED}</LastModified>"
            f"<ETag>{escape(objects[k][1])}</ETag><Size>{len(objects[k][0])}</Size>"
            "<StorageClass>STANDARD</StorageClass></Contents>"
            for k in page
        )
        token = f"<NextContinuationToken>{escape(page[-1])}</NextContinuationToken>" if more else ""
        xml = (
            f'<?xml version="1.0" encoding="UTF-8"?><ListBucketResult xmlns="{_NS}">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{limit}</MaxKeys>"
            f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>{items}{token}"
            "</ListBucketResult>"
        )
        return web.Response(body=xml.encode(), content_type="application/xml")


def _error(status: int, code: str, head: bool = False) -> web.Response:
    if head:
        return web.Response(status=status)
    xml = f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code></Error>'
    return web.Response(status=status, body=xml.encode(), content_type="application/xml")


def app(server: FastS3) -> web.Application:
    application = web.Application(client_max_size=1 << 30)
    application.router.add_route("*", "/__bench__/{what}", server.control)
    application.router.add_route("*", "/{path:.+}", server.handle)
    return application


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--latency-ms", type=float, default=0.0)
    ap.add_argument("--exit-with-parent", action="store_true")
    a = ap.parse_args()
    if a.exit_with_parent:
        from benchmarks.servers import exit_with_parent

        exit_with_parent()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    print(f"READY {sock.getsockname()[1]}", flush=True)
    web.run_app(app(FastS3(a.latency_ms)), sock=sock, print=None, access_log=None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
