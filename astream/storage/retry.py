"""Reliability in one place: deadlines, bounded retries with jittered backoff, resumed bodies.

Theory of operation
-------------------
:class:`RetryingStore` wraps any :class:`~astream.storage.common.RawBackend` and is the
:class:`~astream.storage.base.ObjectStore` every caller sees. Each operation runs as a series of
*attempts*:

- An attempt is bounded by ``policy.timeout``. For streamed bodies that bound is an *inactivity*
  timeout: it is pushed back each time a chunk arrives, so a large, steadily flowing download is
  never cut, while a stalled one is.
- Only :class:`~astream.errors.TransientStorageError` (5xx, throttling, resets, timeouts,
  truncated bodies) starts another attempt. ``ObjectNotFoundError``/``AccessDeniedError`` and
  every other error propagate at once: a 404 costs exactly one request.
- Between attempts we wait a "full jitter" backoff: uniform in ``[0, min(max, base * 2**n))``.
- A body cut in the middle is not re-downloaded: the next attempt asks for the range starting at
  the first byte not yet received, and the chunks are stitched together.
- ``policy.deadline`` bounds the whole operation (attempts and waits). When it runs out the error
  is a :class:`~astream.errors.StorageTimeoutError` naming the URL and the last fault; when the
  attempts run out, the last transient error is raised as is (it names the URL).

Every transient failure that is retried adds one to ``retries`` and to ``causes[cause]``, where
:func:`retry_cause` names the fault: ``throttle`` (429, 503 SlowDown), ``5xx``, ``timeout``,
``truncated`` (a body cut short), ``reset`` (the connection failed or closed) or ``other``.
Plain int adds on the failure path only: a request that succeeds costs nothing more.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from astream.errors import (
    ConfigError,
    ObjectChangedError,
    StorageError,
    StorageTimeoutError,
    ThrottledError,
    TransientStorageError,
)
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import RawBackend

__all__ = ["RETRY_CAUSES", "RetryPolicy", "RetryingStore", "retry_cause"]

RETRY_CAUSES = ("throttle", "5xx", "timeout", "truncated", "reset", "other")
# what the backends say for a body that ended early (aiohttp, botocore)
_TRUNCATED = ("body cut short", "IncompleteRead", "ResponseStreamingError", "ContentLength")

T = TypeVar("T")
_Page = tuple[list[ObjectInfo], str | None]
_Objects = list[ObjectInfo]


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. ``timeout`` is per request; ``deadline`` (if set) per operation."""

    attempts: int = 5
    timeout: float = 60.0
    deadline: float | None = None
    backoff_base: float = 0.1
    backoff_max: float = 5.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ConfigError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        if self.timeout <= 0:
            raise ConfigError(f"RetryPolicy.timeout must be > 0, got {self.timeout}")
        if self.deadline is not None and self.deadline <= 0:
            raise ConfigError(f"RetryPolicy.deadline must be > 0, got {self.deadline}")
        if self.backoff_base < 0 or self.backoff_max < 0:
            raise ConfigError("RetryPolicy.backoff_base/backoff_max must be >= 0")

    def backoff(self, failures: int, rng: random.Random) -> float:
        """Seconds to wait after the ``failures``-th consecutive failure (1-based)."""
        cap = min(self.backoff_max, self.backoff_base * (2 ** (failures - 1)))
        return rng.uniform(0.0, cap)


def retry_cause(err: BaseException) -> str:
    """The label of a transient fault, one of :data:`RETRY_CAUSES`."""
    if isinstance(err, ThrottledError):
        return "throttle"
    if isinstance(err, TimeoutError):  # StorageTimeoutError is one too
        return "timeout"
    text = err._message if isinstance(err, StorageError) else str(err)
    if text.startswith("server error"):
        return "5xx"
    if any(mark in text for mark in _TRUNCATED):
        return "truncated"
    if text.startswith("connection failed"):
        return "reset"
    return "other"


