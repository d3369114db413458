"""The ObjectStore protocol: the one small async interface every backend implements.

A store is rooted at a URL prefix (``s3://bucket/datasets/tokens``); every method takes a *key*
relative to that root, with ``/`` separators (``"index.json"``, ``"part0/shard.00000.mds"``).
Backends do only the raw operation and map their SDK's errors to the :mod:`astream.errors`
tree; retries, deadlines and truncated-body resumption are added once, for all backends, by
:mod:`astream.storage.retry`.

Byte ranges are half-open ``[start, end)``; ``end=None`` means "to the end of the object".
A range that starts past the end of the object returns ``b""``; an ``end`` past the end is
clipped.
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

    async def aclose(self) -> None:
        """Release connections. Idempotent."""
        ...
