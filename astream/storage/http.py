"""Read-only ``http://`` / ``https://`` stores over aiohttp.

Theory of operation
-------------------
One ``aiohttp.ClientSession`` per store, created lazily inside the running loop on first use (never
at construction) and re-created in a forked child, whose inherited session belongs to the parent's
loop. Its connector keeps up to :data:`~astream.storage.common.POOL_SIZE` connections alive and
reuses them across requests.

A ranged read sends ``Range: bytes=a-b``. A ``206`` is what we want; a ``416`` means the range
starts past the end (empty result); a ``200`` to a request that asked for a proper sub-range means
the server ignored ``Range``: that is a clear, non-retryable :class:`StorageError` rather than a
silent whole-object download. A body that ends before its ``Content-Length`` raises
``ClientPayloadError``, mapped to :class:`TransientStorageError` so the retry layer resumes it.
HTTP cannot list or write; those raise :class:`StorageError` naming the URL.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from urllib.parse import unquote, urlsplit, urlunsplit

import aiohttp

from astream.errors import ConfigError, StorageError, TransientStorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    CHUNK_SIZE,
    POOL_SIZE,
    changed_error,
    check_content_range,
    error_for_status,
    join_key,
    range_header,
    total_size,
)

__all__ = ["HttpBackend", "LazySession", "map_aiohttp_error"]


class LazySession:
    """An aiohttp session made on first use in the running loop, and again after fork."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._pid = 0
        self._headers = headers or {}

    def get(self) -> aiohttp.ClientSession:
        if self._session is None or self._pid != os.getpid() or self._session.closed:
            connector = aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE)
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers=self._headers,
                auto_decompress=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
            )
            self._pid = os.getpid()
        return self._session

    async def aclose(self) -> None:
        s, self._session = self._session, None
        if s is not None and self._pid == os.getpid() and not s.closed:
            await s.close()


def map_aiohttp_error(exc: BaseException, url: str) -> StorageError:
    """Connection-level aiohttp failures (no status) are transient."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return error_for_status(exc.status, url, exc.message)
    if isinstance(exc, aiohttp.ClientPayloadError):
        return TransientStorageError(f"body cut short ({exc})", url)
    return TransientStorageError(f"connection failed ({type(exc).__name__}: {exc})", url)


class HttpBackend:
    """Objects are ``{root}/{key}`` URLs served by any HTTP server that honours Range."""

    def __init__(
        self, url: str, *, headers: dict[str, str] | None = None, etags: bool = True
    ) -> None:
        if not isinstance(etags, bool):
            raise ConfigError(f"etags must be True or False, got {etags!r}")
        # False: the server's ETags do not name the object's version (mirrors behind one name
        # whose ETags differ per server, as inode-based ones do): none is reported or used
        self._etags = etags
        parts = urlsplit(url)
        if parts.username is not None or parts.password is not None:
            # user:password@ in the URL becomes a header, so it never reaches a message or repr
            auth = aiohttp.BasicAuth(unquote(parts.username or ""), unquote(parts.password or ""))
            headers = {"Authorization": auth.encode(), **(headers or {})}
            url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._url = url.rstrip("/")
        self._session = LazySession(headers)

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        return f"{self._url}/{join_key('', key)}" if key else self._url

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        url = self.url_for(key)
        rng = range_header(start, end)
        headers = {"Range": rng} if rng else {}
        if etag is not None and not etag.startswith("W/"):  # If-Match compares strongly
            headers["If-Match"] = etag
        try:
            async with self._session.get().get(url, headers=headers) as resp:
                if resp.status == 416:
                    return
                if etag is not None and resp.status == 412:
                    raise changed_error(url, etag)
                got = resp.headers.get("ETag")
                if etag is not None and resp.status < 300 and got is not None and got != etag:
                    raise changed_error(url, etag)  # a server that ignores If-Match
                if resp.status >= 400:
                    raise error_for_status(resp.status, url, resp.reason or "")
                if rng is not None and resp.status == 200:
                    whole = resp.content_length
                    if not (start == 0 and whole is not None and end is not None and whole <= end):
                        raise StorageError(
                            f"server ignored the Range header ({rng}) and sent the whole "
                            "object (HTTP 200); ranged reads need a server that honours Range",
                            url,
                            retryable=False,
                        )
                if resp.status == 206 and rng is not None:
                    check_content_range(resp.headers.get("Content-Range"), rng, start, end, url)
                if seen is not None and self._etags and got and not got.startswith("W/"):
                    seen.append(got)  # a weak ETag may differ between equal answers
                async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                    yield chunk
        except aiohttp.ClientError as exc:
            raise map_aiohttp_error(exc, url) from exc

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` and its ETag, in one suffix-range GET (no HEAD)."""
        url = self.url_for(key)
        try:
            async with self._session.get().get(url, headers={"Range": f"bytes=-{n}"}) as resp:
                if resp.status == 416:
                    return ObjectInfo(key, 0, None), b""
                if resp.status >= 400:
                    raise error_for_status(resp.status, url, resp.reason or "")
                data = await resp.read()
                cr = resp.headers.get("Content-Range") if resp.status == 206 else None
                info = ObjectInfo(key, total_size(cr, len(data)), self._etag(resp))
        except aiohttp.ClientError as exc:
            raise map_aiohttp_error(exc, url) from exc
        if resp.status == 200 and len(data) > n:  # the server ignored Range: keep the tail
            data = data[-n:]
        return info, data

    def _etag(self, resp: aiohttp.ClientResponse) -> str | None:
        return resp.headers.get("ETag") if self._etags else None

    async def head(self, key: str) -> ObjectInfo:
        url = self.url_for(key)
        try:
            async with self._session.get().head(url, allow_redirects=True) as resp:
                if resp.status >= 400:
                    raise error_for_status(resp.status, url, resp.reason or "")
                size = resp.content_length
                if size is None:
                    raise StorageError("HEAD response has no Content-Length", url)
                return ObjectInfo(key, size, self._etag(resp))
        except aiohttp.ClientError as exc:
            raise map_aiohttp_error(exc, url) from exc

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        raise StorageError("listing is not supported over plain HTTP", self.url_for(prefix))

    async def put(self, key: str, data: bytes) -> None:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def put_file(self, key: str, path: str) -> None:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def aclose(self) -> None:
        await self._session.aclose()