class _Budget:
    """Attempts and deadline of one operation (on ``key`` of ``raw``: its URL is made only for
    an error message)."""

    def __init__(self, policy: RetryPolicy, raw: RawBackend, key: str) -> None:
        self.policy = policy
        self._raw, self._key = raw, key
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.end = None if policy.deadline is None else loop.time() + policy.deadline
        self.failures = 0
        self.last: BaseException | None = None

    @property
    def url(self) -> str:
        return self._raw.url_for(self._key)

    def fault(self, exc: BaseException, timeout: float) -> TransientStorageError:
        """The transient error an attempt ended with; the deadline's own error if it ran out."""
        if isinstance(exc, TransientStorageError):
            return exc
        if self.end is not None and self.loop.time() >= self.end - 1e-3:
            raise self.expired(self.last) from exc
        return StorageTimeoutError(f"no response within {timeout:.3g}s", self.url)

    def request_timeout(self) -> float:
        t = self.policy.timeout
        if self.end is not None:
            t = min(t, self.end - self.loop.time())
        if t <= 0:
            raise self.expired(self.last)
        return t

    def expired(self, last: BaseException | None) -> StorageTimeoutError:
        why = ""
        if isinstance(last, StorageError):
            why = f"; last error: {last._message}"
        elif last is not None:
            why = f"; last error: {last}"
        return StorageTimeoutError(
            f"deadline of {self.policy.deadline}s exceeded after {self.failures} failed "
            f"attempt(s){why}",
            self.url,
        )

    async def failed(self, err: TransientStorageError, rng: random.Random) -> None:
        """Record a transient failure; re-raise if the budget is spent, else back off."""
        self.failures += 1
        self.last = err
        if self.failures >= self.policy.attempts:
            raise err
        delay = self.policy.backoff(self.failures, rng)
        asked = getattr(err, "retry_after", None)  # a 429's Retry-After (the Hub's): honoured
        if asked is not None:
            delay = max(delay, asked)
        if self.end is not None and self.loop.time() + delay >= self.end:
            raise self.expired(err) from err
        await asyncio.sleep(delay)


