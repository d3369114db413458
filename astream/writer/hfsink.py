"""The writer's sink for ``hf://``: a whole dataset lands on the Hub as ONE commit.

Theory of operation
-------------------
A Hub repository has no conditional single-object write, but a commit can be conditioned on its
parent: the branch moves only if nobody pushed since. So instead of uploading each shard as
it is finished (the object-store sink), this sink *stages*: ``prepare()`` pins the branch's
current commit and lists the output path; ``shard_done`` only records each finished file
(the local file stays until the commit, whatever ``keep_local`` says); ``finish(index)``
makes one commit holding every shard and ``index.json`` (large files through the LFS batch API,
small ones inline), conditioned on the pinned parent. A reader therefore sees either the old
tree or the whole new dataset, never part of it.

Rules for a non-empty output path mirror the other remotes: refused
(:class:`~astream.errors.OutputExistsError`) without ``exist_ok``; with it, the same commit
deletes every file listed under the path that the new dataset does not write again. A push to
the branch between ``prepare`` and ``finish`` makes the commit fail with
:class:`~astream.errors.ObjectChangedError`: nothing of this writer is published.
"""

from __future__ import annotations

import os
from typing import Any

from astream import bridge
from astream.errors import ConfigError, ObjectChangedError, OutputExistsError
from astream.storage.registry import open_store
from astream.storage.retry import RetryPolicy

__all__ = ["HfSink", "publish_folder"]

INDEX = "index.json"


class HfSink:
    """A :class:`~astream.writer.sink.ShardSink` committing a dataset to ``remote_url``."""

    def __init__(
        self,
        remote_url: str,
        local_dir: str,
        keep_local: bool,
        *,
        retry: RetryPolicy | None = None,
        store_options: dict[str, Any] | None = None,
        exist_ok: bool = False,
        max_concurrency: int = 8,
    ) -> None:
        if max_concurrency < 1:
            raise ConfigError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.max_concurrency = max_concurrency  # LFS uploads at once, before the commit
        self.remote_url = remote_url
        self.local_dir = local_dir
        self.remove_local = not keep_local
        self.exist_ok = exist_ok
        self.retry = retry or RetryPolicy()
        self.store = open_store(remote_url, retry=retry, **(store_options or {}))
        self.staged: list[tuple[str, str]] = []  # (key, local path), in order
        self.parent: str | None = None
        self.old: list[str] = []
        self.uploaded: list[str] = []
        self.commit_sha: str | None = None
        self._closed = False

    def prepare(self) -> None:
        """Pin the branch's commit and refuse (or plan to replace) a non-empty path."""
        self.parent, self.old = bridge.run(_open(self.store, self.exist_ok))

    def shard_done(self, path: str, key: str) -> None:
        if self._closed:
            raise ConfigError("shard_done() after close()")
        self.staged.append((key, path))

    def check(self) -> None:
        return None

    def finish(self, index_path: str) -> None:
        if self.parent is None:
            self.prepare()
        files = [*self.staged, (INDEX, index_path)]
        self.commit_sha = bridge.run(
            _commit(
                self.store,
                files,
                self.old,
                self.parent,
                self.retry,
                self.remote_url,
                self.max_concurrency,
            )
        )
        self.uploaded = [k for k, _ in files]
        if self.remove_local:
            for _, path in files:
                os.unlink(path)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        bridge.run(self.store.aclose())


async def _open(store: Any, exist_ok: bool) -> tuple[str, list[str]]:
    raw = store.raw
    parent = await raw.branch_head()
    raw.moved_to(parent)  # list (and later compare) exactly the commit we build on
    listed = [o.key async for o in store.list()]
    if listed and not exist_ok:
        raise OutputExistsError(
            f"out: {store.url!r} is not empty (it holds {listed[0]!r}); pass exist_ok=True "
            "(--exist-ok) to replace it"
        )
    return parent, listed


async def _commit(
    store: Any,
    files: list[tuple[str, str]],
    old: list[str],
    parent: str | None,
    policy: RetryPolicy,
    url: str,
    concurrency: int = 8,
) -> str:
    from astream.storage.hfcommit import Addition, commit

    raw = store.raw
    adds = [Addition.of_file(raw.path_of(key), path) for key, path in files]
    written = {key for key, _ in files}
    gone = [raw.path_of(k) for k in old if k not in written]
    try:
        sha: str = await commit(
            raw,
            adds,
            gone,
            f"astream: write {len(files)} files to {url}",
            parent=parent,
            concurrency=concurrency,
            policy=policy,
        )
    except ObjectChangedError as exc:
        raise ObjectChangedError(
            f"another writer pushed to {url} while this one wrote; nothing of this writer was "
            f"published ({exc._message})",
            url,
        ) from exc
    return sha


def publish_folder(local_dir: str, url: str, exist_ok: bool, **store_options: Any) -> str:
    """Commit every file under ``local_dir`` to ``url`` as one commit (``astream convert``
    stages a dataset locally and publishes it with this); the commit's sha."""

    async def go() -> str:
        store = open_store(url, **store_options)
        try:
            parent, old = await _open(store, exist_ok)
            files = []
            for dirpath, _, names in os.walk(local_dir):
                for name in sorted(names):
                    path = os.path.join(dirpath, name)
                    files.append((os.path.relpath(path, local_dir).replace(os.sep, "/"), path))
            return await _commit(store, sorted(files), old, parent, RetryPolicy(), url)
        finally:
            await store.aclose()

    sha: str = bridge.run(go())
    return sha
