"""A recording HTTP proxy: forwards every request to one upstream, unchanged, and keeps what
each request carried, so a test can assert on the headers a client really sent.

``RecordingProxy(upstream).start()``; point a client at ``.url``; ``requests`` lists a
:class:`Recorded` (method, path with query, headers) per request, in arrival order. The ``Host``
header is forwarded as the client sent it, so signed requests stay valid. Bodies and answers
are passed through whole (no streaming): meant for small test objects.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
import yarl
from aiohttp import web
from multidict import CIMultiDict

from astream.testing.servers import AppServer, ThreadedApp

__all__ = ["Recorded", "RecordingProxy"]

_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailers", "upgrade"}


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str  # with the query, as sent
    headers: CIMultiDict[str]


class RecordingProxy(AppServer):
    name = "recording proxy"

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.requests: list[Recorded] = []
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        app.on_cleanup.append(self._close)
        self._session: aiohttp.ClientSession | None = None
        self._app = ThreadedApp(app)

    def sent(self, method: str | None = None) -> list[Recorded]:
        """The requests recorded, only those of ``method`` when given."""
        return [r for r in self.requests if method is None or r.method == method]

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        self.requests.append(
            Recorded(request.method, request.raw_path, CIMultiDict(request.headers))
        )
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        async with self._session.request(
            request.method,
            yarl.URL(self.upstream + request.raw_path, encoded=True),
            headers=headers,
            data=body if body else None,
            allow_redirects=False,
            skip_auto_headers=("Content-Type", "User-Agent", "Accept", "Accept-Encoding"),
        ) as resp:
            payload = await resp.read()
            out = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}
            out.pop("Content-Length", None)
            if request.method == "HEAD":
                answer = web.Response(status=resp.status, headers=out)
                if "Content-Length" in resp.headers:
                    answer.headers["Content-Length"] = resp.headers["Content-Length"]
                return answer
            return web.Response(status=resp.status, body=payload, headers=out)
