"""``dbfs:/Volumes/<catalog>/<schema>/<volume>/...`` and ``dbfs:/...`` stores on Databricks.

Theory of operation
-------------------
A Unity Catalog volume (a path under ``/Volumes``) is read and written through the Databricks
Files API: ``GET /api/2.0/fs/files{path}`` with ``Range`` for ranged reads, ``HEAD`` for the size
and ``Last-Modified``, ``GET /api/2.0/fs/directories{path}`` (one directory's entries, page by
page with ``page_token``) for listings, ``PUT /api/2.0/fs/files{path}?overwrite=`` for uploads
and ``DELETE`` for deletes. Every other ``dbfs:/`` path goes through the DBFS API 2.0:
``get-status``, ``list``, ``read`` (base64, at most :data:`DBFS_READ_MAX` bytes per call, so a
range is several calls), ``put`` for a small upload and ``create`` + ``add-block`` + ``close``
for a larger one. The path goes in the Files API's URL (each character outside the unreserved
set percent-encoded) and in the DBFS API's query string or JSON body.

Reads (GET, HEAD) go out on astream's own HTTP/1.1 pool (:mod:`astream.storage.h1`); uploads,
which send a body, on an aiohttp session made at first use (and again in a forked child). No
Databricks SDK is needed.

Credentials: the ``host`` and ``token`` options, else ``DATABRICKS_HOST`` and
``DATABRICKS_TOKEN``, else the profile ``DATABRICKS_CONFIG_PROFILE`` (default ``DEFAULT``) of
``DATABRICKS_CONFIG_FILE`` (default ``~/.databrickscfg``). The token goes as ``Authorization:
Bearer``, never into a URL or a message.

Identity: the Files API names an object's version only by its modification time
(``Last-Modified``, whole seconds; a listing's ``last_modified`` in milliseconds is rounded
down to the same text), DBFS by ``modification_time``. A read conditioned on that identity
compares it with the answer's (Files API) or asks ``get-status`` first (DBFS); two writes within
one second are not told apart. Neither API has a conditional overwrite: ``put_if`` creates only
while absent (``overwrite=false``) and refuses ``expect=<version>``; ``delete`` refuses
``expect``. Listings walk the directories under the prefix and return the keys sorted, in one
page.

Errors: the JSON ``error_code`` decides -- ``NOT_FOUND``/``RESOURCE_DOES_NOT_EXIST`` not found,
``PERMISSION_DENIED``/``UNAUTHENTICATED`` (and 401/403) access denied,
``REQUEST_LIMIT_EXCEEDED``/429 throttled, 5xx transient, anything else a non-retryable error.
"""

from __future__ import annotations

import base64
import configparser
import json
import os
from collections.abc import AsyncIterator
from email.utils import formatdate
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from astream.errors import ConfigError, ObjectNotFoundError, StorageError, TransientStorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    POOL_SIZE,
    changed_error,
    check_content_range,
    condition_failed,
    error_for_status,
    join_key,
    keep_inherited,
    range_header,
)
from astream.storage.h1 import Pool, Response

__all__ = ["DBFS_BLOCK", "DBFS_READ_MAX", "DbfsBackend", "FilesBackend", "open_dbfs"]

DBFS_READ_MAX = 1 << 20
"""Bytes one DBFS ``read`` call may return (the API refuses a larger ``length``)."""
DBFS_BLOCK = 768 << 10
"""Bytes per DBFS ``put``/``add-block``: 1 MiB once base64-encoded, the API's block limit."""

_NOT_FOUND = frozenset({"NOT_FOUND", "RESOURCE_DOES_NOT_EXIST"})
_DENIED = frozenset({"PERMISSION_DENIED", "UNAUTHENTICATED"})
_THROTTLED = frozenset({"REQUEST_LIMIT_EXCEEDED", "TOO_MANY_REQUESTS"})
_EXISTS = frozenset({"ALREADY_EXISTS", "RESOURCE_ALREADY_EXISTS"})


