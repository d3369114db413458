"""Publishing a dataset under an object-store prefix as safely as into a local directory.

Theory of operation
-------------------
A local ``out`` that is not empty is refused unless ``exist_ok=True``, which empties it first.
:class:`Publication` gives a remote ``out`` the same rule, and makes every object a writer puts
there a *conditional* write (see ``storage/base.py``), so that two writers racing on one prefix
can never publish a mix of their shards.

``open()``, before the first upload, lists the prefix.

- **Empty prefix.** Every shard, and then ``index.json``, is created only if absent
  (``If-None-Match: *``, GCS ``ifGenerationMatch=0``). A writer that finds one of its keys
  already there (another writer made it) fails at once; the one whose ``index.json`` lands
  first is published, and every shard its index names was created by it, since no other
  writer could replace it afterwards.
- **Not empty, no ``exist_ok``.** :class:`~astream.errors.OutputExistsError`, as for a local
  directory.
- **Not empty, ``exist_ok=True``: replace.** The writer first *claims* the prefix: it replaces
  ``index.json`` by an empty index (no shards, an ``astream_pending`` token; a reader sees an
  empty dataset, never a mix) with a write conditioned on the version it listed (``If-Match``,
  ``ifGenerationMatch=<generation>``; ``If-None-Match: *`` when there was none). Of two writers
  that listed the same version, one claim fails. It then checks that its claim still holds and
  deletes every other object it listed -- the old shards, those the new index will name again
  and those it will not -- each conditioned on the version it listed where the service takes
  it. The new shards are then created only if absent, as above, and ``index.json`` replaces
  the claim only while it is still this writer's (conditioned on the claim's version): a
  writer that claimed the prefix after this one makes this one fail.

Credentials that may write but not list the prefix: without ``exist_ok`` the writer goes on as
on an empty prefix (an existing shard or index is still never overwritten: its creation is
refused); replacing needs the listing, and says so.

A lost race is an :class:`~astream.errors.ObjectChangedError` (a ``StorageError``, never
retried) whose message and ``url`` name the prefix; nothing of the losing writer is published
(its shards may stay under the prefix, named by no index; the next ``exist_ok=True`` run
deletes them). Where a service ignores the conditions (see docs/cloud.md), the refusal of a
non-empty prefix still holds but a race is not detected.
"""

from __future__ import annotations

import asyncio
import json
import uuid

from astream.errors import AccessDeniedError, ObjectChangedError, OutputExistsError
from astream.storage.base import ObjectInfo, ObjectStore

__all__ = ["INDEX", "Publication"]

INDEX = "index.json"
DELETE_CONCURRENCY = 32


class Publication:
    """The publication protocol of one writer on ``store``'s prefix (see the module doc)."""

    def __init__(self, store: ObjectStore, exist_ok: bool) -> None:
        self.store = store
        self.exist_ok = exist_ok
        self.claim: str | None = None  # the version of our placeholder index, once claimed
        self.replaced = 0  # objects deleted when replacing
        self._opened: asyncio.Future[None] | None = None

    @property
    def prefix(self) -> str:
        return self.store.url

    async def open(self) -> None:
        """Refuse, claim or accept the prefix; idempotent (later calls wait for the first)."""
        if self._opened is None:
            self._opened = asyncio.ensure_future(self._open())
        await asyncio.shield(self._opened)

    def abort(self) -> None:
        """Cancel an ``open`` still running (the writer is being abandoned)."""
        if self._opened is not None:
            self._opened.cancel()

    async def _open(self) -> None:
        listed: list[ObjectInfo] = []
        try:
            async for info in self.store.list():
                listed.append(info)
                if not self.exist_ok:
                    break
        except AccessDeniedError as exc:
            if self.exist_ok:
                raise AccessDeniedError(
                    f"exist_ok=True replaces {self.prefix}: that needs the right to list it "
                    f"({exc._message})",
                    exc.url,
                ) from exc
            return  # credentials that may write but not list: the creates only if absent
        if not listed:
            return
        if not self.exist_ok:
            raise OutputExistsError(
                f"out: {self.prefix!r} is not empty (it holds {listed[0].key!r}); pass "
                "exist_ok=True (--exist-ok) to replace it"
            )
        index = next((o for o in listed if o.key == INDEX), None)
        was = None if index is None else index.etag
        if index is not None and was is None:
            was = (await self.store.head(INDEX)).etag
        pending = {"astream_pending": uuid.uuid4().hex, "shards": [], "version": 2}
        data = json.dumps(pending, sort_keys=True).encode()
        try:
            self.claim = await self.store.put_if(INDEX, data, expect=was)
        except ObjectChangedError as exc:
            raise self.lost(f"{INDEX} changed while this writer was claiming the prefix") from exc
        await self._still_mine()
        old = [o for o in listed if o.key != INDEX]
        sem = asyncio.Semaphore(DELETE_CONCURRENCY)

        async def drop(o: ObjectInfo) -> None:
            async with sem:
                await self.store.delete(o.key, expect=o.etag)

        try:
            await asyncio.gather(*(drop(o) for o in old))
        except ObjectChangedError as exc:
            raise self.lost(f"an old object changed while this writer deleted it: {exc}") from exc
        self.replaced = len(old)

    async def _still_mine(self) -> None:
        now = (await self.store.head(INDEX)).etag
        if now is None or self.claim is None or now.strip('"') != self.claim.strip('"'):
            raise self.lost(f"another writer claimed {INDEX} right after this one")

    async def put_shard(self, key: str, path: str) -> None:
        """Upload a finished file, only if no object has its key yet."""
        await self.open()
        try:
            await self.store.put_file_if(key, path)
        except ObjectChangedError as exc:
            raise self.lost(f"{key} was created there by another writer first") from exc

    async def publish(self, index_path: str) -> None:
        """Upload ``index.json``: created only if absent, or replacing only our own claim."""
        await self.open()
        try:
            await self.store.put_file_if(INDEX, index_path, expect=self.claim)
        except ObjectChangedError as exc:
            what = "published first" if self.claim is None else "claimed the prefix since"
            raise self.lost(f"another writer {what}") from exc

    def lost(self, why: str) -> ObjectChangedError:
        """The error of a lost race, naming the prefix."""
        return ObjectChangedError(
            f"another writer is writing to {self.prefix}: {why}; nothing of this writer was "
            "published there (run it again when the other one is done, with exist_ok=True to "
            "replace what it published)",
            self.prefix,
        )
