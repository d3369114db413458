"""Local paths and ``file://`` URLs as an object store.

Theory of operation
-------------------
Blocking file calls run in the default thread pool (``asyncio.to_thread``) so the event loop never
waits on a disk. Keys map to paths under the root directory; ``..`` and absolute keys are refused.
``copy_to_file`` uses the kernel's copy (``shutil.copyfile``: ``sendfile``/``copy_file_range``
where available), so a whole-file "download" is zero-copy. Writes go to a temporary name in the
same directory and are renamed into place, so a reader never sees half a file. Listing walks the
tree once and returns every match in one page, sorted by key.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from urllib.parse import unquote, urlparse

from astream.errors import AccessDeniedError, ObjectNotFoundError, StorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import CHUNK_SIZE, changed_error, join_key

__all__ = ["LocalBackend", "root_from_url"]


def _tag(st: os.stat_result) -> str:
    """A file's identity: its mtime and size."""
    return f"{st.st_mtime_ns:x}-{st.st_size:x}"


def root_from_url(url: str) -> str:
    """The directory of a local path or ``file://`` URL."""
    if url.startswith("file://"):
        return unquote(urlparse(url).path)
    return url


class LocalBackend:
    """Objects are files under ``root``."""

    def __init__(self, url: str) -> None:
        self.root = os.path.abspath(root_from_url(url))
        self._url = url

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        return self._path(key)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *join_key("", key).split("/"))

    def _map(self, exc: OSError, key: str) -> StorageError:
        path = self._path(key)
        if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
            return ObjectNotFoundError(f"no such file ({exc.strerror})", path)
        if isinstance(exc, PermissionError):
            return AccessDeniedError(f"permission denied ({exc.strerror})", path)
        return StorageError(f"I/O error ({exc})", path, retryable=False)

    def _read(self, path: str, start: int, n: int | None) -> bytes:
        with open(path, "rb") as f:
            f.seek(start)
            return f.read() if n is None else f.read(n)

    async def _tag_of(self, key: str) -> str:
        try:
            return _tag(await asyncio.to_thread(os.stat, self._path(key)))
        except OSError as exc:
            raise self._map(exc, key) from exc

    async def _check(self, key: str, etag: str) -> None:
        if await self._tag_of(key) != etag:
            raise changed_error(self._path(key), etag)

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        path = self._path(key)
        pos = start
        if etag is not None:  # no conditional read on a file: its tag before and after
            await self._check(key, etag)
        if seen is not None:
            seen.append(await self._tag_of(key))
        async for chunk in self._iter(path, key, pos, end):
            yield chunk
        if etag is not None:
            await self._check(key, etag)
        if seen is not None:  # and after: a file rewritten while read names two
            seen.append(await self._tag_of(key))

    async def _iter(self, path: str, key: str, pos: int, end: int | None) -> AsyncIterator[bytes]:
        while end is None or pos < end:
            n = CHUNK_SIZE * 4 if end is None else min(CHUNK_SIZE * 4, end - pos)
            try:
                data = await asyncio.to_thread(self._read, path, pos, n)
            except OSError as exc:
                raise self._map(exc, key) from exc
            if data:
                yield data
            if len(data) < n:
                return
            pos += len(data)

    async def copy_to_file(self, key: str, path: str) -> int:
        src = self._path(key)
        try:
            await asyncio.to_thread(shutil.copyfile, src, path)
        except OSError as exc:
            if not os.path.isfile(src):
                raise self._map(FileNotFoundError(2, "No such file"), key) from exc
            raise self._map(exc, key) from exc
        return os.path.getsize(path)

    def _tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        with open(self._path(key), "rb") as f:
            st = os.fstat(f.fileno())
            f.seek(max(0, st.st_size - n))
            return ObjectInfo(key, st.st_size, _tag(st)), f.read(n)

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` and its identity, from one open file."""
        try:
            return await asyncio.to_thread(self._tail, key, n)
        except OSError as exc:
            raise self._map(exc, key) from exc

    async def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        try:
            st = await asyncio.to_thread(os.stat, path)
        except OSError as exc:
            raise self._map(exc, key) from exc
        if not os.path.isfile(path):
            raise self._map(IsADirectoryError(21, "Is a directory"), key)
        return ObjectInfo(key, st.st_size, _tag(st))

    def _walk(self, prefix: str) -> list[ObjectInfo]:
        out: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            for name in filenames:
                key = rel_dir + name
                if key.startswith(prefix) and ".astream-tmp" not in name:
                    st = os.stat(os.path.join(dirpath, name))  # the etag as head() makes it
                    out.append(ObjectInfo(key, st.st_size, _tag(st)))
        out.sort(key=lambda o: o.key)
        return out

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        return await asyncio.to_thread(self._walk, prefix), None

    def _write(self, key: str, data: bytes | None, src: str | None) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".astream-tmp.")
        try:
            with os.fdopen(fd, "wb") as f:
                if data is not None:
                    f.write(data)
            if src is not None:
                shutil.copyfile(src, tmp)
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    async def put(self, key: str, data: bytes) -> None:
        try:
            await asyncio.to_thread(self._write, key, data, None)
        except OSError as exc:
            raise self._map(exc, key) from exc

    async def put_file(self, key: str, path: str) -> None:
        try:
            await asyncio.to_thread(self._write, key, None, path)
        except OSError as exc:
            raise self._map(exc, key) from exc

    async def aclose(self) -> None:
        return None