def open_dbfs(url: str, **options: Any) -> FilesBackend | DbfsBackend:
    """The backend for a ``dbfs:`` URL: the Files API under ``/Volumes``, DBFS elsewhere."""
    path = dbfs_path(url)
    cls = FilesBackend if path == "/Volumes" or path.startswith("/Volumes/") else DbfsBackend
    return cls(url, **options)


def dbfs_path(url: str) -> str:
    """``dbfs:/a/b`` or ``dbfs:///a/b`` -> ``/a/b`` (no trailing slash; ``/`` for the root)."""
    if not url.lower().startswith("dbfs:"):
        raise ConfigError(f"url {url!r}: not a dbfs: URL")
    rest = url[len("dbfs:") :]
    if rest.startswith("//") and not rest.startswith("///"):
        raise ConfigError(
            f"url {url!r}: a dbfs URL is dbfs:/path or dbfs:///path (an absolute path), "
            "not dbfs://host/path"
        )
    path = "/" + rest.lstrip("/")
    return path.rstrip("/") or "/"


def workspace_auth(host: str | None, token: str | None) -> tuple[str, str]:
    """The workspace URL (``https://...``, no trailing slash) and token, from the options, the
    environment, then the config file's profile (see the module's docstring)."""
    host = host or os.environ.get("DATABRICKS_HOST")
    token = token or os.environ.get("DATABRICKS_TOKEN")
    if not host or not token:
        path = os.environ.get("DATABRICKS_CONFIG_FILE") or os.path.expanduser("~/.databrickscfg")
        profile = os.environ.get("DATABRICKS_CONFIG_PROFILE") or "DEFAULT"
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read(path)
        except configparser.Error as exc:
            raise ConfigError(f"{path}: unreadable Databricks config ({exc})") from exc
        section = cfg.defaults() if profile == "DEFAULT" else dict(cfg.items(profile, raw=True))
        if profile != "DEFAULT" and not cfg.has_section(profile):
            section = {}
        host = host or section.get("host")
        token = token or section.get("token")
    if not host or not token:
        missing = " and ".join(n for n, v in (("host", host), ("token", token)) if not v)
        raise ConfigError(
            f"no Databricks {missing}: set DATABRICKS_HOST and DATABRICKS_TOKEN, write them "
            "in ~/.databrickscfg ([DEFAULT] host=..., token=...), or pass host=/token="
        )
    if "://" not in host:
        host = f"https://{host}"
    parts = urlsplit(host)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"Databricks host {host!r}: not an http(s) URL")
    return f"{parts.scheme}://{parts.netloc}", token


def _error(status: int, body: bytes, url: str) -> StorageError:
    """The astream error for a Databricks error answer (its status and JSON ``error_code``)."""
    code, message = "", ""
    try:
        doc = json.loads(body or b"{}")
        if isinstance(doc, dict):
            code, message = str(doc.get("error_code") or ""), str(doc.get("message") or "")
    except ValueError:
        pass
    if code in _NOT_FOUND:
        status = 404
    elif code in _DENIED and status not in (401, 403):
        status = 403
    elif code in _THROTTLED:
        status = 429
    detail = code + (f": {message}" if message else "")
    return error_for_status(status, url, detail[:300])