class RetryingStore:
    """An :class:`~astream.storage.base.ObjectStore` over a raw backend, with retries."""

    def __init__(self, raw: RawBackend, policy: RetryPolicy | None = None) -> None:
        self.raw = raw
        self.policy = policy or RetryPolicy()
        self._rng = random.Random()
        self.retries = 0  # transient failures retried so far (for statistics)
        self.causes: collections.Counter[str] = collections.Counter()  # the same, by cause

    @property
    def url(self) -> str:
        return self.raw.url

    def url_for(self, key: str) -> str:
        return self.raw.url_for(key)

    def __repr__(self) -> str:
        return f"{type(self.raw).__name__}({self.url!r})"

    async def _call(self, key: str, op: Callable[[], Awaitable[T]]) -> T:
        budget = _Budget(self.policy, self.raw, key)
        while True:
            timeout = budget.request_timeout()
            try:
                async with asyncio.timeout(timeout):
                    return await op()
            except (TransientStorageError, TimeoutError) as exc:
                err = budget.fault(exc, timeout)
                await budget.failed(err, self._rng)
                self.retries += 1
                self.causes[retry_cause(err)] += 1

    async def _stream(
        self,
        key: str,
        start: int,
        end: int | None,
        sink: Callable[[bytes], object],
        etag: str | None = None,
        seen: Seen = None,
    ) -> int:
        """Feed bytes ``[start, end)`` to ``sink``, resuming after truncation; return count.
        ``seen``: the identities the server named, one per attempt (see ``iter_range``)."""
        budget = _Budget(self.policy, self.raw, key)
        got = 0
        loop = asyncio.get_running_loop()
        while True:
            timeout = budget.request_timeout()
            try:
                async with asyncio.timeout(timeout) as cm:
                    it = (
                        self.raw.iter_range(key, start + got, end)
                        if etag is None and seen is None
                        else self.raw.iter_range(key, start + got, end, etag, seen)
                    )
                    try:
                        async for chunk in it:
                            sink(chunk)
                            got += len(chunk)
                            cm.reschedule(loop.time() + budget.request_timeout())
                    finally:
                        await it.aclose()  # type: ignore[attr-defined]
                return got
            except (TransientStorageError, TimeoutError) as exc:
                err = budget.fault(exc, timeout)
                await budget.failed(err, self._rng)
                self.retries += 1
                self.causes[retry_cause(err)] += 1

    async def get_range(
        self,
        key: str,
        start: int = 0,
        end: int | None = None,
        *,
        etag: str | None = None,
        seen: Seen = None,
    ) -> bytes:
        if start < 0 or (end is not None and end < start):
            raise ConfigError(f"get_range({key!r}): bad range start={start} end={end}")
        if end is not None and end == start:
            return b""
        parts: list[bytes] = []
        await self._stream(key, start, end, parts.append, etag, seen)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def stream_range(
        self,
        key: str,
        start: int,
        end: int,
        sink: Callable[[bytes], object],
        *,
        etag: str | None = None,
        seen: Seen = None,
    ) -> int:
        """Hand bytes ``[start, end)`` of ``key`` to ``sink`` chunk by chunk, in order, as they
        arrive (nothing is joined); a truncated body resumes at the next byte, so the chunks
        are exactly the range once. Return the count (less than asked: the object is shorter).
        ``seen``: see ``iter_range`` (one identity per attempt, resumptions included)."""
        if start < 0 or end < start:
            raise ConfigError(f"stream_range({key!r}): bad range start={start} end={end}")
        if end == start:
            return 0
        return await self._stream(key, start, end, sink, etag, seen)

    async def get_to_file(self, key: str, path: str) -> int:
        copy = getattr(self.raw, "copy_to_file", None)
        if copy is not None:
            size: int = await self._call(key, lambda: copy(key, path))
            return size
        with open(path, "wb") as f:
            return await self._stream(key, 0, None, f.write)

    async def head(self, key: str) -> ObjectInfo:
        return await self._call(key, lambda: self.raw.head(key))

    @property
    def reads_tails(self) -> bool:
        """Whether :meth:`get_tail` works here (not Azure: its SDK has no suffix range)."""
        return hasattr(self.raw, "get_tail")

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` (all of it when shorter) and its size and identity,
        in one request where :attr:`reads_tails`, else a HEAD and a ranged GET."""
        if not self.reads_tails:
            info = await self.head(key)
            return info, await self.get_range(key, max(0, info.size - n), info.size)
        got: tuple[ObjectInfo, bytes] = await self._call(
            key,
            lambda: self.raw.get_tail(key, n),  # type: ignore[attr-defined]
        )
        return got

    async def list(self, prefix: str = "") -> AsyncIterator[ObjectInfo]:
        token: str | None = None
        while True:
            items, token = await self._call(prefix, self._page(prefix, token))
            for item in items:
                yield item
            if token is None:
                return

    @property
    def lists_from_key(self) -> bool:
        """Whether the backend can start a listing at a key (S3 ``StartAfter``, GCS
        ``startOffset``), so that :meth:`list_between` ranges can run concurrently."""
        return hasattr(self.raw, "list_page_after")

    async def list_between(self, prefix: str, after: str | None, upto: str | None) -> _Objects:
        """The objects under ``prefix`` whose key ``k`` has ``after < k <= upto`` (``None``:
        unbounded), in key order. Only for backends where :attr:`lists_from_key`."""
        raw = self.raw
        out: _Objects = []
        token: str | None = None
        while True:

            def page(t: str | None = token) -> Awaitable[_Page]:
                return raw.list_page_after(prefix, after, t)  # type: ignore[attr-defined,no-any-return]

            items, token = await self._call(prefix, page)
            for item in items:
                if after is not None and item.key <= after:
                    continue
                if upto is not None and item.key > upto:
                    return out
                out.append(item)
            if token is None:
                return out

    def _page(self, prefix: str, token: str | None) -> Callable[[], Awaitable[_Page]]:
        return lambda: self.raw.list_page(prefix, token)

    async def put(self, key: str, data: bytes) -> None:
        await self._call(key, lambda: self.raw.put(key, data))

    async def put_file(self, key: str, path: str) -> None:
        if not os.path.isfile(path):
            raise ConfigError(f"put_file({key!r}): {path!r} is not a file")
        await self._call(key, lambda: self.raw.put_file(key, path))

    async def put_if(self, key: str, data: bytes, *, expect: str | None = None) -> str:
        return await self._put_if(
            key, lambda: self.raw.put_if(key, data, expect), len(data), lambda: _digest(data)
        )

    async def put_file_if(self, key: str, path: str, *, expect: str | None = None) -> str:
        if not os.path.isfile(path):
            raise ConfigError(f"put_file_if({key!r}): {path!r} is not a file")
        size = os.path.getsize(path)
        return await self._put_if(
            key,
            lambda: self.raw.put_file_if(key, path, expect),
            size,
            lambda: _file_digest(path),
        )

    async def _put_if(
        self,
        key: str,
        op: Callable[[], Awaitable[str]],
        size: int,
        digest: Callable[[], bytes],
    ) -> str:
        """A conditional write with retries. A refusal after a transient failure may be this
        write's own earlier attempt, which succeeded but whose answer was lost: when the object
        now holds exactly these bytes, that is the success (its version is returned)."""
        budget = _Budget(self.policy, self.raw, key)
        while True:
            timeout = budget.request_timeout()
            try:
                async with asyncio.timeout(timeout):
                    return await op()
            except ObjectChangedError:
                if budget.failures:
                    mine = await self._holds(key, size, digest)
                    if mine is not None:
                        return mine
                raise
            except (TransientStorageError, TimeoutError) as exc:
                err = budget.fault(exc, timeout)
                await budget.failed(err, self._rng)
                self.retries += 1
                self.causes[retry_cause(err)] += 1

    async def _holds(self, key: str, size: int, digest: Callable[[], bytes]) -> str | None:
        """The version of ``key`` when it holds exactly ``size`` bytes of that digest."""
        info = await self.head(key)
        if info.size != size or info.etag is None:
            return None
        h = hashlib.sha256()
        await self._stream(key, 0, None, h.update, info.etag)
        return info.etag if h.digest() == digest() else None

    async def delete(self, key: str, *, expect: str | None = None) -> None:
        await self._call(key, lambda: self.raw.delete(key, expect))

    async def aclose(self) -> None:
        await self.raw.aclose()

    async def __aenter__(self) -> RetryingStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _file_digest(path: str) -> bytes:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.digest()
