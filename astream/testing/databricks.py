"""A Databricks workspace's file APIs on 127.0.0.1, in memory, for tests: no emulator exists.

Built from the published API reference of the Files API and the DBFS API 2.0. It answers:

- ``GET /api/2.0/fs/files{path}`` -- the bytes, ``Range: bytes=a-b`` / ``a-`` / ``-n`` honoured
  (206 + ``Content-Range``; 416 when the range starts at or past the end), ``Last-Modified``;
- ``HEAD /api/2.0/fs/files{path}`` -- ``Content-Length``, ``Last-Modified``;
- ``PUT /api/2.0/fs/files{path}?overwrite=true|false`` -- the body becomes the file (parents
  implied); ``overwrite=false`` on an existing file: 409 ``ALREADY_EXISTS``;
- ``DELETE /api/2.0/fs/files{path}``;
- ``GET /api/2.0/fs/directories{path}?page_size=&page_token=`` -- ``{"contents": [{"path",
  "name", "is_directory", "file_size", "last_modified"}], "next_page_token"}``, entries sorted
  by name, one directory level;
- ``GET /api/2.0/dbfs/get-status?path=``, ``GET /api/2.0/dbfs/list?path=`` (``{"files":
  [{"path", "is_dir", "file_size", "modification_time"}]}``), ``GET
  /api/2.0/dbfs/read?path=&offset=&length=`` (``{"bytes_read", "data"}`` base64; ``length``
  over 1 MiB: 400 ``MAX_READ_SIZE_EXCEEDED``);
- ``POST /api/2.0/dbfs/put`` (``{"path", "contents", "overwrite"}``), ``create``,
  ``add-block`` (a block over 1 MiB decoded: 400 ``MAX_BLOCK_SIZE_EXCEEDED``), ``close``,
  ``delete``.

Every request needs ``Authorization: Bearer <token>`` (else 401 ``UNAUTHENTICATED``); a path
under one of ``denied`` answers 403 ``PERMISSION_DENIED``. The Files API serves only paths
under ``/Volumes`` (else 400 ``INVALID_PARAMETER_VALUE``). Errors are JSON ``{"error_code",
"message"}``.

Limits: directories exist only as the parents of files (no ``mkdirs``, no empty directory);
no other API (workspace, clusters), no OAuth, no streaming handles' 10-minute idle timeout;
``Last-Modified`` has whole seconds, as the service's does.
"""

from __future__ import annotations

import base64
import itertools
import re
import time
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote

from aiohttp import web

from astream.testing.servers import AppServer, ThreadedApp

__all__ = ["DatabricksServer"]

_MB = 1 << 20
_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


def _err(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"error_code": code, "message": message}, status=status)