class _Workspace:
    """What both APIs share: the root path, the HTTP clients, the auth header, errors."""

    def __init__(
        self,
        url: str,
        *,
        host: str | None = None,
        token: str | None = None,
        list_page_size: int = 1000,
    ) -> None:
        stripped = url.rstrip("/")
        self._url = stripped if stripped.lower() != "dbfs:" else "dbfs:/"
        self._root = dbfs_path(url).lstrip("/")  # relative: "" for the root
        if not isinstance(list_page_size, int) or list_page_size < 1:
            raise ConfigError(f"list_page_size must be a positive int, got {list_page_size!r}")
        self.list_page_size = list_page_size
        base, secret = workspace_auth(host, token)
        parts = urlsplit(base)
        self._scheme, self._netloc, self._base = parts.scheme, parts.netloc, base
        self._auth = {"Authorization": f"Bearer {secret}"}
        self._pool = Pool(POOL_SIZE)
        self._session: Any = None
        self._pid = 0

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        return f"dbfs:{self._path(key)}"

    def _path(self, key: str) -> str:
        """The absolute workspace path of ``key``."""
        return "/" + join_key(self._root, key) if (self._root or key) else "/"

    def _key_of(self, path: str) -> str:
        """The key of an absolute path under the root."""
        cut = len(self._root) + 2 if self._root else 1
        return path[cut:]

    async def _send(
        self, method: str, target: str, where: str, headers: dict[str, str] | None = None
    ) -> Response:
        """``method`` (GET/HEAD) on ``target`` (encoded path and query), on the h1 pool."""
        sent = {**self._auth, **(headers or {})}
        return await self._pool.request(method, (self._scheme, self._netloc, target), sent, where)

    async def _get_json(self, target: str, where: str) -> dict[str, Any]:
        resp = await self._send("GET", target, where)
        try:
            body = await resp.read()
        finally:
            resp.release()
        if resp.status >= 300:
            raise _error(resp.status, body, where)
        return _json_doc(body, where)

    def _http(self) -> Any:
        """The aiohttp session that sends bodies (made here, in this process, at first use)."""
        if self._session is not None and self._pid == os.getpid():
            return self._session
        import aiohttp

        if self._pid != os.getpid():
            keep_inherited(self._session)  # the parent's
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=POOL_SIZE), auto_decompress=False
        )
        self._pid = os.getpid()
        return self._session

    async def _upload(
        self, method: str, target: str, where: str, data: Any, headers: dict[str, str]
    ) -> tuple[int, bytes]:
        """One request with a body on the aiohttp session: (status, body)."""
        import aiohttp

        try:
            async with self._http().request(
                method, f"{self._base}{target}", data=data, headers={**self._auth, **headers}
            ) as resp:
                return resp.status, await resp.read()
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise TransientStorageError(
                f"connection failed ({type(exc).__name__}: {exc})", where
            ) from exc

    async def _post(self, api: str, body: dict[str, Any], where: str) -> dict[str, Any]:
        status, raw = await self._upload(
            "POST", api, where, json.dumps(body), {"Content-Type": "application/json"}
        )
        if status >= 300:
            raise _error(status, raw, where)
        return _json_doc(raw, where)

    async def aclose(self) -> None:
        await self._pool.aclose()
        session, self._session = self._session, None
        if session is not None and self._pid == os.getpid() and not session.closed:
            await session.close()


def _json_doc(body: bytes, where: str) -> dict[str, Any]:
    try:
        doc = json.loads(body or b"{}")
    except ValueError as exc:
        raise StorageError(f"unreadable JSON answer ({exc})", where, retryable=False) from exc
    if not isinstance(doc, dict):
        raise StorageError("JSON answer is not an object", where, retryable=False)
    return doc


def _refuse_expect(what: str, url: str) -> StorageError:
    return StorageError(
        f"{what} conditioned on a version (expect=) is not supported: the Databricks APIs have "
        "no conditional overwrite or delete",
        url,
        retryable=False,
    )


