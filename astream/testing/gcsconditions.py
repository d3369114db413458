"""A proxy that gives fake-gcs-server the GCS write preconditions it lacks.

Theory of operation
-------------------
fake-gcs-server honours ``ifGenerationMatch`` only on ``uploadType=multipart`` uploads; it
ignores it on simple (``uploadType=media``) and resumable uploads and on deletes, where the real
service answers 412 Precondition Failed. :class:`GcsConditionProxy` sits in front of it
(``api_root``/``STORAGE_EMULATOR_HOST`` pointed at the proxy) and forwards every request, but
first evaluates the precondition of those writes itself, as GCS does:

- a simple or multipart upload ``POST /upload/storage/v1/b/<bucket>/o?ifGenerationMatch=G``,
  and a delete ``DELETE /storage/v1/b/<bucket>/o/<name>?ifGenerationMatch=G``: 412 unless the
  object's generation is ``G`` (``0``: unless the object is absent);
- a resumable upload: checked when the session is opened and again on the ``PUT`` that
  completes it (GCS checks at finalisation), the session's ``Location`` rewritten to the proxy.

The current generation is read from the emulator (an object ``GET``), and the check and the
forwarded write run under one lock per object name, so that two writers going through the proxy
see the check-and-write as one atomic step, as they would on GCS. ``conditions`` records every
condition checked: ``(method, kind, object name, condition, status)``.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
from aiohttp import web

from astream.testing.servers import AppServer, ThreadedApp

__all__ = ["GcsConditionProxy"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "upgrade", "te", "trailers"}
_UPLOAD = re.compile(r"^/upload/storage/v1/b/([^/]+)/o$")
_OBJECT = re.compile(r"^/storage/v1/b/([^/]+)/o/(.+)$")
_NAME = re.compile(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')


class GcsConditionProxy(AppServer):
    """``GcsConditionProxy(upstream_url).start()``; point GCS clients at ``.url``."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.conditions: list[tuple[str, str, str, str, int]] = []
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}
        self._sessions: dict[str, tuple[str, str, str]] = {}  # upload_id -> bucket, name, cond
        self._lock = threading.Lock()
        self._session: aiohttp.ClientSession | None = None
        app = web.Application(client_max_size=1 << 34)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_cleanup.append(self._close)
        self._app = ThreadedApp(app)

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None)
            )
        return self._session

    def _object_lock(self, bucket: str, name: str) -> asyncio.Lock:
        return self._locks.setdefault((bucket, name), asyncio.Lock())

    async def _generation(self, bucket: str, name: str) -> str:
        """The object's generation in the emulator, ``"0"`` when absent."""
        url = f"{self.upstream}/storage/v1/b/{bucket}/o/{quote(name, safe='')}"
        async with self._client().get(url) as r:
            if r.status == 404:
                return "0"
            meta: dict[str, Any] = await r.json(content_type=None)
            return str(meta.get("generation", "0"))

    def _record(self, method: str, kind: str, name: str, cond: str, status: int) -> None:
        with self._lock:
            self.conditions.append((method, kind, name, cond, status))

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        q = request.query
        cond = q.get("ifGenerationMatch")
        up = _UPLOAD.match(request.path)
        obj = _OBJECT.match(request.path)
        if up is not None and request.method == "PUT" and "upload_id" in q:
            session = self._sessions.get(q["upload_id"])
            if session is not None and session[2]:
                bucket, name, cond = session
                return await self._guarded(request, body, bucket, name, cond, "resumable-final")
            return await self._forward(request, body)
        if up is not None and request.method == "POST" and cond is not None:
            kind = q.get("uploadType", "media")
            name = q.get("name", "")
            if not name:
                m = _NAME.search(body)
                name = json.loads(b'"' + m[1] + b'"') if m else ""
            return await self._guarded(request, body, up[1], name, cond, kind)
        if obj is not None and request.method == "DELETE" and cond is not None:
            return await self._guarded(request, body, obj[1], unquote(obj[2]), cond, "delete")
        return await self._forward(request, body)

    async def _guarded(
        self, request: web.Request, body: bytes, bucket: str, name: str, cond: str, kind: str
    ) -> web.StreamResponse:
        async with self._object_lock(bucket, name):
            now = await self._generation(bucket, name)
            if now != cond:
                self._record(request.method, kind, name, cond, 412)
                return web.json_response(
                    {"error": {"code": 412, "message": "Precondition Failed"}}, status=412
                )
            resp = await self._forward(request, body, session=(bucket, name, cond))
            self._record(request.method, kind, name, cond, resp.status)
            return resp

    async def _forward(
        self,
        request: web.Request,
        body: bytes,
        session: tuple[str, str, str] | None = None,
    ) -> web.StreamResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        headers.pop("Host", None)
        url = self.upstream + request.rel_url.raw_path_qs
        async with self._client().request(
            request.method, url, headers=headers, data=body or None, allow_redirects=False
        ) as up:
            data = await up.read()
            out = {
                k: v
                for k, v in up.headers.items()
                if k.lower() not in _HOP and k.lower() != "content-length"
            }
            loc = up.headers.get("Location")
            if loc is not None and loc.startswith(self.upstream):
                out["Location"] = self.url + loc[len(self.upstream) :]
                m = re.search(r"[?&]upload_id=([^&]+)", loc)
                if m is not None and session is not None:
                    self._sessions[m[1]] = session
            return web.Response(status=up.status, body=data, headers=out)
