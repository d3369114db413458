"""What every backend shares: the raw-backend protocol, key/URL joining, HTTP error mapping.

Theory of operation
-------------------
A *backend* (``local``, ``http``, ``s3``, ``gcs``, ``azure``) implements :class:`RawBackend`: the
smallest set of single-request operations, each mapping its SDK's failures onto the
:mod:`astream.errors` tree and nothing more. It never retries and never sleeps.
:class:`astream.storage.retry.RetryingStore` turns a backend into a full
:class:`~astream.storage.base.ObjectStore`: it adds deadlines, bounded retries and the resumption
of truncated bodies, once, for everybody.

A streamed body that stops before the length the server announced is a transient fault; the
backend raises :class:`TransientStorageError` and the retry layer re-requests only the bytes it
has not received yet.

Conditional writes (``put_if``, ``put_file_if``, ``delete`` with ``expect``) map the service's
refusal -- S3 412 ``PreconditionFailed``, GCS 412, Azure 409 ``BlobAlreadyExists`` or 412
``ConditionNotMet`` -- onto :func:`condition_failed`, an
:class:`~astream.errors.ObjectChangedError`: never retried.

Local files: :func:`new_temp_file` creates a temporary file whose mode follows the process umask
(``tempfile.mkstemp`` makes every file 0600), and :func:`disk_error` turns a full, over-quota or
unwritable disk into an error that names the path and the bytes the write needed.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import secrets
from collections.abc import AsyncIterator
from typing import Protocol

from astream.errors import (
    AccessDeniedError,
    ConfigError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageError,
    ThrottledError,
    TransientStorageError,
)
from astream.storage.base import ObjectInfo, Seen

__all__ = [
    "CHUNK_SIZE",
    "POOL_SIZE",
    "RawBackend",
    "changed_error",
    "check_content_range",
    "condition_failed",
    "disk_error",
    "error_for_status",
    "join_key",
    "keep_inherited",
    "new_temp_file",
    "range_header",
    "split_bucket",
    "total_size",
]

CHUNK_SIZE = 1 << 20
"""Bytes per chunk when streaming a body."""

POOL_SIZE = 64
"""Connections per store: enough for the prefetcher's ~64 concurrent ranged reads."""


_INHERITED: list[object] = []


def keep_inherited(*objs: object) -> None:
    """Hold, for the life of this process, what a forked child took over from its parent and
    replaces (an aiohttp session, an SDK client, with their idle connections) instead of letting
    it be collected: finalising it here would close the parent's sockets through the parent's
    event loop, whose epoll instance the child shares, and unregister them there -- the
    parent's idle keep-alive connections would never hear their next answer."""
    _INHERITED.extend(o for o in objs if o is not None)


class RawBackend(Protocol):
    """One backend's single-shot operations (no retries). Keys are relative to ``url``."""

    @property
    def url(self) -> str: ...

    def url_for(self, key: str) -> str: ...

    def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        """Chunks of bytes ``[start, end)``; nothing when ``start`` is past the end. With
        ``etag`` (what ``list``/``head`` gave as the object's identity), the read is
        conditional on it and a rewritten object raises :func:`changed_error`. With ``seen``,
        the identity the server names in its answer (as ``list``/``head`` give it) is
        appended to it before the first chunk, when it names one."""
        ...

    async def head(self, key: str) -> ObjectInfo: ...

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        """One page of objects under ``prefix`` and the token of the next page (or None)."""
        ...

    async def put(self, key: str, data: bytes) -> None: ...

    async def put_file(self, key: str, path: str) -> None: ...

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        """Create ``key`` only while absent (``expect=None``), or replace it only while it is
        the version ``expect``; the new version. Refused: :func:`condition_failed`."""
        ...

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str: ...

    async def delete(self, key: str, expect: str | None) -> None:
        """Delete ``key`` (already absent: done), only while it is the version ``expect``
        when given."""
        ...

    async def aclose(self) -> None: ...


def join_key(prefix: str, key: str) -> str:
    """``prefix/key`` with exactly one slash; rejects keys escaping the root."""
    if key.startswith("/") or ".." in key.split("/"):
        raise ConfigError(f"key {key!r}: must be relative and must not contain '..'")
    if not prefix:
        return key
    return posixpath.join(prefix.rstrip("/"), key) if key else prefix.rstrip("/")