class FilesBackend(_Workspace):
    """A Unity Catalog volume through the Files API (see the module's docstring)."""

    def _files(self, key: str) -> str:
        return "/api/2.0/fs/files" + quote(self._path(key), safe="/")

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        if end is not None and end <= start:
            return
        url = self.url_for(key)
        rng = range_header(start, end)
        resp = await self._send("GET", self._files(key), url, {"Range": rng} if rng else None)
        try:
            if resp.status == 416:
                return
            if resp.status >= 300:
                raise _error(resp.status, await resp.read(1 << 16), url)
            if rng is not None and resp.status == 200:
                whole = resp.content_length
                if not (start == 0 and whole is not None and end is not None and whole <= end):
                    raise StorageError(
                        f"server ignored the Range header ({rng}) and sent the whole object",
                        url,
                        retryable=False,
                    )
            if resp.status == 206 and rng is not None:
                check_content_range(resp.headers.get("Content-Range"), rng, start, end, url)
            got = resp.headers.get("Last-Modified")
            if etag is not None and got != etag:
                raise changed_error(url, etag)
            if seen is not None and got:
                seen.append(got)
            async for chunk in resp.chunks():
                yield chunk
        finally:
            resp.release()

    async def head(self, key: str) -> ObjectInfo:
        url = self.url_for(key)
        resp = await self._send("HEAD", self._files(key), url)
        resp.release()
        if resp.status >= 300:
            raise _error(resp.status, b"", url)
        size = resp.content_length
        if size is None:
            raise StorageError("HEAD response has no Content-Length", url)
        return ObjectInfo(key, size, resp.headers.get("Last-Modified"))

    async def _entries(self, dirkey: str) -> list[dict[str, Any]]:
        """Every entry of one directory (``dirkey`` relative to the root), page by page; a
        directory that does not exist has none."""
        out: list[dict[str, Any]] = []
        token: str | None = None
        base = "/api/2.0/fs/directories" + quote(self._path(dirkey), safe="/")
        while True:
            query = {"page_size": str(self.list_page_size)}
            if token:
                query["page_token"] = token
            try:
                doc = await self._get_json(f"{base}?{urlencode(query)}", self.url_for(dirkey))
            except ObjectNotFoundError:
                return out
            out.extend(e for e in doc.get("contents") or [] if isinstance(e, dict))
            token = doc.get("next_page_token") or None
            if token is None:
                return out

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        found: list[ObjectInfo] = []
        pending = [prefix.rpartition("/")[0]]
        while pending:
            for e in await self._entries(pending.pop()):
                key = self._key_of(str(e.get("path") or "").rstrip("/"))
                if e.get("is_directory"):
                    if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                        pending.append(key)
                elif key.startswith(prefix):
                    found.append(ObjectInfo(key, int(e.get("file_size") or 0), _http_date(e)))
        return sorted(found, key=lambda o: o.key), None

    async def _put(self, key: str, data: Any, overwrite: bool) -> None:
        url = self.url_for(key)
        target = f"{self._files(key)}?overwrite={'true' if overwrite else 'false'}"
        headers = {"Content-Type": "application/octet-stream"}
        status, body = await self._upload("PUT", target, url, data, headers)
        if status >= 300:
            err = _error(status, body, url)
            if not overwrite and (status == 409 or _code(body) in _EXISTS):
                raise condition_failed(url, None) from err
            raise err

    async def put(self, key: str, data: bytes) -> None:
        await self._put(key, data, True)

    async def put_file(self, key: str, path: str) -> None:
        with open(path, "rb") as f:
            await self._put(key, f, True)

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        if expect is not None:
            raise _refuse_expect("put_if", self.url_for(key))
        await self._put(key, data, False)
        return (await self.head(key)).etag or ""

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        if expect is not None:
            raise _refuse_expect("put_file_if", self.url_for(key))
        with open(path, "rb") as f:
            await self._put(key, f, False)
        return (await self.head(key)).etag or ""

    async def delete(self, key: str, expect: str | None) -> None:
        url = self.url_for(key)
        if expect is not None:
            raise _refuse_expect("delete", url)
        status, body = await self._upload("DELETE", self._files(key), url, None, {})
        if status >= 300 and status != 404 and _code(body) not in _NOT_FOUND:
            raise _error(status, body, url)


def _code(body: bytes) -> str:
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        return ""
    return str(doc.get("error_code") or "") if isinstance(doc, dict) else ""


