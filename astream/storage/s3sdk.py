"""S3 through aiobotocore: writes, and reads that :mod:`astream.storage.s3` cannot sign itself.

Theory of operation
-------------------
:class:`~astream.storage.s3.S3Backend` sends GET, HEAD and list requests itself when its
credentials are static (see that module); everything else -- uploads, multipart uploads, and
every request of a store whose credentials come from a profile, SSO, a web identity, the
instance metadata service or anything else the standard AWS credential chain resolves --
goes through :class:`SdkS3`, imported only then, so a job that only reads with static keys
never imports the SDK.

The aiobotocore client is created lazily in the running loop on first use (never at
construction) and again in a forked child. botocore's parsed S3 models are loaded once per
process (in a thread), inherited by forked children, and kept between processes in the user's
cache directory (``$XDG_CACHE_HOME/astream-sdk/``, default ``~/.cache/astream-sdk/``, one file
per botocore and Python version; see :func:`_load_models`). The SDK's own retries are off
(``total_max_attempts=1``): astream retries in one place, :mod:`astream.storage.retry`.

Errors: ``NoSuchKey``/404 -> not found, 403 -> access denied, ``InvalidRange``/416 -> an empty
read (range past the end), ``SlowDown``/429/503 -> throttled, other 5xx, connection failures and
a streamed body shorter than its Content-Length (``IncompleteReadError``) -> transient.
``put_file`` above ``multipart_threshold`` uploads ``part_size`` parts concurrently and aborts
the upload on failure so no orphan parts are left.

Conditional writes: ``put_if``/``put_file_if`` send ``If-None-Match: *`` (create only) or
``If-Match: <ETag>`` on the PUT, or on the ``CompleteMultipartUpload`` of a large file; 412
``PreconditionFailed`` (and a 404 for ``If-Match`` on an absent key) is
:func:`~astream.storage.common.condition_failed`; 409 ``ConditionalRequestConflict`` (another
conditional write of the key in flight) is transient, as S3 asks. ``delete`` with ``expect``
sends ``If-Match`` (S3 general purpose buckets take it); a server that answers 501 to it is
sent a plain delete.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiobotocore.session
import aiohttp
import botocore.exceptions
import msgspec
from aiobotocore.config import AioConfig
from aiobotocore.response import AioStreamingBody
from botocore import UNSIGNED

from astream.errors import StorageError, TransientStorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    CHUNK_SIZE,
    POOL_SIZE,
    changed_error,
    condition_failed,
    keep_inherited,
    range_header,
    total_size,
)
from astream.storage.s3common import S3Settings, s3_error

__all__ = ["SdkS3"]

_PLAIN_BODY = AioStreamingBody  # the aiohttp body with no checksum (see _plain_content)


_loader: Any = None
_MODELS_FORMAT = 2  # of the models file below; part of its name


def _models_file() -> str | None:
    """Where this process keeps botocore's parsed S3 models (see :func:`_load_models`), or None
    when botocore would read models from a directory besides its own (``~/.aws/models``,
    ``AWS_DATA_PATH``): those may change without botocore's version changing."""
    import botocore
    import botocore.loaders

    loader = botocore.loaders.create_loader()
    if any(p != loader.BUILTIN_DATA_PATH and os.path.isdir(p) for p in loader.search_paths):
        return None
    # the user's cache, not astream's cache root ($ASTREAM_CACHE_DIR): that holds datasets only
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    v = sys.version_info
    name = f"botocore-{botocore.__version__}-s3-py{v[0]}{v[1]}-{_MODELS_FORMAT}.json"
    return os.path.join(os.path.abspath(base), "astream-sdk", name)