def split_bucket(url: str, scheme_len: int) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> (``bucket``, ``a/b``)."""
    rest = url[scheme_len:]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(f"url {url!r}: no bucket/container name")
    return bucket, prefix.strip("/")


def range_header(start: int, end: int | None) -> str | None:
    """The ``Range`` header value for ``[start, end)``, or None for the whole object."""
    if start == 0 and end is None:
        return None
    if end is None:
        return f"bytes={start}-"
    return f"bytes={start}-{end - 1}"


def total_size(content_range: str | None, got: int) -> int:
    """The object size a suffix-range reply announces (``bytes a-b/total``); ``got`` when the
    server sent the whole object instead (no ``Content-Range``)."""
    if content_range:
        total = content_range.rpartition("/")[2].strip()
        if total.isdigit():
            return int(total)
    return got


def changed_error(url: str, etag: str | None) -> ObjectChangedError:
    """A conditional read's failed precondition: the object is not the one indexed."""
    return ObjectChangedError(
        f"changed since the index was built (a read conditioned on etag/generation {etag} "
        "failed: the object was rewritten); its rows would no longer be the ones the index "
        "(and any checkpoint) numbers: rebuild the index and clear the cache, or restore it",
        url,
    )


def condition_failed(url: str, expect: str | None) -> ObjectChangedError:
    """A conditional write or delete the service refused: the object is not in the state the
    request was conditioned on (``expect=None``: absent)."""
    if expect is None:
        what = "it already exists (the write was conditioned on its absence)"
    else:
        what = f"it is no longer the version {expect} the write was conditioned on"
    return ObjectChangedError(f"conditional write refused: {what}", url)


def error_for_status(status: int, url: str, detail: str = "") -> StorageError:
    """The astream error for an HTTP status from any object store."""
    what = f"HTTP {status}" + (f" {detail}" if detail else "")
    if status == 404:
        return ObjectNotFoundError(f"not found ({what})", url)
    if status in (401, 403):
        return AccessDeniedError(f"access denied ({what})", url)
    if status == 429 or (status == 503 and "slow" in detail.lower()):
        return ThrottledError(f"throttled ({what})", url)
    if status in (408, 500, 502, 503, 504) or status >= 500:
        return TransientStorageError(f"server error ({what})", url)
    return StorageError(f"request failed ({what})", url, retryable=False)


_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")


def check_content_range(value: str | None, rng: str, start: int, end: int | None, url: str) -> None:
    """A 206 must carry exactly the range asked for (cut at the end of the object)."""
    m = _CONTENT_RANGE.fullmatch(value or "")
    ok = m is not None and int(m[1]) == start
    if ok and m is not None and end is not None and int(m[2]) != end - 1:
        ok = m[3] != "*" and int(m[2]) == int(m[3]) - 1 < end - 1  # shorter object: cut short
    if not ok:
        raise StorageError(
            f"server answered with Content-Range {value or 'none'} when asked {rng}; refusing "
            "bytes of another range",
            url,
            retryable=False,
        )


_NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})
_NO_WRITE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


def disk_error(exc: OSError, path: str, need: int | None) -> StorageError | None:
    """The error for a local write that failed for want of space or permission (None: another
    failure). ``path`` is the file being written, ``need`` the bytes the write needed there.
    A full or over-quota disk is a :class:`StorageError`, an unwritable place an
    :class:`AccessDeniedError` (also a ``PermissionError``); both name the path and the bytes."""
    if exc.errno not in _NO_SPACE | _NO_WRITE:
        return None
    needed = "" if need is None else f" ({need} bytes needed"
    if needed and exc.errno in _NO_SPACE:
        try:
            st = os.statvfs(os.path.dirname(path) or ".")
            needed += f", {st.f_bavail * st.f_frsize} bytes free there"
        except OSError:
            pass
    needed += ")" if needed else ""
    what = os.strerror(exc.errno or 0).lower()
    if exc.errno in _NO_SPACE:
        return StorageError(f"cannot write {path}: {what}{needed}", path, retryable=False)
    return AccessDeniedError(f"cannot write {path}: {what}{needed}", path)


def new_temp_file(dirname: str, prefix: str, suffix: str = "") -> tuple[int, str]:
    """Create a new, empty file in ``dirname`` for writing, named ``prefix + random + suffix``:
    (its descriptor, its path). Unlike ``tempfile.mkstemp`` (always 0600) the mode is 0666 less
    the process umask, so the file keeps that mode once renamed into place."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_BINARY", 0)
    while True:
        path = os.path.join(dirname, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