def _http_date(entry: dict[str, Any]) -> str | None:
    """A listing's ``last_modified`` (ms) as the ``Last-Modified`` text a read answers with."""
    ms = entry.get("last_modified")
    return formatdate(int(ms) // 1000, usegmt=True) if isinstance(ms, int) else None


class DbfsBackend(_Workspace):
    """A DBFS path through the DBFS API 2.0 (see the module's docstring)."""

    def _q(self, api: str, **query: Any) -> str:
        return f"/api/2.0/dbfs/{api}?{urlencode(query, quote_via=quote)}"

    async def _status(self, key: str) -> dict[str, Any]:
        url = self.url_for(key)
        doc = await self._get_json(self._q("get-status", path=self._path(key)), url)
        if doc.get("is_dir"):
            raise ObjectNotFoundError("not found (a directory, not a file)", url)
        return doc

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        url = self.url_for(key)
        if etag is not None:  # DBFS's read answers name no version: ask first
            now = str((await self._status(key)).get("modification_time"))
            if now != etag:
                raise changed_error(url, etag)
        offset = start
        while end is None or offset < end:
            n = DBFS_READ_MAX if end is None else min(DBFS_READ_MAX, end - offset)
            q = self._q("read", path=self._path(key), offset=offset, length=n)
            doc = await self._get_json(q, url)
            data = base64.b64decode(doc.get("data") or "")
            if len(data) != int(doc.get("bytes_read", len(data))) or len(data) > n:
                raise StorageError(
                    f"read answer holds {len(data)} bytes, announced {doc.get('bytes_read')}",
                    url,
                    retryable=True,
                )
            if data:
                yield data
            offset += len(data)
            if len(data) < n:
                return

    async def head(self, key: str) -> ObjectInfo:
        return _info(key, await self._status(key))

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        found: list[ObjectInfo] = []
        pending = [prefix.rpartition("/")[0]]
        while pending:
            dirkey = pending.pop()
            try:
                doc = await self._get_json(
                    self._q("list", path=self._path(dirkey)), self.url_for(dirkey)
                )
            except ObjectNotFoundError:
                continue
            for e in doc.get("files") or []:
                key = self._key_of(str(e.get("path") or "").rstrip("/"))
                if e.get("is_dir"):
                    if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                        pending.append(key)
                elif key.startswith(prefix):
                    found.append(_info(key, e))
        return sorted(found, key=lambda o: o.key), None

    async def _write(self, key: str, read: Any, size: int, overwrite: bool) -> None:
        """``put`` for one block, else ``create`` + ``add-block``s + ``close``."""
        url, path = self.url_for(key), self._path(key)
        try:
            if size <= DBFS_BLOCK:
                data = base64.b64encode(read(size)).decode()
                await self._post(
                    "/api/2.0/dbfs/put",
                    {"path": path, "contents": data, "overwrite": overwrite},
                    url,
                )
                return
            doc = await self._post(
                "/api/2.0/dbfs/create", {"path": path, "overwrite": overwrite}, url
            )
        except StorageError as exc:
            if not overwrite and "ALREADY_EXISTS" in str(exc):
                raise condition_failed(url, None) from exc
            raise
        handle = doc.get("handle")
        left = size
        while left > 0:
            block = read(min(DBFS_BLOCK, left))
            if not block:
                raise StorageError("the file shrank while it was uploaded", url)
            left -= len(block)
            body = {"handle": handle, "data": base64.b64encode(block).decode()}
            await self._post("/api/2.0/dbfs/add-block", body, url)
        await self._post("/api/2.0/dbfs/close", {"handle": handle}, url)

    async def put(self, key: str, data: bytes) -> None:
        await self._write(key, _reader(data), len(data), True)

    async def put_file(self, key: str, path: str) -> None:
        with open(path, "rb") as f:
            await self._write(key, f.read, os.fstat(f.fileno()).st_size, True)

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        if expect is not None:
            raise _refuse_expect("put_if", self.url_for(key))
        await self._write(key, _reader(data), len(data), False)
        return (await self.head(key)).etag or ""

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        if expect is not None:
            raise _refuse_expect("put_file_if", self.url_for(key))
        with open(path, "rb") as f:
            await self._write(key, f.read, os.fstat(f.fileno()).st_size, False)
        return (await self.head(key)).etag or ""

    async def delete(self, key: str, expect: str | None) -> None:
        url = self.url_for(key)
        if expect is not None:
            raise _refuse_expect("delete", url)
        try:
            await self._post(
                "/api/2.0/dbfs/delete", {"path": self._path(key), "recursive": False}, url
            )
        except ObjectNotFoundError:
            return


def _reader(data: bytes) -> Any:
    """A ``read(n)`` over ``data``, as a file's."""
    view, pos = memoryview(data), [0]

    def read(n: int) -> bytes:
        out = bytes(view[pos[0] : pos[0] + n])
        pos[0] += len(out)
        return out

    return read


def _info(key: str, doc: dict[str, Any]) -> ObjectInfo:
    mtime = doc.get("modification_time")
    return ObjectInfo(key, int(doc.get("file_size") or 0), None if mtime is None else str(mtime))