def _load_models() -> Any:
    """botocore's data loader with its S3 entries filled by building one client (no request,
    no credential lookup). botocore parses its JSON models with ``json`` into ordered dicts on
    every start (~0.1 s of CPU); the parsed entries are kept in the user's cache directory, in
    a file named by the botocore and Python versions, and read back with msgspec (data only:
    nothing in the file is executed) in ~0.02 s. Any problem with that file (absent, damaged,
    unwritable directory) falls back to botocore's own loading."""
    import botocore.loaders
    import botocore.session

    path = _models_file()
    loader = botocore.loaders.create_loader()
    cache = getattr(loader, "_cache", None)
    got = _read_models(path) if path is not None and isinstance(cache, dict) else None
    if got is not None and isinstance(cache, dict):
        cache.update(got)
    warm = botocore.session.get_session()
    warm.register_component("data_loader", loader)
    warm.create_client(
        "s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    if path is not None and isinstance(cache, dict) and got is None:
        _save_models(path, cache)
    return loader


def _read_models(path: str) -> dict[Any, Any] | None:
    """The loader entries in the models file (rows written by :func:`_save_models`)."""
    try:
        with open(path, "rb") as f:
            rows = msgspec.json.decode(f.read())
        out: dict[Any, Any] = {}
        values: list[Any] = []
        for key, how, v in rows:
            if how == "tuple":
                v = tuple(v)
            elif how == "same":  # the first item of an earlier tuple entry, the same object
                v = values[v][0]
            values.append(v)
            out[tuple(key)] = v
        return out
    except (OSError, msgspec.MsgspecError, ValueError, TypeError, IndexError, KeyError):
        return None


def _save_models(path: str, cache: dict[Any, Any]) -> None:
    """Rows ``[key, how, value]``: ``how`` is "tuple" (a (data, path) entry), "same" (the data
    of the earlier tuple entry at row ``value``: botocore serves one object under both keys, and
    so does the file, which halves what is decoded) or "value"."""
    tmp = f"{path}.{os.getpid()}"
    try:
        rows: list[list[Any]] = []
        firsts: dict[int, int] = {}  # id of a tuple entry's data -> its row
        for key, v in cache.items():
            if isinstance(v, tuple):
                if v and isinstance(v[0], dict):
                    firsts[id(v[0])] = len(rows)
                rows.append([list(key), "tuple", list(v)])
            elif id(v) in firsts:
                rows.append([list(key), "same", firsts[id(v)]])
            else:
                rows.append([list(key), "value", v])
        data = msgspec.json.encode(rows)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except (OSError, TypeError, msgspec.MsgspecError):  # something msgspec does not take
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _new_session(loader: Any) -> Any:
    session = aiobotocore.session.get_session()
    session.register_component("data_loader", loader)
    return session


async def _warm_loader() -> Any:
    """botocore's data loader with the S3 models parsed, shared by this process's clients and
    inherited by its forked children (DataLoader workers): it is a cache of parsed JSON models,
    plain data with no socket, lock or thread, so a child reuses it instead of parsing the
    models again (0.15-0.3 s per worker before its first request)."""
    global _loader
    if _loader is None:
        _loader = await asyncio.to_thread(_load_models)
    return _loader


class SdkS3:
    """Every S3 operation through one aiobotocore client (see the module's docstring)."""

    def __init__(self, settings: S3Settings) -> None:
        self._s = settings
        self._client: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._pid = 0
        self._lock: asyncio.Lock | None = None

    @property
    def url(self) -> str:
        return self._s.url

    def url_for(self, key: str) -> str:
        return self._s.url_for(key)

    def _key(self, key: str) -> str:
        return self._s.key(key)

    async def _get_client(self) -> Any:
        pid = os.getpid()
        if self._client is not None and self._pid == pid:
            return self._client
        if self._pid != pid or self._lock is None:
            # first use, or a forked child (drop the parent's client untouched). The pid is
            # taken now, not once the client exists: concurrent first calls (a split listing,
            # concurrent HEADs) then share this lock and one client instead of each resetting
            # the lock and making its own (and leaking all but the last)
            if self._pid != pid:
                keep_inherited(self._client, self._stack)  # the parent's: never finalised here
            self._client, self._stack, self._lock, self._pid = None, None, asyncio.Lock(), pid
        async with self._lock:
            if self._client is None:
                config = AioConfig(
                    max_pool_connections=POOL_SIZE,
                    retries={"total_max_attempts": 1, "mode": "standard"},
                    s3={"addressing_style": "path" if self._s.path_style else "auto"},
                    signature_version=UNSIGNED if self._s.unsigned else None,
                    connect_timeout=30,
                    read_timeout=60,
                )
                stack = contextlib.AsyncExitStack()
                # a session reads config files and botocore parses its JSON models (~0.3 s
                # in all): both in a thread, so that no event loop is held by them
                session = await asyncio.to_thread(_new_session, await _warm_loader())
                self._client = await stack.enter_async_context(
                    session.create_client(
                        "s3",
                        endpoint_url=self._s.endpoint_url,
                        region_name=self._s.region or "us-east-1",
                        config=config,
                        aws_access_key_id=self._s.access_key_id,
                        aws_secret_access_key=self._s.secret_access_key,
                    )
                )
                _add_env_headers(self._client, self._s)
                self._stack = stack
                self._pid = os.getpid()
        return self._client

    def _map(self, exc: Exception, key: str) -> StorageError:
        url = self.url_for(key)
        if isinstance(exc, botocore.exceptions.ClientError):
            err = exc.response.get("Error", {})
            code = str(err.get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            return s3_error(status, code, url)
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return StorageError(f"no AWS credentials found ({exc})", url, retryable=False)
        return TransientStorageError(f"connection failed ({type(exc).__name__}: {exc})", url)

    _TRANSIENT: tuple[type[Exception], ...] = (
        botocore.exceptions.ClientError,
        botocore.exceptions.BotoCoreError,
        OSError,
        aiohttp.ClientError,
        asyncio.TimeoutError,
    )

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        client = await self._get_client()
        kwargs: dict[str, Any] = {"Bucket": self._s.bucket, "Key": self._key(key)}
        rng = range_header(start, end)
        if rng:
            kwargs["Range"] = rng
        if etag is not None:
            kwargs["IfMatch"] = etag
        try:
            resp = await client.get_object(**kwargs)
        except botocore.exceptions.ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code == "InvalidRange":
                return
            if etag is not None and (code in ("PreconditionFailed", "412")):
                raise changed_error(self.url_for(key), etag) from exc
            raise self._map(exc, key) from exc
        except self._TRANSIENT as exc:
            raise self._map(exc, key) from exc
        body = resp["Body"]
        if seen is not None and resp.get("ETag"):
            seen.append(resp["ETag"])
        try:
            content = _plain_content(body)
            if content is None:  # a checksummed body (or not aiohttp): the SDK reads it
                while True:
                    try:
                        chunk = await body.read(CHUNK_SIZE)
                    except self._TRANSIENT as exc:
                        raise self._map(exc, key) from exc
                    if not chunk:
                        return
                    yield chunk
            want = resp.get("ContentLength")
            got = 0
            while True:
                try:
                    chunk, chunk_end = await content.readchunk()
                except self._TRANSIENT as exc:
                    raise self._map(exc, key) from exc
                if not chunk:
                    if chunk_end:  # the end of an HTTP chunk (chunked encoding), not of the body
                        continue
                    break
                got += len(chunk)
                yield chunk
            if want is not None and got != int(want):
                raise TransientStorageError(
                    f"body ended after {got} of {want} bytes", self.url_for(key)
                )
        finally:
            body.close()

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` and its identity, in one suffix-range GET (no HEAD)."""
        client = await self._get_client()
        try:
            resp = await client.get_object(
                Bucket=self._s.bucket, Key=self._key(key), Range=f"bytes=-{n}"
            )
            body = resp["Body"]
            try:
                data: bytes = await body.read()
            finally:
                body.close()
        except botocore.exceptions.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "InvalidRange":
                return ObjectInfo(key, 0, None), b""  # an empty object
            raise self._map(exc, key) from exc
        except self._TRANSIENT as exc:
            raise self._map(exc, key) from exc
        size = total_size(resp.get("ContentRange"), len(data))
        return ObjectInfo(key, size, resp.get("ETag")), data

    async def head(self, key: str) -> ObjectInfo:
        client = await self._get_client()
        try:
            r = await client.head_object(Bucket=self._s.bucket, Key=self._key(key))
        except self._TRANSIENT as exc:
            raise self._map(exc, key) from exc
        return ObjectInfo(key, int(r["ContentLength"]), r.get("ETag"))

    async def list_page_after(
        self, prefix: str, after: str | None, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        """A page of the keys under ``prefix`` that sort after the key ``after``
        (``StartAfter``): a listing split into key ranges runs them concurrently."""
        client = await self._get_client()
        full = self._key(prefix) if prefix else (self._s.prefix + "/" if self._s.prefix else "")
        kwargs: dict[str, Any] = {
            "Bucket": self._s.bucket,
            "Prefix": full,
            "MaxKeys": self._s.list_page_size,
        }
        if token:
            kwargs["ContinuationToken"] = token
        elif after is not None:
            kwargs["StartAfter"] = self._key(after)
        try:
            r = await client.list_objects_v2(**kwargs)
        except self._TRANSIENT as exc:
            raise self._map(exc, prefix) from exc
        cut = len(self._s.prefix) + 1 if self._s.prefix else 0
        items = [
            ObjectInfo(o["Key"][cut:], int(o["Size"]), o.get("ETag")) for o in r.get("Contents", [])
        ]
        return items, (r.get("NextContinuationToken") if r.get("IsTruncated") else None)

    async def put(self, key: str, data: bytes) -> None:
        client = await self._get_client()
        try:
            await client.put_object(Bucket=self._s.bucket, Key=self._key(key), Body=data)
        except self._TRANSIENT as exc:
            raise self._map(exc, key) from exc

    async def put_file(self, key: str, path: str) -> None:
        size = os.path.getsize(path)
        if size <= self._s.multipart_threshold:
            with open(path, "rb") as f:
                data = f.read()
            await self.put(key, data)
            return
        await self._multipart(key, path, size, {})

    @staticmethod
    def _condition(expect: str | None) -> dict[str, str]:
        return {"IfNoneMatch": "*"} if expect is None else {"IfMatch": expect}

    def _map_conditional(self, exc: Exception, key: str, expect: str | None) -> StorageError:
        """A conditional request's failure: a refused condition, else as :meth:`_map`."""
        if isinstance(exc, botocore.exceptions.ClientError):
            code = str(exc.response.get("Error", {}).get("Code", ""))
            meta = exc.response.get("ResponseMetadata", {})
            status = int(meta.get("HTTPStatusCode", 0) or 0)
            if code in ("PreconditionFailed", "412") or status == 412:
                return condition_failed(self.url_for(key), expect)
            if expect is not None and (code in ("NoSuchKey", "404") or status == 404):
                return condition_failed(self.url_for(key), expect)  # If-Match on no object
            if code == "ConditionalRequestConflict" or status == 409:
                return TransientStorageError(
                    f"server error (HTTP 409 {code}: a concurrent conditional write)",
                    self.url_for(key),
                )
        return self._map(exc, key)

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        client = await self._get_client()
        try:
            r = await client.put_object(
                Bucket=self._s.bucket, Key=self._key(key), Body=data, **self._condition(expect)
            )
        except self._TRANSIENT as exc:
            raise self._map_conditional(exc, key, expect) from exc
        return str(r["ETag"])

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        size = os.path.getsize(path)
        if size <= self._s.multipart_threshold:
            with open(path, "rb") as f:
                data = f.read()
            return await self.put_if(key, data, expect)
        return await self._multipart(key, path, size, self._condition(expect), expect)

    async def delete(self, key: str, expect: str | None) -> None:
        client = await self._get_client()
        kwargs: dict[str, Any] = {"Bucket": self._s.bucket, "Key": self._key(key)}
        if expect is not None:
            kwargs["IfMatch"] = expect
        try:
            await client.delete_object(**kwargs)
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
            if code in ("NoSuchKey", "404") or status == 404:
                return  # already gone
            if expect is not None and (code == "NotImplemented" or status == 501):
                await self.delete(key, None)  # a server without conditional deletes
                return
            raise self._map_conditional(exc, key, expect) from exc
        except self._TRANSIENT as exc:
            raise self._map(exc, key) from exc

    async def _multipart(
        self,
        key: str,
        path: str,
        size: int,
        condition: dict[str, str],
        expect: str | None = None,
    ) -> str:
        client = await self._get_client()
        full = self._key(key)
        try:
            up = await client.create_multipart_upload(Bucket=self._s.bucket, Key=full)
        except self._TRANSIENT as exc:
            raise self._map(exc, key) from exc
        upload_id = up["UploadId"]
        sem = asyncio.Semaphore(self._s.part_concurrency)

        async def part(n: int, offset: int) -> dict[str, Any]:
            async with sem:
                data = await asyncio.to_thread(_read_at, path, offset, self._s.part_size)
                r = await client.upload_part(
                    Bucket=self._s.bucket, Key=full, UploadId=upload_id, PartNumber=n, Body=data
                )
                return {"PartNumber": n, "ETag": r["ETag"]}

        try:
            parts = await asyncio.gather(
                *(part(i + 1, off) for i, off in enumerate(range(0, size, self._s.part_size)))
            )
            done = await client.complete_multipart_upload(
                Bucket=self._s.bucket,
                Key=full,
                UploadId=upload_id,
                MultipartUpload={"Parts": parts},
                **condition,
            )
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await client.abort_multipart_upload(
                    Bucket=self._s.bucket, Key=full, UploadId=upload_id
                )
            if isinstance(exc, self._TRANSIENT):
                if condition:
                    raise self._map_conditional(exc, key, expect) from exc
                raise self._map(exc, key) from exc
            raise
        return str(done.get("ETag", ""))

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None and self._pid == os.getpid():
            await stack.aclose()


_UPLOADS = ("PutObject", "CreateMultipartUpload", "CopyObject")


def _add_env_headers(client: Any, settings: S3Settings) -> None:
    """Headers the environment asks for, added to every request before it is signed:
    ``x-amz-request-payer`` for a requester-pays bucket, ``x-amz-acl`` (``S3_CANNED_ACL``) on
    the requests that create an object."""
    events = client.meta.events
    if settings.requester_pays:

        def payer(request: Any, **_: Any) -> None:
            request.headers["x-amz-request-payer"] = "requester"

        events.register("before-sign.s3", payer)
    acl = settings.canned_acl
    if acl:

        def canned(request: Any, **_: Any) -> None:
            request.headers["x-amz-acl"] = acl

        for op in _UPLOADS:
            events.register(f"before-sign.s3.{op}", canned)


def _plain_content(body: Any) -> Any:
    """The aiohttp stream under an SDK body that does nothing per byte, or None.

    ``body.read(n)`` joins whatever the socket delivered into one ``n``-byte string: a copy of
    every byte, into a fresh allocation (page faults) at 1 MiB. ``readchunk`` hands over the
    socket's own chunks (<= 256 KiB) as they came, and the caller writes them where they go.
    A body that validates a checksum while it is read (a whole-object GET of an object stored
    with one) is a subclass: that one keeps the SDK's reads, so the check is never skipped."""
    if type(body) is not _PLAIN_BODY:
        return None
    content = getattr(body.raw_stream, "content", None)
    return content if hasattr(content, "readchunk") else None


def _read_at(path: str, offset: int, n: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read(n)
