"""Local paths and ``file://`` URLs as an object store.

Theory of operation
-------------------
Blocking file calls run in the default thread pool (``asyncio.to_thread``) so the event loop never
waits on a disk. Keys map to paths under the root directory; ``..`` and absolute keys are refused.
``copy_to_file`` uses the kernel's copy (``shutil.copyfile``: ``sendfile``/``copy_file_range``
where available), so a whole-file "download" is zero-copy. Writes go to a temporary name in the
same directory and are renamed into place, so a reader never sees half a file; files and
directories get the modes the process umask gives (0644/0755 under umask 022). A full,
over-quota or unwritable disk is an error naming the path and the bytes the write needed
(:func:`~astream.storage.common.disk_error`). Listing walks the tree once and returns every
match in one page, sorted by key.

Conditional writes: creating only while absent publishes the temporary file with a hard link,
which the kernel refuses atomically when the name exists (a file system without hard links
falls back to a check, then a rename). Replacing or deleting only while a file is the version
``expect`` (its mtime and size) checks, then renames or unlinks: not atomic against another
process.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
from collections.abc import AsyncIterator
from urllib.parse import unquote, urlparse

from astream.errors import AccessDeniedError, ObjectNotFoundError, StorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    CHUNK_SIZE,
    changed_error,
    condition_failed,
    disk_error,
    join_key,
    new_temp_file,
)

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

    def _map(self, exc: OSError, key: str, need: int | None = None) -> StorageError:
        path = self._path(key)
        full = disk_error(exc, path, need) if need is not None else None
        if full is not None:
            return full
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

    def _temp(self, key: str, data: bytes | None, src: str | None) -> tuple[str, str]:
        """The bytes in a new temporary file next to ``key``'s path: (path, temp path)."""
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = new_temp_file(os.path.dirname(path), ".astream-tmp.")
        try:
            with os.fdopen(fd, "wb") as f:
                if data is not None:
                    f.write(data)
            if src is not None:
                shutil.copyfile(src, tmp)
        except BaseException:
            _unlink(tmp)
            raise
        return path, tmp

    def _write(self, key: str, data: bytes | None, src: str | None) -> None:
        path, tmp = self._temp(key, data, src)
        try:
            os.replace(tmp, path)
        except BaseException:
            _unlink(tmp)
            raise

    def _write_if(self, key: str, data: bytes | None, src: str | None, expect: str | None) -> str:
        path, tmp = self._temp(key, data, src)
        try:
            if expect is None:
                try:
                    os.link(tmp, path)  # refused atomically when ``path`` exists
                except FileExistsError:
                    raise condition_failed(path, None) from None
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                        raise
                    if os.path.lexists(path):  # no hard links here: check, then rename
                        raise condition_failed(path, None) from None
                    os.replace(tmp, path)
            else:
                try:
                    now = _tag(os.stat(path))
                except FileNotFoundError:
                    raise condition_failed(path, expect) from None
                if now != expect:
                    raise condition_failed(path, expect)
                os.replace(tmp, path)
            return _tag(os.stat(path))
        finally:
            _unlink(tmp)

    def _need(self, data: bytes | None, src: str | None) -> int | None:
        if data is not None:
            return len(data)
        try:
            return os.path.getsize(src) if src is not None else None
        except OSError:
            return None

    async def put(self, key: str, data: bytes) -> None:
        try:
            await asyncio.to_thread(self._write, key, data, None)
        except OSError as exc:
            raise self._map(exc, key, len(data)) from exc

    async def put_file(self, key: str, path: str) -> None:
        try:
            await asyncio.to_thread(self._write, key, None, path)
        except OSError as exc:
            raise self._map(exc, key, self._need(None, path)) from exc

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        try:
            return await asyncio.to_thread(self._write_if, key, data, None, expect)
        except OSError as exc:
            raise self._map(exc, key, len(data)) from exc

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        try:
            return await asyncio.to_thread(self._write_if, key, None, path, expect)
        except OSError as exc:
            raise self._map(exc, key, self._need(None, path)) from exc

    def _delete(self, key: str, expect: str | None) -> None:
        path = self._path(key)
        try:
            if expect is not None and _tag(os.stat(path)) != expect:
                raise condition_failed(path, expect)
            os.unlink(path)
        except FileNotFoundError:
            return

    async def delete(self, key: str, expect: str | None) -> None:
        try:
            await asyncio.to_thread(self._delete, key, expect)
        except OSError as exc:
            raise self._map(exc, key) from exc

    async def aclose(self) -> None:
        return None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
