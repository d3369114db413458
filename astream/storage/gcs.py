"""``gs://bucket/prefix`` stores over gcloud-aio-storage.

Theory of operation
-------------------
gcloud-aio-storage talks to the GCS JSON API with an aiohttp session we own (made lazily in the
running loop, re-made after fork, pool of :data:`~astream.storage.common.POOL_SIZE`). Credentials:
``service_file`` option, else ``GOOGLE_APPLICATION_CREDENTIALS``/the metadata server, as the
library resolves them. ``STORAGE_EMULATOR_HOST`` (or the ``api_root`` option) points it at an
emulator and turns authentication off.

The library retries nothing and raises ``aiohttp.ClientResponseError`` for statuses >= 400; we map
those (416 -> empty read past the end) and connection failures onto the astream tree. Reads stream
through ``download_stream``; a body cut short raises ``ClientPayloadError`` -> transient, and the
retry layer resumes it. Large ``put_file`` calls use the resumable upload protocol.

Conditional writes (``put_if``/``put_file_if``) carry ``ifGenerationMatch`` (``0``: only if
absent; else the generation to replace). Up to ``resumable_threshold`` bytes they are one
``uploadType=multipart`` request (fake-gcs-server honours the condition only there); larger
ones open a resumable session with the condition and send the bytes in one PUT of our own, so
that a 412 at finalisation, where GCS checks the condition again, fails at once (the library's
own PUT would retry it for 15 s). ``delete`` with ``expect`` carries ``ifGenerationMatch``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import IO, Any

import aiohttp
from gcloud.aio.storage import Storage

from astream.errors import StorageError, TransientStorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    CHUNK_SIZE,
    POOL_SIZE,
    changed_error,
    condition_failed,
    error_for_status,
    join_key,
    keep_inherited,
    range_header,
    split_bucket,
    total_size,
)

__all__ = ["GcsBackend", "LazySession", "map_aiohttp_error"]


class LazySession:
    """An aiohttp session made on first use in the running loop, and again after fork."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._pid = 0
        self._headers = headers or {}

    def get(self) -> aiohttp.ClientSession:
        if self._session is None or self._pid != os.getpid() or self._session.closed:
            if self._pid != os.getpid():
                keep_inherited(self._session)  # the parent's: never finalised here
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


def _identity(meta: dict[str, Any]) -> str | None:
    """An object's identity: its generation (a new one on every rewrite; what
    ``ifGenerationMatch`` conditions a read on), else its ETag."""
    gen = meta.get("generation")
    return str(gen) if gen else (meta.get("etag") or meta.get("md5Hash"))


