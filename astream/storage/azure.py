"""``az://container/prefix`` and ``azure://container/prefix`` stores over azure-storage-blob aio.

Theory of operation
-------------------
A ``ContainerClient`` is made lazily in the running loop on first use and again after fork, on an
aiohttp session we own (pool of :data:`~astream.storage.common.POOL_SIZE`). Credentials, first
match wins: the ``connection_string`` option, ``AZURE_STORAGE_CONNECTION_STRING``, or an account
name (``account_name`` / ``AZURE_STORAGE_ACCOUNT``) with a key (``account_key`` /
``AZURE_STORAGE_KEY``) or anonymous access. ``endpoint`` (e.g. Azurite's
``http://127.0.0.1:10000/devstoreaccount1``) overrides the account URL.

The SDK's own retry policy is switched off (``retry_total=0``): its default waits 15 s+ between
tries and astream retries in one place. ``InvalidRange``/416 means the range starts past the end
(empty read). Large ``put_file`` calls become staged blocks, uploaded concurrently by the SDK.

Reads (``iter_range``) do not go through the SDK when the client authenticates by account key
(SharedKey), by a SAS token in its URL, or anonymously -- every way this backend is configured:
one GET of ``[offset, offset+length)`` on our aiohttp session, ``x-ms-range`` and ``If-Match``
(the indexed ETag) signed with the account key as the Blob service's SharedKey scheme defines
(:func:`_shared_key`). The SDK's request pipeline costs ~1.1-1.4 ms of CPU per request (its
policies, XML/headers deserialisation; measured by ``benchmarks/bench_request_cpu.py``), which
bounds a cold footer index of many small files on one core; the direct GET costs what an aiohttp
GET does. The body streams (a body cut short resumes at the byte it stopped at; the SDK
buffered 2 MiB GETs whole). A token credential, which the constructor never makes, would fall
back to the SDK (``download_blob``).

Conditional writes go through the SDK: ``put_if``/``put_file_if`` upload with
``overwrite=False`` (``If-None-Match: *``; refused with 409 ``BlobAlreadyExists``) or with the
ETag to replace (``If-Match``; refused with 412 ``ConditionNotMet``); a large file's condition
rides on its ``Put Block List``. ``delete`` with ``expect`` sends ``If-Match``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import aiohttp
import yarl
from azure.core import MatchConditions
from azure.core.exceptions import AzureError, HttpResponseError
from azure.core.pipeline.transport import AioHttpTransport
from azure.storage.blob.aio import ContainerClient

from astream.errors import ConfigError, StorageError, TransientStorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    CHUNK_SIZE,
    POOL_SIZE,
    changed_error,
    condition_failed,
    error_for_status,
    join_key,
    keep_inherited,
    split_bucket,
)

__all__ = ["AZURE_GET_CHUNK", "AzureBackend"]

AZURE_GET_CHUNK = 2 * CHUNK_SIZE
"""The SDK downloads (and buffers) bodies in GETs of this size: the unit a cut body re-fetches."""


class AzureBackend:
    def __init__(
        self,
        url: str,
        *,
        connection_string: str | None = None,
        account_name: str | None = None,
        account_key: str | None = None,
        endpoint: str | None = None,
        list_page_size: int = 1000,
        max_single_put_size: int = 64 << 20,
        max_block_size: int = 8 << 20,
        put_concurrency: int = 8,
    ) -> None:
        scheme_len = len(url.split("://", 1)[0]) + 3
        self._url = url.rstrip("/")
        self.container, self.prefix = split_bucket(self._url, scheme_len)
        self._conn = connection_string or os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
        self._account = account_name or os.environ.get("AZURE_STORAGE_ACCOUNT")
        self._key_cred = account_key or os.environ.get("AZURE_STORAGE_KEY")
        self._endpoint = endpoint
        if not self._conn and not self._account and not endpoint:
            raise ConfigError(
                f"url {url!r}: no Azure credentials: set AZURE_STORAGE_CONNECTION_STRING, or "
                "AZURE_STORAGE_ACCOUNT (+ AZURE_STORAGE_KEY), or pass connection_string=/endpoint="
            )
        self.list_page_size = list_page_size
        self._sdk_options: dict[str, Any] = {
            "retry_total": 0,
            "max_single_get_size": AZURE_GET_CHUNK,
            "max_chunk_get_size": AZURE_GET_CHUNK,
            "max_single_put_size": max_single_put_size,
            "max_block_size": max_block_size,
        }
        self.put_concurrency = put_concurrency
        self._client: ContainerClient | None = None
        self._session: aiohttp.ClientSession | None = None
        self._pid = 0
        self._direct: _Direct | None = None

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        scheme = self._url.split("://", 1)[0]
        return f"{scheme}://{self.container}/{self._key(key)}"

    def _key(self, key: str) -> str:
        return join_key(self.prefix, key)

    def _get(self) -> ContainerClient:
        if self._client is not None and self._pid == os.getpid():
            return self._client
        if self._pid != os.getpid():
            keep_inherited(self._client, self._session, self._direct)  # the parent's
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL_SIZE, limit_per_host=POOL_SIZE),
            auto_decompress=False,
        )
        opts = dict(self._sdk_options)
        opts["transport"] = AioHttpTransport(session=self._session, session_owner=False)
        if self._conn and not self._endpoint:
            client = ContainerClient.from_connection_string(self._conn, self.container, **opts)
        else:
            account_url = self._endpoint or f"https://{self._account}.blob.core.windows.net"
            cred: Any = None
            if self._key_cred and self._account:
                cred = {"account_name": self._account, "account_key": self._key_cred}
            client = ContainerClient(account_url, self.container, credential=cred, **opts)
        self._client, self._pid = client, os.getpid()
        self._direct = _Direct.of(client)
        return client

    def _map(self, exc: BaseException, key: str) -> StorageError:
        url = self.url_for(key)
        if isinstance(exc, HttpResponseError) and exc.status_code:
            code = str(getattr(exc, "error_code", "") or "")
            if code in ("ServerBusy", "OperationTimedOut"):
                return error_for_status(429, url, code)
            return error_for_status(exc.status_code, url, code)
        return TransientStorageError(f"connection failed ({type(exc).__name__}: {exc})", url)

    _ERRORS = (AzureError, aiohttp.ClientError, OSError, asyncio.TimeoutError)

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        client = self._get()
        direct, session = self._direct, self._session
        inner = (
            self._iter_direct(direct, session, key, start, end, etag, seen)
            if direct is not None and session is not None
            else self._iter_sdk(client, key, start, end, etag, seen)
        )
        try:
            async for chunk in inner:
                yield chunk
        finally:
            await inner.aclose()  # type: ignore[attr-defined]

    async def _iter_direct(
        self,
        direct: _Direct,
        session: aiohttp.ClientSession,
        key: str,
        start: int,
        end: int | None,
        etag: str | None,
        seen: list[str] | None = None,
    ) -> AsyncIterator[bytes]:
        """``[start, end)`` of ``key`` by one GET on our session, signed without the SDK."""
        if end is not None and end <= start:
            return
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": direct.version}
        if start or end is not None:
            headers["x-ms-range"] = f"bytes={start}-" + ("" if end is None else str(end - 1))
        if etag is not None:
            headers["If-Match"] = etag
        url = direct.url_of(self._key(key), headers)
        try:
            resp = await session.get(url, headers=headers)
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        try:
            if resp.status == 416:
                return
            if resp.status == 412 and etag is not None:
                raise changed_error(self.url_for(key), etag)
            if resp.status >= 300:
                code = resp.headers.get("x-ms-error-code", "") or resp.reason or ""
                if code in ("ServerBusy", "OperationTimedOut"):
                    raise error_for_status(429, self.url_for(key), code)
                raise error_for_status(resp.status, self.url_for(key), code)
            if "x-ms-range" in headers and resp.status != 206:
                raise StorageError(
                    f"server answered HTTP {resp.status} to a ranged read ({headers['x-ms-range']})"
                    ": refusing bytes of another range",
                    self.url_for(key),
                    retryable=False,
                )
            got = resp.headers.get("ETag")
            if etag is not None and got is not None and got.strip('"') != etag.strip('"'):
                # a server that ignored If-Match still names what it serves (a listing gives
                # the ETag unquoted, a header quoted)
                raise changed_error(self.url_for(key), etag)
            if seen is not None and got:
                seen.append(got)
            try:
                async for chunk in resp.content.iter_chunked(CHUNK_SIZE):
                    yield chunk
            except self._ERRORS as exc:
                raise self._map(exc, key) from exc
        finally:
            resp.release()

    async def _iter_sdk(
        self,
        client: ContainerClient,
        key: str,
        start: int,
        end: int | None,
        etag: str | None,
        seen: list[str] | None = None,
    ) -> AsyncIterator[bytes]:
        blob = client.get_blob_client(self._key(key))
        length = None if end is None else end - start
        cond: dict[str, Any] = {}
        if etag is not None:
            cond = {"etag": etag, "match_condition": MatchConditions.IfNotModified}
        try:
            dl = await blob.download_blob(offset=start, length=length, max_concurrency=1, **cond)
        except HttpResponseError as exc:
            if exc.status_code == 416:
                return
            if etag is not None and exc.status_code == 412:
                raise changed_error(self.url_for(key), etag) from exc
            raise self._map(exc, key) from exc
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        named = getattr(dl.properties, "etag", None)
        if seen is not None and named:
            seen.append(named)
        chunks = dl.chunks()
        while True:
            try:
                chunk = await chunks.__anext__()
            except StopAsyncIteration:
                return
            except HttpResponseError as exc:
                if etag is not None and exc.status_code == 412:
                    raise changed_error(self.url_for(key), etag) from exc
                raise self._map(exc, key) from exc
            except self._ERRORS as exc:
                raise self._map(exc, key) from exc
            yield chunk

    async def head(self, key: str) -> ObjectInfo:
        blob = self._get().get_blob_client(self._key(key))
        try:
            p = await blob.get_blob_properties()
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        return ObjectInfo(key, int(p.size), p.etag)

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            pages: Any = (
                self._get()
                .list_blobs(name_starts_with=full or None, results_per_page=self.list_page_size)
                .by_page(continuation_token=token)
            )
            page = await pages.__anext__()
            items = [ObjectInfo(b.name[cut:], int(b.size), b.etag) async for b in page]
        except StopAsyncIteration:
            return [], None
        except self._ERRORS as exc:
            raise self._map(exc, prefix) from exc
        return items, pages.continuation_token or None

    async def put(self, key: str, data: bytes) -> None:
        blob = self._get().get_blob_client(self._key(key))
        try:
            await blob.upload_blob(data, overwrite=True, max_concurrency=self.put_concurrency)
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    async def put_file(self, key: str, path: str) -> None:
        blob = self._get().get_blob_client(self._key(key))
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                await blob.upload_blob(
                    f, length=size, overwrite=True, max_concurrency=self.put_concurrency
                )
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    @staticmethod
    def _condition(expect: str | None) -> dict[str, Any]:
        if expect is None:
            return {"overwrite": False}  # If-None-Match: *
        tag = expect if expect.startswith('"') else f'"{expect}"'  # a listing's are bare
        return {"overwrite": True, "etag": tag, "match_condition": MatchConditions.IfNotModified}

    def _refused(self, exc: BaseException, key: str, expect: str | None) -> StorageError | None:
        if not isinstance(exc, HttpResponseError):
            return None
        code = str(getattr(exc, "error_code", "") or "")
        if exc.status_code == 412 or code in ("BlobAlreadyExists", "ConditionNotMet"):
            return condition_failed(self.url_for(key), expect)
        if exc.status_code == 404 and expect is not None and code == "BlobNotFound":
            return condition_failed(self.url_for(key), expect)  # If-Match on no blob
        return None

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        blob = self._get().get_blob_client(self._key(key))
        try:
            r = await blob.upload_blob(
                data, max_concurrency=self.put_concurrency, **self._condition(expect)
            )
        except self._ERRORS as exc:
            raise (self._refused(exc, key, expect) or self._map(exc, key)) from exc
        return str(r["etag"])

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        blob = self._get().get_blob_client(self._key(key))
        size = os.path.getsize(path)
        try:
            with open(path, "rb") as f:
                r = await blob.upload_blob(
                    f, length=size, max_concurrency=self.put_concurrency, **self._condition(expect)
                )
        except self._ERRORS as exc:
            raise (self._refused(exc, key, expect) or self._map(exc, key)) from exc
        return str(r["etag"])

    async def delete(self, key: str, expect: str | None) -> None:
        blob = self._get().get_blob_client(self._key(key))
        cond = self._condition(expect)
        cond.pop("overwrite")
        try:
            await blob.delete_blob(**cond)
        except self._ERRORS as exc:
            if isinstance(exc, HttpResponseError) and exc.status_code == 404:
                return  # already gone
            raise (self._refused(exc, key, expect) or self._map(exc, key)) from exc

    async def aclose(self) -> None:
        self._direct = None
        client, session, self._client, self._session = self._client, self._session, None, None
        if self._pid != os.getpid():
            return
        if client is not None:
            await client.close()
        if session is not None and not session.closed:
            await session.close()


def _shared_key(
    account: str, key: bytes, path: str, query: dict[str, str], headers: dict[str, str]
) -> str:
    """The ``Authorization`` value of a GET under the Blob service's SharedKey scheme: an
    HMAC-SHA256, with the account key, of the verb, the 11 standard headers (only ``If-Match``
    is ever set here; the range goes as ``x-ms-range``), the ``x-ms-*`` headers sorted, and
    ``/account`` + the encoded path + the query parameters sorted."""
    std = ["", "", "", "", "", "", "", headers.get("If-Match", ""), "", "", ""]
    xms = sorted((k.lower(), v) for k, v in headers.items() if k.lower().startswith("x-ms-"))
    text = "GET\n" + "".join(f"{v}\n" for v in std) + "".join(f"{k}:{v}\n" for k, v in xms)
    text += f"/{account}{path}" + "".join(f"\n{k.lower()}:{v}" for k, v in sorted(query.items()))
    mac = hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()
    return f"SharedKey {account}:{base64.b64encode(mac).decode()}"


class _Direct:
    """What a direct GET needs from a configured ``ContainerClient``: the container's URL, its
    query (a SAS token, sent as is), the API version, and the account key (None: anonymous or
    SAS, no signature)."""

    def __init__(self, base: str, query: str, version: str, account: str, key: bytes | None):
        self.base, self.query, self.version = base, query, version
        self.account, self.key = account, key
        self._params = dict(parse_qsl(query, keep_blank_values=True))

    @classmethod
    def of(cls, client: ContainerClient) -> _Direct | None:
        cred = client.credential
        name, secret = getattr(cred, "account_name", None), getattr(cred, "account_key", None)
        if cred is not None and not (isinstance(name, str) and isinstance(secret, str)):
            return None  # a token credential: the SDK's pipeline does the auth
        base, _, query = client.url.partition("?")
        if cred is not None and query:
            return None  # a key and a SAS at once: leave it to the SDK
        key = None if cred is None else base64.b64decode(secret)  # type: ignore[arg-type]
        account = name if isinstance(name, str) else (client.account_name or "")
        return cls(base, query, str(client.api_version), account, key)

    def url_of(self, blob: str, headers: dict[str, str]) -> yarl.URL:
        """The blob's URL (encoded as the SDK encodes names); signs ``headers`` in place."""
        url = f"{self.base}/{quote(blob, safe='~/')}" + (f"?{self.query}" if self.query else "")
        if self.key is not None:
            path = urlsplit(url).path
            headers["Authorization"] = _shared_key(
                self.account, self.key, path, self._params, headers
            )
        return yarl.URL(url, encoded=True)