class DatabricksServer(AppServer):
    """``DatabricksServer(token="t").start()``; point stores at ``.url`` with that token."""

    name = "Databricks file API test server"

    def __init__(self, token: str = "test-token", *, denied: tuple[str, ...] = ()) -> None:
        self.token = token
        self.denied = denied
        self.files: dict[str, tuple[bytes, int]] = {}  # absolute path -> (bytes, mtime ms)
        self.requests: list[tuple[str, str]] = []  # (method, raw path) of every request
        self._handles: dict[int, tuple[str, bytearray]] = {}
        self._next = itertools.count(1)
        app = web.Application(middlewares=[self._guard], client_max_size=64 * _MB)
        r = app.router
        r.add_route("*", "/api/2.0/fs/files/{p:.*}", self._files)
        r.add_get("/api/2.0/fs/directories/{p:.*}", self._directories)
        r.add_get("/api/2.0/fs/directories", self._directories)
        r.add_get("/api/2.0/dbfs/get-status", self._status)
        r.add_get("/api/2.0/dbfs/list", self._list)
        r.add_get("/api/2.0/dbfs/read", self._read)
        for op in ("put", "create", "add-block", "close", "delete"):
            r.add_post(f"/api/2.0/dbfs/{op}", self._post)
        self._app = ThreadedApp(app)

    def store_options(self) -> dict[str, Any]:
        return {"host": self.url, "token": self.token}

    def env(self) -> dict[str, str]:
        return {"DATABRICKS_HOST": self.url, "DATABRICKS_TOKEN": self.token}

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.raw_path))
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            return _err(401, "UNAUTHENTICATED", "invalid access token")
        return await handler(request)  # type: ignore[no-any-return]

    def _refused(self, path: str) -> web.Response | None:
        if any(path == d or path.startswith(d.rstrip("/") + "/") for d in self.denied):
            return _err(403, "PERMISSION_DENIED", f"no access to {path}")
        return None

    def _put_file(self, path: str, data: bytes) -> None:
        self.files[path] = (bytes(data), int(time.time() * 1000))

    def _children(self, path: str) -> list[tuple[str, bool]]:
        """(name, is_directory) of each entry directly under directory ``path``, sorted."""
        base = path.rstrip("/") + "/"
        seen: dict[str, bool] = {}
        for p in self.files:
            if p.startswith(base):
                name, sep, _ = p[len(base) :].partition("/")
                seen[name] = seen.get(name, False) or bool(sep)
        return sorted(seen.items())

    # -- Files API ---------------------------------------------------------------------------

    async def _files(self, request: web.Request) -> web.StreamResponse:
        path = unquote(request.raw_path.split("?", 1)[0][len("/api/2.0/fs/files") :])
        if not path.startswith("/Volumes/"):
            return _err(400, "INVALID_PARAMETER_VALUE", "the path must be under /Volumes")
        refused = self._refused(path)
        if refused is not None:
            return refused
        if request.method == "PUT":
            overwrite = request.query.get("overwrite", "false") == "true"
            if path in self.files and not overwrite:
                return _err(409, "ALREADY_EXISTS", f"{path} already exists")
            self._put_file(path, await request.read())
            return web.Response(status=204)
        if request.method == "DELETE":
            if self.files.pop(path, None) is None:
                return _err(404, "NOT_FOUND", f"{path} does not exist")
            return web.Response(status=204)
        if request.method not in ("GET", "HEAD"):
            return _err(405, "INVALID_PARAMETER_VALUE", "method not allowed")
        if path not in self.files:
            return _err(404, "NOT_FOUND", f"{path} does not exist")
        data, mtime = self.files[path]
        headers = {"Last-Modified": formatdate(mtime // 1000, usegmt=True)}
        if request.method == "HEAD":
            headers["Content-Length"] = str(len(data))
            return web.Response(status=200, headers=headers)
        return _ranged(request.headers.get("Range"), data, headers)

    async def _directories(self, request: web.Request) -> web.StreamResponse:
        raw = request.raw_path.split("?", 1)[0][len("/api/2.0/fs/directories") :]
        path = unquote(raw).rstrip("/") or "/"
        refused = self._refused(path)
        if refused is not None:
            return refused
        entries = self._children(path)
        if not entries:
            return _err(404, "NOT_FOUND", f"directory {path} does not exist")
        size = int(request.query.get("page_size") or 1000)
        start = int(request.query.get("page_token") or 0)
        page = entries[start : start + size]
        contents = []
        for name, is_dir in page:
            full = f"{path.rstrip('/')}/{name}"
            entry: dict[str, Any] = {"path": full + ("/" if is_dir else ""), "name": name}
            entry["is_directory"] = is_dir
            if not is_dir:
                data, mtime = self.files[full]
                entry.update(file_size=len(data), last_modified=mtime)
            contents.append(entry)
        doc: dict[str, Any] = {"contents": contents}
        if start + size < len(entries):
            doc["next_page_token"] = str(start + size)
        return web.json_response(doc)

    # -- DBFS API 2.0 ------------------------------------------------------------------------

    def _info(self, path: str) -> dict[str, Any] | None:
        if path in self.files:
            data, mtime = self.files[path]
            return {
                "path": path,
                "is_dir": False,
                "file_size": len(data),
                "modification_time": mtime,
            }
        if path == "/" or self._children(path):
            return {"path": path, "is_dir": True, "file_size": 0, "modification_time": 0}
        return None

    async def _status(self, request: web.Request) -> web.StreamResponse:
        path = request.query.get("path", "")
        info = self._refused(path) or self._info(path)
        if info is None:
            return _err(
                404, "RESOURCE_DOES_NOT_EXIST", f"No file or directory exists on path {path}."
            )
        return info if isinstance(info, web.Response) else web.json_response(info)

    async def _list(self, request: web.Request) -> web.StreamResponse:
        path = request.query.get("path", "")
        refused = self._refused(path)
        if refused is not None:
            return refused
        info = self._info(path)
        if info is None:
            return _err(
                404, "RESOURCE_DOES_NOT_EXIST", f"No file or directory exists on path {path}."
            )
        if not info["is_dir"]:
            return web.json_response({"files": [info]})
        base = path.rstrip("/")
        files = [self._info(f"{base}/{name}") for name, _ in self._children(path)]
        return web.json_response({"files": files})

    async def _read(self, request: web.Request) -> web.StreamResponse:
        path = request.query.get("path", "")
        refused = self._refused(path)
        if refused is not None:
            return refused
        offset = int(request.query.get("offset") or 0)
        length = int(request.query.get("length") or (_MB // 2))
        if length > _MB:
            return _err(400, "MAX_READ_SIZE_EXCEEDED", f"length {length} exceeds 1 MB")
        if offset < 0 or length < 0:
            return _err(400, "INVALID_PARAMETER_VALUE", "negative offset or length")
        if path not in self.files:
            if self._info(path) is not None:
                return _err(400, "INVALID_PARAMETER_VALUE", f"{path} is a directory")
            return _err(
                404, "RESOURCE_DOES_NOT_EXIST", f"No file or directory exists on path {path}."
            )
        chunk = self.files[path][0][offset : offset + length]
        return web.json_response(
            {"bytes_read": len(chunk), "data": base64.b64encode(chunk).decode()}
        )

    async def _post(self, request: web.Request) -> web.StreamResponse:
        op = request.path.rsplit("/", 1)[1]
        body = await request.json()
        if op in ("add-block", "close"):
            handle = body.get("handle")
            if handle not in self._handles:
                return _err(404, "RESOURCE_DOES_NOT_EXIST", f"no handle {handle}")
            if op == "close":
                path, buf = self._handles.pop(handle)
                self._put_file(path, bytes(buf))
                return web.json_response({})
            block = base64.b64decode(body.get("data") or "")
            if len(block) > _MB:
                return _err(400, "MAX_BLOCK_SIZE_EXCEEDED", "a block is limited to 1 MB")
            self._handles[handle][1].extend(block)
            return web.json_response({})
        path = str(body.get("path") or "")
        refused = self._refused(path)
        if refused is not None:
            return refused
        if op == "delete":
            if path in self.files:
                del self.files[path]
            return web.json_response({})
        if path in self.files and not body.get("overwrite"):
            return _err(
                400, "RESOURCE_ALREADY_EXISTS", f"A file or directory already exists at {path}."
            )
        if op == "put":
            data = base64.b64decode(body.get("contents") or "")
            if len(data) > _MB:
                return _err(400, "MAX_BLOCK_SIZE_EXCEEDED", "contents are limited to 1 MB")
            self._put_file(path, data)
            return web.json_response({})
        handle = next(self._next)
        self._handles[handle] = (path, bytearray())
        return web.json_response({"handle": handle})


def _ranged(spec: str | None, data: bytes, headers: dict[str, str]) -> web.Response:
    """The answer to a GET of ``data`` with the ``Range`` header ``spec`` (or none)."""
    size = len(data)
    m = _RANGE.fullmatch(spec or "")
    if spec is None or m is None or not (m[1] or m[2]):
        return web.Response(body=data, headers=headers)
    if m[1]:
        start = int(m[1])
        last = min(int(m[2]), size - 1) if m[2] else size - 1
    else:
        start, last = max(0, size - int(m[2])), size - 1
    if start >= size:
        headers["Content-Range"] = f"bytes */{size}"
        return _err(416, "INVALID_PARAMETER_VALUE", "range not satisfiable")
    headers["Content-Range"] = f"bytes {start}-{last}/{size}"
    return web.Response(status=206, body=data[start : last + 1], headers=headers)