class GcsBackend:
    def __init__(
        self,
        url: str,
        *,
        service_file: str | None = None,
        api_root: str | None = None,
        list_page_size: int = 1000,
        resumable_threshold: int = 5 << 20,
    ) -> None:
        scheme_len = len("gs://") if url.startswith("gs://") else len("gcs://")
        self._url = url.rstrip("/")
        self.bucket, self.prefix = split_bucket(self._url, scheme_len)
        self.service_file = service_file
        self.api_root = api_root
        self.list_page_size = list_page_size
        self.resumable_threshold = resumable_threshold
        self._session = LazySession()
        self._storage: Storage | None = None
        self._pid = 0

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        return f"gs://{self.bucket}/{self._key(key)}"

    def _key(self, key: str) -> str:
        return join_key(self.prefix, key)

    def _client(self) -> Storage:
        if self._storage is None or self._pid != os.getpid():
            if self._pid != os.getpid():
                keep_inherited(self._storage)
            self._storage = Storage(
                service_file=self.service_file,
                session=self._session.get(),  # type: ignore[arg-type]
                api_root=self.api_root,
            )
            self._pid = os.getpid()
        return self._storage

    def _map(self, exc: BaseException, key: str) -> StorageError:
        return map_aiohttp_error(exc, self.url_for(key))

    _ERRORS = (aiohttp.ClientError, OSError)

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        rng = range_header(start, end)
        headers = {"Range": rng} if rng else {}
        params = {"alt": "media"}
        if etag is not None and etag.isdigit():  # our GCS identity: the generation
            params["ifGenerationMatch"] = etag
        try:
            stream = await self._client()._download_stream(
                self.bucket, self._key(key), headers=headers, params=params
            )
        except aiohttp.ClientResponseError as exc:
            if exc.status == 416:
                return
            if etag is not None and exc.status == 412:
                raise changed_error(self.url_for(key), etag) from exc
            raise self._map(exc, key) from exc
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        async with stream as resp:
            got = resp.headers.get("x-goog-generation")
            if etag is not None and etag.isdigit() and got is not None and got != etag:
                # an emulator that ignores ifGenerationMatch still names what it serves
                raise changed_error(self.url_for(key), etag)
            named = got or resp.headers.get("ETag")  # our GCS identity: the generation
            if seen is not None and named:
                seen.append(named)
            try:
                async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                    yield chunk
            except self._ERRORS as exc:
                raise self._map(exc, key) from exc

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` and its identity, in one suffix-range GET (no HEAD)."""
        try:
            stream = await self._client()._download_stream(
                self.bucket, self._key(key), headers={"Range": f"bytes=-{n}"},
                params={"alt": "media"},
            )  # fmt: skip
            async with stream as resp:
                data: bytes = await resp.content.read()
                headers = resp.headers
        except aiohttp.ClientResponseError as exc:
            if exc.status == 416:
                return ObjectInfo(key, 0, None), b""
            raise self._map(exc, key) from exc
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        size = total_size(headers.get("Content-Range"), len(data))
        gen = headers.get("x-goog-generation") or None
        return ObjectInfo(key, size, gen), data

    async def head(self, key: str) -> ObjectInfo:
        try:
            meta = await self._client().download_metadata(self.bucket, self._key(key))
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        return ObjectInfo(key, int(meta["size"]), _identity(meta))

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        return await self.list_page_after(prefix, None, token)

    async def list_page_after(
        self, prefix: str, after: str | None, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        """A page of the keys under ``prefix`` from the key ``after`` on (``startOffset`` is
        inclusive: ``after`` itself may come back; the caller drops it)."""
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        params = {"prefix": full, "maxResults": str(self.list_page_size)}
        if token:
            params["pageToken"] = token
        if after is not None:
            params["startOffset"] = self._key(after)
        try:
            r: dict[str, Any] = await self._client().list_objects(self.bucket, params=params)
        except self._ERRORS as exc:
            raise self._map(exc, prefix) from exc
        cut = len(self.prefix) + 1 if self.prefix else 0
        items = [
            ObjectInfo(o["name"][cut:], int(o["size"]), _identity(o)) for o in r.get("items", [])
        ]
        items.sort(key=lambda o: o.key)
        return items, r.get("nextPageToken") or None

    async def put(self, key: str, data: bytes) -> None:
        try:
            await self._client().upload(
                self.bucket,
                self._key(key),
                data,
                content_type="application/octet-stream",
                force_resumable_upload=len(data) > self.resumable_threshold,
            )
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    async def put_file(self, key: str, path: str) -> None:
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                await self._client().upload(
                    self.bucket,
                    self._key(key),
                    f,
                    content_type="application/octet-stream",
                    force_resumable_upload=size > self.resumable_threshold,
                    timeout=max(30, size >> 20),
                )
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        return await self._upload_if(key, data, len(data), expect)

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            return await self._upload_if(key, f, size, expect)

    async def _upload_if(
        self, key: str, body: bytes | IO[bytes], size: int, expect: str | None
    ) -> str:
        if expect is not None and not expect.isdigit():
            raise StorageError(
                f"a conditional write needs a GCS generation, got {expect!r}",
                self.url_for(key),
                retryable=False,
            )
        params = {"ifGenerationMatch": expect or "0"}
        try:
            if size <= self.resumable_threshold:
                meta: dict[str, Any] = await self._client().upload(
                    self.bucket,
                    self._key(key),
                    body,
                    content_type="application/octet-stream",
                    parameters=params,
                    metadata={"Content-Type": "application/octet-stream"},  # multipart
                    force_resumable_upload=False,
                    timeout=max(30, size >> 20),
                )
            else:
                meta = await self._resumable_if(key, body, size, params)
        except aiohttp.ClientResponseError as exc:
            if exc.status == 412:
                raise condition_failed(self.url_for(key), expect) from exc
            raise self._map(exc, key) from exc
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        return str(meta["generation"])

    async def _resumable_if(
        self, key: str, body: bytes | IO[bytes], size: int, params: dict[str, str]
    ) -> dict[str, Any]:
        """A resumable upload conditioned by ``params``: the session is opened by the library
        (it holds the auth), the bytes go in one PUT here."""
        client = self._client()
        headers: dict[str, str] = dict(await client._headers())
        headers.update({"Content-Length": str(size), "Content-Type": "application/octet-stream"})
        url = f"{client._api_root_write}/{self.bucket}/o"
        uri = await client._initiate_upload(url, self._key(key), dict(params), dict(headers))
        timeout = aiohttp.ClientTimeout(total=None, sock_read=max(60, size >> 20))
        async with self._session.get().put(
            uri, data=body, headers=headers, timeout=timeout
        ) as resp:
            if resp.status >= 300:
                raise aiohttp.ClientResponseError(
                    resp.request_info, (), status=resp.status, message=resp.reason or ""
                )
            got: dict[str, Any] = await resp.json(content_type=None)
            return got

    async def delete(self, key: str, expect: str | None) -> None:
        params = {"ifGenerationMatch": expect} if expect is not None and expect.isdigit() else {}
        try:
            await self._client().delete(self.bucket, self._key(key), params=params)
        except aiohttp.ClientResponseError as exc:
            if exc.status == 404:
                return  # already gone
            if exc.status == 412:
                raise condition_failed(self.url_for(key), expect) from exc
            raise self._map(exc, key) from exc
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    async def aclose(self) -> None:
        self._storage = None
        await self._session.aclose()
