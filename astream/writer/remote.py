"""The remote upload sink: ship each finished shard to an object store while writing goes on.

Theory of operation
-------------------
``prepare()`` (the writer calls it from its constructor) lists the remote prefix and refuses it
when not empty, or claims and empties it with ``exist_ok=True`` (:mod:`astream.writer.publish`);
an upload waits for it when nobody called it. ``shard_done(path, key)`` schedules
``store.put_file_if(key, path)`` (created only if absent) on astream's loop thread
(:func:`astream.bridge.submit`) and returns at once; at most ``max_concurrency`` uploads
run together (a semaphore on the loop), the rest wait their turn there, never in the writer. A
done-callback records the *first* failure; ``shard_done`` and ``check`` re-raise it (the original
exception object), so an upload error surfaces at the writer's next ``write``. ``finish`` waits for
every pending upload, re-raises the first error if any, and only then uploads ``index.json``
(conditionally: see :class:`~astream.writer.publish.Publication`): a reader never sees an index
that names a missing shard, nor one naming another writer's shards. With ``keep_local=False``
each local file is deleted right after its own upload succeeded. ``close`` cancels what is
still pending and closes the store on the loop.

:class:`RemoteIndexLocator` lets ``merge_index`` read sub-indexes from, and write the merged
index to, any store URL; :mod:`astream.writer.merge` imports it on its first remote URL. This
module imports nothing from merge (nor from mds), so writer/ has no import circle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from typing import Any

from astream import bridge
from astream.errors import (
    ConfigError,
    ObjectChangedError,
    ObjectNotFoundError,
    OutputExistsError,
    StorageError,
)
from astream.storage.registry import open_store
from astream.storage.retry import RetryPolicy
from astream.writer.publish import Publication

__all__ = ["RemoteIndexLocator", "RemoteSink", "check_remote_out", "make_sink"]

INDEX = "index.json"


class RemoteSink:
    """A :class:`~astream.writer.sink.ShardSink` that uploads to ``remote_url``."""

    def __init__(
        self,
        remote_url: str,
        local_dir: str,
        keep_local: bool,
        *,
        retry: RetryPolicy | None = None,
        max_concurrency: int = 8,
        store_options: dict[str, Any] | None = None,
        exist_ok: bool = False,
    ) -> None:
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.remote_url = remote_url
        self.local_dir = local_dir
        self.remove_local = not keep_local
        self.store = open_store(remote_url, retry=retry, **(store_options or {}))
        self.publication = Publication(self.store, exist_ok)
        self._max = max_concurrency
        self._sem: asyncio.Semaphore | None = None
        self._pending: set[concurrent.futures.Future[None]] = set()
        self._error: BaseException | None = None
        self._lock = threading.Lock()
        self._closed = False
        self.uploaded: list[str] = []

    async def _upload(self, path: str, key: str) -> None:
        if self._sem is None:
            self._sem = asyncio.Semaphore(self._max)
        async with self._sem:
            await self.publication.put_shard(key, path)
        with self._lock:
            self.uploaded.append(key)
        if self.remove_local:
            os.unlink(path)

    def _done(self, fut: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._pending.discard(fut)
            if not fut.cancelled() and fut.exception() is not None and self._error is None:
                self._error = fut.exception()

    def prepare(self) -> None:
        """Refuse a non-empty prefix (without ``exist_ok``) or claim and empty it (with it),
        now rather than at the first upload. Any other storage error (a missing bucket, no
        network) is left to surface as an upload error does, at the next write: each upload
        waits for this check and raises its error."""
        try:
            bridge.run(self.publication.open())
        except (ConfigError, ObjectChangedError):
            raise
        except StorageError:
            pass

    def shard_done(self, path: str, key: str) -> None:
        self.check()
        if self._closed:
            raise ConfigError("shard_done() after close()")
        fut = bridge.submit(self._upload(path, key))
        with self._lock:
            self._pending.add(fut)
        fut.add_done_callback(self._done)

    def check(self) -> None:
        with self._lock:
            err = self._error
        if err is not None:
            raise err

    def finish(self, index_path: str) -> None:
        while True:
            with self._lock:
                pending = list(self._pending)
            if not pending:
                break
            concurrent.futures.wait(pending)
        self.check()
        bridge.run(self.publication.publish(index_path))
        with self._lock:
            self.uploaded.append(INDEX)
        if self.remove_local:
            os.unlink(index_path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._lock:
            pending = list(self._pending)
        for fut in pending:
            fut.cancel()
        concurrent.futures.wait(pending)
        bridge.run(self.store.aclose())


def make_sink(
    remote_url: str,
    local_dir: str,
    keep_local: bool,
    *,
    retry: RetryPolicy | None = None,
    max_concurrency: int = 8,
    store_options: dict[str, Any] | None = None,
    exist_ok: bool = False,
) -> RemoteSink:
    """The sink MDSWriter uses for a remote ``out``."""
    if remote_url.startswith("hf://"):  # a Hub dataset is published as one commit
        from astream.writer.hfsink import HfSink

        return HfSink(  # type: ignore[return-value]
            remote_url,
            local_dir,
            keep_local,
            retry=retry,
            store_options=store_options,
            exist_ok=exist_ok,
            max_concurrency=max_concurrency,
        )
    return RemoteSink(
        remote_url,
        local_dir,
        keep_local,
        retry=retry,
        max_concurrency=max_concurrency,
        store_options=store_options,
        exist_ok=exist_ok,
    )


def check_remote_out(url: str, exist_ok: bool, *, replace: bool) -> None:
    """For a caller that writes under ``url`` by other means (``astream convert`` with several
    workers writes sub-datasets and merges them): refuse a non-empty prefix unless
    ``exist_ok``; with ``replace`` (and ``exist_ok``), claim and empty it now."""

    if exist_ok and not replace:
        return  # the writer itself replaces it

    async def go() -> None:
        store = open_store(url)
        try:
            await Publication(store, exist_ok).open()
        except OutputExistsError:
            raise OutputExistsError(
                f"out: {url!r} is not empty (pass --exist-ok to replace it)"
            ) from None
        finally:
            await store.aclose()

    bridge.run(go())


def _split(url: str) -> tuple[str, str]:
    parent, _, name = url.rstrip("/").rpartition("/")
    return parent, name


async def _with_store(url: str, op: str, *args: Any, retry: RetryPolicy | None = None) -> Any:
    store = open_store(url, retry=retry)
    try:
        if op == "list":
            return [o async for o in store.list()]
        if op == "get":
            return await store.get_range(args[0])
        if op == "head":
            return await store.head(args[0])
        if op == "put_if":
            return await store.put_if(args[0], args[1], expect=args[2])
        await store.put(args[0], args[1])
        return None
    finally:
        await store.aclose()


class RemoteIndexLocator:
    """merge_index over object stores: ``root/*/index.json`` in, ``root/index.json`` out."""

    def list_sub_indexes(self, root: str) -> list[str]:
        objects = bridge.run(_with_store(root, "list"))
        parts = [o.key for o in objects if o.key.count("/") == 1 and o.key.endswith("/" + INDEX)]
        return [f"{root.rstrip('/')}/{k}" for k in sorted(parts)]

    def read(self, url: str, timeout: float) -> bytes:
        parent, name = _split(url)
        retry = RetryPolicy(timeout=timeout)
        try:
            data: bytes = bridge.run(_with_store(parent, "get", name, retry=retry))
        except ObjectNotFoundError:
            raise ConfigError(f"index_file_urls: {url!r} does not exist") from None
        return data

    def version(self, out: str) -> str | None:
        try:
            info = bridge.run(_with_store(out, "head", INDEX))
        except ObjectNotFoundError:
            return None
        if info.etag is None:
            raise StorageError(f"{INDEX} has no version to condition its replacement on", out)
        return str(info.etag)

    def write(self, out: str, data: bytes, keep_local: bool, expect: str | None) -> None:
        """One conditional PUT (see merge.py): created only if absent, or replacing only the
        version seen before the merge read its parts; ``hf://`` is one commit."""
        if out.startswith("hf://"):
            bridge.run(_with_store(out, "put", INDEX, data))
            return
        try:
            bridge.run(_with_store(out, "put_if", INDEX, data, expect))
        except ObjectChangedError:
            seen = "none" if expect is None else f"version {expect}"
            raise ObjectChangedError(
                f"merge_index: {out}/{INDEX} changed while this merge ran (it saw {seen}): "
                "another merge or writer published there first; this merge published nothing",
                out,
            ) from None
