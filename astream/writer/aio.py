"""``AsyncMDSWriter``: write an MDS dataset from coroutines, uploading on the caller's loop.

Theory of operation
-------------------
The bytes are the :class:`~astream.writer.mds.MDSWriter`'s (same encoder, same shards, same
index): an ``AsyncMDSWriter`` drives one with a sink of its own. Encoding a sample is a few
microseconds and runs on the loop; building and writing a whole shard (up to ``size_limit``
bytes, compressed and hashed) would hold the loop for tens of milliseconds, so the write that
will close a shard runs in a worker thread (``asyncio.to_thread``) -- a write is predicted to
close a shard when the pending bytes plus the largest sample seen so far reach the limit.

The remote prefix is checked as ``MDSWriter`` checks it (refused when not empty unless
``exist_ok=True``, which replaces it; every upload a conditional write: see
``writer/publish.py``), by a task started in the constructor: its error is raised by
``async with``, the first ``write`` or ``aclose``.

Each finished file becomes an upload task on the caller's loop (``put_file_if``), at most
``max_concurrency`` at a time; ``write`` waits (awaits, never blocks) while that many are
running, so a fast producer cannot pile up finished shards on disk. The first upload error is
raised by the next ``write`` or by ``aclose``. ``aclose`` writes the last shard and the index,
waits for every upload, and only then uploads ``index.json``: a reader never sees an index
naming a missing shard. Local files are deleted once uploaded unless ``keep_local``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from astream.errors import ConfigError, ObjectChangedError, StorageError
from astream.storage import RetryPolicy, open_store
from astream.writer.mds import MDSWriter
from astream.writer.output import split_out
from astream.writer.publish import INDEX, Publication

__all__ = ["AsyncMDSWriter"]


class _LoopSink:
    """A ShardSink whose uploads are tasks on one event loop (see the module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        remote: str,
        keep_local: bool,
        max_concurrency: int,
        retry: RetryPolicy | None,
        options: dict[str, Any],
        exist_ok: bool,
    ) -> None:
        self.loop = loop
        self.remote = remote
        self.keep_local = keep_local
        self.store = open_store(remote, retry=retry, **options)
        self.publication = Publication(self.store, exist_ok)
        self.max = max_concurrency
        self.sem = asyncio.Semaphore(max_concurrency)
        self.tasks: set[asyncio.Task[None]] = set()
        self.error: BaseException | None = None
        self.index_path: str | None = None
        self.uploaded: list[str] = []
        self.ready = loop.create_task(self._prepare())
        self.ready.add_done_callback(self._done)

    async def _prepare(self) -> None:
        """Check (or claim) the prefix; as in ``RemoteSink.prepare``, a storage error other
        than a refusal or a lost race is left to the uploads, which wait for this check."""
        try:
            await self.publication.open()
        except (ConfigError, ObjectChangedError):
            raise
        except StorageError:
            pass

    async def _upload(self, path: str, key: str) -> None:
        async with self.sem:
            await self.publication.put_shard(key, path)
        self.uploaded.append(key)
        if not self.keep_local:
            os.unlink(path)

    def _start(self, path: str, key: str) -> None:
        task = self.loop.create_task(self._upload(path, key))
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)  # (``ready`` is in no set)
        if not task.cancelled() and task.exception() is not None and self.error is None:
            self.error = task.exception()

    # -- the ShardSink protocol (called by MDSWriter, on the loop or in a to_thread worker) ----
    def shard_done(self, path: str, key: str) -> None:
        self.check()
        self.loop.call_soon_threadsafe(self._start, path, key)

    def check(self) -> None:
        if self.error is not None:
            raise self.error

    def finish(self, index_path: str) -> None:
        self.index_path = index_path  # uploaded by AsyncMDSWriter.aclose, after the shards

    def close(self) -> None:
        return None


