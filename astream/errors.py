"""The whole astream exception tree.

Every error astream raises on purpose derives from :class:`AstreamError`, so a trainer can catch
one type. The subclasses say *what kind* of thing went wrong, which decides what to do about it:

- :class:`ConfigError` -- a bad argument; the message names the argument. Also a ``ValueError``.
- :class:`FormatError` -- an index, shard or encoding that does not parse; names the file/field.
- :class:`UnsafeEncodingError` -- ``pkl`` columns without ``allow_unsafe_types=True``.
- :class:`IntegrityError` -- a hash mismatch that survived one re-fetch.
- :class:`StorageError` -- anything from a backend, with ``.url`` and ``.retryable``.
  :class:`ObjectNotFoundError`, :class:`AccessDeniedError` are final;
  :class:`TransientStorageError` (and its :class:`StorageTimeoutError`,
  :class:`ThrottledError`) are what retries are for.
- :class:`CacheError` -- the cache limit cannot hold the pinned working set.

Errors are plain picklable exceptions so that they cross the loop-thread bridge and DataLoader
worker processes intact.
"""

from __future__ import annotations

__all__ = [
    "AccessDeniedError",
    "AstreamError",
    "CacheError",
    "ConfigError",
    "FormatError",
    "IntegrityError",
    "ObjectNotFoundError",
    "StorageError",
    "StorageTimeoutError",
    "ThrottledError",
    "TransientStorageError",
    "UnsafeEncodingError",
]


class AstreamError(Exception):
    """Root of every error astream raises on purpose."""


class ConfigError(AstreamError, ValueError):
    """A bad argument or setting. The message names the argument."""


class FormatError(AstreamError):
    """An index.json, shard file or encoded value that is not valid MDS.

    ``path`` is the file (or URL) concerned when known.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{path}: {message}")
        self.path = path

    def __reduce__(self) -> tuple[object, ...]:
        msg = str(self)
        if self.path is not None and msg.startswith(f"{self.path}: "):
            msg = msg[len(self.path) + 2 :]
        return (type(self), (msg, self.path))


class UnsafeEncodingError(FormatError):
    """A ``pkl`` column met without ``allow_unsafe_types=True``."""


class IntegrityError(AstreamError):
    """Shard bytes whose hash does not match the index, after one re-fetch."""


class StorageError(AstreamError):
    """A failure talking to an object store.

    ``url`` is the object (or bucket) concerned; ``retryable`` says whether trying again may
    succeed. Messages never contain credentials.
    """

    retryable: bool = False

    def __init__(self, message: str, url: str | None = None, *, retryable: bool | None = None):
        super().__init__(message if url is None else f"{message} [{url}]")
        self.url = url
        if retryable is not None:
            self.retryable = retryable
        self._message = message

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_storage_error, (type(self), self._message, self.url, self.retryable))


def _rebuild_storage_error(
    cls: type[StorageError], message: str, url: str | None, retryable: bool
) -> StorageError:
    return cls(message, url, retryable=retryable)


class ObjectNotFoundError(StorageError, FileNotFoundError):
    """The object (or bucket) does not exist. Never retried."""

    retryable = False


class AccessDeniedError(StorageError, PermissionError):
    """Credentials missing or refused. Never retried."""

    retryable = False


class TransientStorageError(StorageError):
    """A fault that may pass: 5xx, connection reset, truncated body. Retried."""

    retryable = True


class StorageTimeoutError(TransientStorageError, TimeoutError):
    """A request or the whole retry deadline ran out."""


class ThrottledError(TransientStorageError):
    """The store asked us to slow down (429, 503 SlowDown)."""


class CacheError(AstreamError):
    """The cache limit is too small for the shards that must be on disk at once."""
