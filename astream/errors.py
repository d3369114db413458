"""The whole astream exception tree.

Every error astream raises on purpose derives from :class:`AstreamError`, so a trainer can catch
one type. The subclasses say *what kind* of thing went wrong, which decides what to do about it:

- :class:`ConfigError` -- a bad argument; the message names the argument. Also a ``ValueError``.
  :class:`MissingIndexError` (no ``index.json`` where a local-only dataset should be),
  :class:`EmptyDatasetError` (no samples at all), :class:`UnsupportedEncodingError` (a writer
  column with an unknown encoding) refine it. :class:`SettingError` (also an
  ``AttributeError``): assigning another value to a setting the dataset was built with
  (``ds.shuffle_seed = 7``), which the reference would re-read and astream does not.
- :class:`FormatError` -- an index, shard or encoding that does not parse; names the file/field.
  Also a ``ValueError``. :class:`IndexJSONError` -- an ``index.json`` that is not JSON.
- :class:`UnsafeEncodingError` -- ``pkl`` columns without ``allow_unsafe_types=True``.
- :class:`IntegrityError` -- a hash mismatch that survived one re-fetch. Also a ``ValueError``.
- :class:`StorageError` -- anything from a backend, with ``.url`` and ``.retryable``.
  :class:`ObjectNotFoundError`, :class:`AccessDeniedError` are final;
  :class:`TransientStorageError` (and its :class:`StorageTimeoutError`,
  :class:`ThrottledError`) are what retries are for. :class:`ObjectChangedError` -- a
  conditional read found the object rewritten since it was indexed (never retried).
- :class:`CacheError` -- the cache limit cannot hold the pinned working set.

Errors are plain picklable exceptions so that they cross the loop-thread bridge and DataLoader
worker processes intact.

Catchable as before: code written for mosaicml-streaming catches built-in types. Each astream
error is also an instance of the built-in the reference raises in the same situation (checked
against the reference by tests/core/test_errors_compat.py):

================================================  ============================================
situation                                         also a
================================================  ============================================
bad argument value, impossible combination        ``ValueError`` (:class:`ConfigError`)
remote object or remote ``index.json`` missing    ``FileNotFoundError`` (ObjectNotFoundError)
local-only dataset without ``index.json``         ``RuntimeError`` and ``FileNotFoundError``
dataset with no samples                           ``RuntimeError`` (:class:`EmptyDatasetError`)
``index.json`` that is not JSON                   ``json.JSONDecodeError`` (:class:`IndexJSONError`)
malformed index / shard, unsupported version      ``ValueError`` (:class:`FormatError`)
``pkl`` column without ``allow_unsafe_types``     ``ValueError`` (:class:`UnsafeEncodingError`)
hash mismatch                                     ``ValueError`` (:class:`IntegrityError`)
``cache_limit`` too small                         ``ValueError`` (:class:`CacheError`)
writer output directory not empty                 ``FileExistsError`` (:class:`OutputExistsError`)
writer column with an unknown encoding            ``TypeError`` (:class:`UnsupportedEncodingError`)
writer sample without one of the columns          ``KeyError`` (:class:`MissingColumnError`)
writer value of the wrong type for its column      ``AttributeError`` (:class:`SampleTypeError`)
``index.json`` without ``shards``, unknown format  ``KeyError`` (:class:`IndexKeyError`)
unknown ``shuffle_algo`` / ``partition_algo``     ``KeyError`` (:class:`UnknownNameError`)
``ds[x]`` with a float, str or other index        ``ValueError`` and ``TypeError`` (IndexTypeError)
================================================  ============================================
"""

from __future__ import annotations

import json

__all__ = [
    "AccessDeniedError",
    "AstreamError",
    "CacheError",
    "ConfigError",
    "EmptyDatasetError",
    "FormatError",
    "IndexJSONError",
    "IndexKeyError",
    "IndexTypeError",
    "IntegrityError",
    "MissingColumnError",
    "MissingIndexError",
    "ObjectChangedError",
    "ObjectNotFoundError",
    "OutputExistsError",
    "SampleTypeError",
    "SettingError",
    "StorageError",
    "StorageTimeoutError",
    "ThrottledError",
    "TransientStorageError",
    "UnknownNameError",
    "UnsafeEncodingError",
    "UnsupportedEncodingError",
]