class AsyncMDSWriter:
    """Write an MDS dataset with ``await w.write(sample)`` / ``await w.aclose()``.

    Arguments as :class:`~astream.writer.mds.MDSWriter` (``out`` is a remote URL, or a
    ``(local, remote)`` pair to keep a local copy where you say), plus ``max_concurrency``
    (uploads at once), ``retry`` (a :class:`~astream.storage.RetryPolicy`) and
    ``storage_options`` (passed to the store). A purely local ``out`` works too (nothing to
    upload). Use it inside one event loop; ``async with AsyncMDSWriter(...) as w:`` closes it.
    """

    def __init__(
        self,
        *,
        columns: Mapping[str, str],
        out: Any,
        compression: str | None = None,
        hashes: Sequence[str] | None = None,
        size_limit: int | str | None = 1 << 26,
        keep_local: bool = False,
        exist_ok: bool = False,
        max_concurrency: int = 8,
        retry: RetryPolicy | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
            raise ConfigError(f"max_concurrency must be an int >= 1, got {max_concurrency!r}")
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be an int >= 1, got {max_concurrency}")
        loop = asyncio.get_running_loop()  # uploads belong to this loop
        local, remote = split_out(out)
        self._tmp = None
        local_ok = exist_ok
        if remote is not None and local is None:
            self._tmp = local = tempfile.mkdtemp(prefix="astream-awriter-")
            local_ok = True
        self._sink: _LoopSink | None = None
        if remote is not None:
            self._sink = _LoopSink(
                loop,
                remote,
                keep_local,
                max_concurrency,
                retry,
                dict(storage_options or {}),
                exist_ok,
            )
        sink = self._sink
        try:
            self._writer = MDSWriter(
                columns=columns,
                out=local if remote is None else (local, remote),
                compression=compression,
                hashes=hashes,
                size_limit=size_limit,
                keep_local=True,  # the sink deletes each file once it is uploaded
                exist_ok=local_ok,
                sink_factory=None if sink is None else (lambda r, lo, k: sink),
            )
        except BaseException:
            if sink is not None:
                sink.ready.cancel()
                sink.publication.abort()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            raise
        self._max_sample = 0
        self._closed = False
        self.local = local
        self.remote = remote

    @property
    def uploaded(self) -> list[str]:
        """Keys uploaded so far, in completion order (``index.json`` last)."""
        return [] if self._sink is None else list(self._sink.uploaded)

    def get_config(self) -> dict[str, Any]:
        return self._writer.get_config()

    async def write(self, sample: Mapping[str, Any]) -> None:
        """Encode ``sample``; a write that closes a shard builds it in a worker thread, and
        waits while ``max_concurrency`` uploads are running."""
        if self._closed:
            raise ConfigError("AsyncMDSWriter: write() after aclose()")
        w = self._writer
        sink = self._sink
        if sink is not None:
            if not sink.ready.done():
                await asyncio.shield(sink.ready)
            sink.check()
            while len(sink.tasks) > sink.max:  # more finished files than upload slots
                await asyncio.wait(set(sink.tasks), return_when=asyncio.FIRST_COMPLETED)
                sink.check()
        limit = w.size_limit
        before = w._pending_size
        if limit is not None and w._pending and before + self._max_sample >= limit:
            shards = len(w.shards)
            await asyncio.to_thread(w.write, sample)
            if len(w.shards) == shards:
                self._max_sample = max(self._max_sample, w._pending_size - before)
        else:
            w.write(sample)
            self._max_sample = max(self._max_sample, w._pending_size - before)

    async def aclose(self) -> None:
        """Write the last shard and the index, wait for every upload, then upload
        ``index.json``. Raises the first upload error (nothing more is uploaded then)."""
        if self._closed:
            return
        self._closed = True
        sink = self._sink
        try:
            await asyncio.to_thread(self._writer.finish)
            if sink is None:
                return
            await asyncio.sleep(0)  # the last shard's upload task is created by now
            while sink.tasks:
                await asyncio.wait(set(sink.tasks))
            await asyncio.shield(sink.ready)
            sink.check()
            assert sink.index_path is not None
            await sink.publication.publish(sink.index_path)
            sink.uploaded.append(INDEX)
            if not sink.keep_local:
                os.unlink(sink.index_path)
        finally:
            await self._release()

    async def _release(self) -> None:
        sink = self._sink
        if sink is not None:
            for t in [*sink.tasks, sink.ready]:
                t.cancel()
            sink.publication.abort()
            await asyncio.gather(*sink.tasks, sink.ready, return_exceptions=True)
            await sink.store.aclose()
        if self._tmp is not None and not (sink is not None and sink.keep_local):
            shutil.rmtree(self._tmp, ignore_errors=True)

    async def __aenter__(self) -> AsyncMDSWriter:
        if self._sink is not None:
            try:
                await asyncio.shield(self._sink.ready)
            except BaseException:
                self._closed = True
                self._writer._close()
                await self._release()
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            await self.aclose()
        else:
            self._closed = True
            self._writer._close()
            await self._release()
