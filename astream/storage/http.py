"""Read-only ``http://`` / ``https://`` stores.

Theory of operation
-------------------
Requests go out on astream's own HTTP/1.1 client (:mod:`astream.storage.h1`; no aiohttp): one
pool per store, bound lazily to the running loop on first use (never at construction) and
started anew in a forked child, keeping up to :data:`~astream.storage.common.POOL_SIZE`
connections alive. Redirects (301, 302, 303, 307, 308) are followed, at most
:data:`MAX_REDIRECTS` in a row, with the same headers, except that ``Authorization`` is not
sent to another origin (scheme, host and port). A key names a file: it is sent percent-encoded
(a space, a non-ASCII letter, and ``%`` itself as ``%25``), the URL's reserved characters as
written; the store's root URL and a redirect's ``Location`` keep their own ``%`` escapes.

A ranged read sends ``Range: bytes=a-b``. A ``206`` is what we want; a ``416`` means the range
starts past the end (empty result); a ``200`` to a request that asked for a proper sub-range means
the server ignored ``Range``: that is a clear, non-retryable :class:`StorageError` rather than a
silent whole-object download. A body that ends before its ``Content-Length`` raises
:class:`TransientStorageError` (``body cut short``), so the retry layer resumes it.
HTTP cannot list or write; those raise :class:`StorageError` naming the URL.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

from astream.errors import ConfigError, StorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    POOL_SIZE,
    changed_error,
    check_content_range,
    error_for_status,
    join_key,
    range_header,
    total_size,
)
from astream.storage.h1 import Pool, Response

__all__ = ["MAX_REDIRECTS", "HttpBackend"]

MAX_REDIRECTS = 10
"""Redirects followed in a row before a read fails."""
_REDIRECTS = (301, 302, 303, 307, 308)
_PATH_SAFE = "/%:@!$&'()*+,;=~-._"  # sent as written; everything else percent-encoded
_KEY_SAFE = _PATH_SAFE.replace("%", "")  # a '%' in a key is a character of its file's name


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
            pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode("latin-1")).decode("ascii")
            headers = {"Authorization": auth, **(headers or {})}
            url = urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
        self._url = url.rstrip("/")
        self._headers = dict(headers or {})
        self._pool = Pool(POOL_SIZE)

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        if not key:
            return self._url
        return f"{self._url}/{quote(join_key('', key), safe=_KEY_SAFE)}"

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        url = self.url_for(key)
        rng = range_header(start, end)
        headers = {"Range": rng} if rng else {}
        if etag is not None and not etag.startswith("W/"):  # If-Match compares strongly
            headers["If-Match"] = etag
        resp = await self._get("GET", url, headers)
        try:
            if resp.status == 416:
                return
            if etag is not None and resp.status == 412:
                raise changed_error(url, etag)
            got = resp.headers.get("ETag")
            if etag is not None and resp.status < 300 and got is not None and got != etag:
                raise changed_error(url, etag)  # a server that ignores If-Match
            if resp.status >= 400:
                raise error_for_status(resp.status, url, resp.reason)
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
            async for chunk in resp.chunks():
                yield chunk
        finally:
            resp.release()

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` and its ETag, in one suffix-range GET (no HEAD)."""
        url = self.url_for(key)
        resp = await self._get("GET", url, {"Range": f"bytes=-{n}"})
        try:
            if resp.status == 416:
                return ObjectInfo(key, 0, None), b""
            if resp.status >= 400:
                raise error_for_status(resp.status, url, resp.reason)
            data = await resp.read()
            cr = resp.headers.get("Content-Range") if resp.status == 206 else None
            info = ObjectInfo(key, total_size(cr, len(data)), self._etag(resp))
        finally:
            resp.release()
        if resp.status == 200 and len(data) > n:  # the server ignored Range: keep the tail
            data = data[-n:]
        return info, data

    def _etag(self, resp: Response) -> str | None:
        return resp.headers.get("ETag") if self._etags else None

    async def head(self, key: str) -> ObjectInfo:
        url = self.url_for(key)
        resp = await self._get("HEAD", url, {})
        resp.release()
        if resp.status >= 400:
            raise error_for_status(resp.status, url, resp.reason)
        size = resp.content_length
        if size is None:
            raise StorageError("HEAD response has no Content-Length", url)
        return ObjectInfo(key, size, self._etag(resp))

    async def _get(self, method: str, url: str, headers: dict[str, str]) -> Response:
        """``method`` on ``url`` with the store's headers and ``headers``, redirects followed."""
        sent = {**self._headers, **headers}
        origin = _origin(url)
        target = url
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(target)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise StorageError(f"redirected to {target!r}, not an http(s) URL", url)
            path = quote(parts.path or "/", safe=_PATH_SAFE)
            if parts.query:
                path += "?" + quote(parts.query, safe=_PATH_SAFE + "?")
            if _origin(target) != origin:  # credentials stay with the origin they were for
                sent = {k: v for k, v in sent.items() if k.lower() != "authorization"}
            resp = await self._pool.request(method, (parts.scheme, parts.netloc, path), sent, url)
            location = resp.headers.get("Location")
            if resp.status not in _REDIRECTS or not location:
                return resp
            resp.release()
            target = urljoin(target, location)
        raise StorageError(f"more than {MAX_REDIRECTS} redirects in a row", url, retryable=False)

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        raise StorageError("listing is not supported over plain HTTP", self.url_for(prefix))

    async def put(self, key: str, data: bytes) -> None:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def put_file(self, key: str, path: str) -> None:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def delete(self, key: str, expect: str | None) -> None:
        raise StorageError("HTTP stores are read-only", self.url_for(key))

    async def aclose(self) -> None:
        await self._pool.aclose()


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc.rpartition("@")[2].lower()