class AstreamError(Exception):
    """Root of every error astream raises on purpose."""


class ConfigError(AstreamError, ValueError):
    """A bad argument or setting. The message names the argument."""


class MissingIndexError(ConfigError, FileNotFoundError, RuntimeError):
    """No ``index.json`` in a local directory and no remote to fetch it from (the reference
    raises ``RuntimeError`` there)."""


class EmptyDatasetError(ConfigError, RuntimeError):
    """Every stream (or one stream, which the message names) holds no sample at all."""


class UnsupportedEncodingError(ConfigError, TypeError):
    """A writer column names an encoding astream does not know (the reference: ``TypeError``)."""


class _PlainMessage(ConfigError, KeyError):
    """A ``ConfigError`` that is also a ``KeyError``, whose text is its message as given
    (``KeyError`` alone would show it quoted, as a key)."""

    def __str__(self) -> str:
        return Exception.__str__(self)


class UnknownNameError(_PlainMessage):
    """An unknown ``shuffle_algo`` or ``partition_algo``. The reference looks the name up in a
    table while iterating (``KeyError``); astream refuses it when the dataset is built."""


class MissingColumnError(_PlainMessage):
    """A sample given to a writer lacks one of its columns (the reference: ``KeyError``)."""


class SampleTypeError(ConfigError, AttributeError):
    """A writer value whose type its column's encoding cannot store (``{"id": "x"}`` in an
    ``int`` column). The reference raises ``AttributeError`` from its encoder."""


class IndexTypeError(ConfigError, TypeError):
    """``ds[x]`` with an index that is not an int, slice, list or array. The reference raises
    ``ValueError``; a ``TypeError`` is what Python's own sequences raise, so it is both."""


class OutputExistsError(ConfigError, FileExistsError):
    """The writer's output directory is not empty (the reference: ``FileExistsError``)."""


class SettingError(ConfigError, AttributeError):
    """An assignment to one of the reference's setting attributes of a built dataset
    (``ds.shuffle_seed = 7``) with a value other than the one it was built with. The reference
    re-reads those attributes at each iteration; astream fixes them when the dataset is built, so
    it refuses the assignment rather than ignore it. The message names the attribute and both
    values."""


class FormatError(AstreamError, ValueError):
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


class IndexJSONError(FormatError, json.JSONDecodeError):
    """An ``index.json`` that is not valid JSON. ``doc``/``pos``/``lineno``/``colno`` are the
    ``json.JSONDecodeError`` fields (``pos`` 0 when the bytes were not even UTF-8)."""

    def __init__(self, message: str, path: str | None = None, doc: str = "", pos: int = 0):
        ValueError.__init__(self, message if path is None else f"{path}: {message}")
        self.path = path
        self.msg = message
        self.doc = doc
        self.pos = pos
        self.lineno = doc.count("\n", 0, pos) + 1
        self.colno = pos - doc.rfind("\n", 0, pos)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.msg, self.path, self.doc, self.pos))


class IndexKeyError(FormatError, KeyError):
    """An ``index.json`` without its ``shards`` list, or a shard of a format no reader knows.
    The reference fails on the missing key (``KeyError``); the message names file and field."""

    def __str__(self) -> str:
        return Exception.__str__(self)


class UnsafeEncodingError(FormatError):
    """A ``pkl`` column met without ``allow_unsafe_types=True``."""


class IntegrityError(AstreamError, ValueError):
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


class ObjectChangedError(StorageError):
    """A read conditioned on the object's indexed ETag/generation failed: the object was
    rewritten since its index was built. Never retried (its bytes would mean other rows)."""

    retryable = False


class TransientStorageError(StorageError):
    """A fault that may pass: 5xx, connection reset, truncated body. Retried."""

    retryable = True


class StorageTimeoutError(TransientStorageError, TimeoutError):
    """A request or the whole retry deadline ran out."""


class ThrottledError(TransientStorageError):
    """The store asked us to slow down (429, 503 SlowDown)."""


class CacheError(AstreamError, ValueError):
    """The cache limit is too small for the shards that must be on disk at once."""
