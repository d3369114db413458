"""The ObjectStore protocol: the one small async interface every backend implements.

A store is rooted at a URL prefix (``s3://bucket/datasets/tokens``); every method takes a *key*
relative to that root, with ``/`` separators (``"index.json"``, ``"part0/shard.00000.mds"``).
Backends do only the raw operation and map their SDK's errors to the :mod:`astream.errors`
tree; retries, deadlines and truncated-body resumption are added once, for all backends, by
:mod:`astream.storage.retry`.

Byte ranges are half-open ``[start, end)``; ``end=None`` means "to the end of the object".
A range that starts past the end of the object returns ``b""``; an ``end`` past the end is
clipped.

Conditional writes make a publication safe when several writers share a prefix. ``put_if``
and ``put_file_if`` create an object only while no object has its key (``expect=None``: S3
and Azure ``If-None-Match: *``, GCS ``ifGenerationMatch=0``), or replace it only while it is
still the version ``expect`` (an identity that ``head``, ``list`` or an earlier ``put_if``
gave: ``If-Match``, ``ifGenerationMatch=<generation>``), and return the new version. A refused
condition is an :class:`~astream.errors.ObjectChangedError`, never retried; after a retried
attempt (its answer lost), a refusal whose object now holds exactly the bytes being written is
this write's own success. ``delete`` takes the same ``expect``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# the identities a server named in its answers (see ``RawBackend.iter_range``), or None
Seen = list[str] | None


@dataclass(frozen=True)
class ObjectInfo:
    """What ``head`` and ``list`` return about an object."""

    key: str
    size: int
    etag: str | None = None  # the identity: S3/Azure/HTTP ETag, GCS generation, local mtime


@runtime_checkable
class ObjectStore(Protocol):
    """Async access to objects under one root URL."""

    @property
    def url(self) -> str:
        """The root URL, without credentials."""
        ...

    def url_for(self, key: str) -> str:
        """The full URL of ``key`` (for messages), without credentials."""
        ...

    async def get_range(
        self,
        key: str,
        start: int = 0,
        end: int | None = None,
        *,
        etag: str | None = None,
        seen: Seen = None,
    ) -> bytes:
        """Bytes ``[start, end)`` of ``key``. With ``etag`` (the identity ``list``/``head``
        gave), only if the object still has it: else :class:`ObjectChangedError`. With
        ``seen``, the identity the server names in each answer (retries included) is appended
        to it."""
        ...

    async def get_to_file(self, key: str, path: str) -> int:
        """Stream the whole object into ``path`` (created or truncated); return its size."""
        ...

    async def head(self, key: str) -> ObjectInfo:
        """Size and etag of ``key``; :class:`ObjectNotFoundError` if absent."""
        ...

    def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, following pagination."""
        ...

    async def put(self, key: str, data: bytes) -> None:
        """Create or replace ``key`` with ``data``."""
        ...

    async def put_file(self, key: str, path: str) -> None:
        """Upload a local file, multipart/resumable when large."""
        ...

    async def put_if(self, key: str, data: bytes, *, expect: str | None = None) -> str:
        """Create ``key`` only if absent (``expect=None``), or replace it only while it is the
        version ``expect``; return the new version. Refused: ObjectChangedError."""
        ...

    async def put_file_if(self, key: str, path: str, *, expect: str | None = None) -> str:
        """``put_if`` with a local file's bytes (multipart/resumable when large)."""
        ...

    async def delete(self, key: str, *, expect: str | None = None) -> None:
        """Delete ``key`` (already absent: nothing to do); with ``expect``, only while it is
        that version (else ObjectChangedError)."""
        ...

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...
