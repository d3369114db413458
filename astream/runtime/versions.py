"""One version of each shard object per job, for objects whose index names none (MDS).

Theory of operation
-------------------
A Parquet row group's index holds its file's ETag (or GCS generation), so every read of it is
conditional on that identity. An MDS ``index.json`` names no version of its shard objects: a
shard rewritten in place under a running job (same key, new bytes, and often the same size:
fixed-length token samples) would be read partly from one version and partly from the other,
and nothing would notice without ``validate_hash``. A shard is read in several pieces: its
header and its first batch's samples by ranged GETs (in a DataLoader worker or, for the first
batches, in the main process: ``runtime/lead.py``), then whole by a download (in parts, any
worker of the node, resumed after faults), then maybe by ranges again after an eviction.

:class:`Versions` keeps, per process, the version of each such object that the process read
first: every backend names the version it served (``seen``, see ``storage/base.py``). Then:

* every later ranged read of the object in that process is conditional on it (If-Match, or
  ``ifGenerationMatch``), as for Parquet;
* a download's parts are all compared with it and with each other;
* the main process hands the versions it read for a worker's first batch to that worker
  together with the bytes;
* a downloaded shard file carries the version it came from as an extended attribute
  (``user.astream.version``, set on the temporary file before it is published), so a process
  that read the shard by ranges compares the two as soon as the file is in the cache, whoever
  downloaded it: when it opens the file, before it opens any other shard (:meth:`sweep`), and
  -- the loader's process, which read the workers' first batches and opens no shard -- before
  it hands out each batch. A worker whose first-batch samples of a shard are of one version
  and another worker that downloads the next version then never get both into handed-out
  batches, though the first worker never opens that file.

The processes of one dataset object -- the one that built it and its DataLoader workers --
also share the versions they fix through a :class:`Board` on the node: a directory under the
first cache root (``.astream/versions/<job>``, named when the dataset is built, so it travels
with the dataset to its workers and no other job ever reads it), holding one entry per
object, created exclusively by the first process that fixes a version of it. A process adopts
the board's version before it reads an object for the first time, and a version it reads that
is not the board's is refused. So with a plain torch ``DataLoader`` too, a worker never
downloads (or reads by ranges) another version of a shard than the one another worker's first
batch read: its reads are conditional on the board's version, and a download that began
before that version was on the board is refused when it ends, before it is published. The
board is deleted when its dataset is garbage-collected or its process exits.

Two versions anywhere is an :class:`~astream.errors.ObjectChangedError` naming both, and
nothing of the second is published. Where the file system takes no extended attributes (or a
file was cached by an earlier run), the file carries no version and is trusted as before: a
cached shard is tied to its index by ``index.json`` (``catalog.py``), not by this.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import threading
import uuid
from collections.abc import Iterable
from typing import Any

from astream.errors import ObjectChangedError

__all__ = ["XATTR", "Board", "Versions", "refused", "rewritten"]

XATTR = "user.astream.version"

Key = tuple[str, str]  # (the stream's remote root, the object's key under it)


def _same(a: str, b: str) -> bool:
    # a listing may give an ETag unquoted that a response header quotes
    return a.strip('"') == b.strip('"')


def rewritten(url: str, first: str, then: str, how: str) -> ObjectChangedError:
    """Two versions of one object in one job: ``how`` says where ``first`` was read."""
    a, b = first.strip('"'), then.strip('"')
    return ObjectChangedError(
        f"rewritten while this job reads it: {how} version {a}, then {b}; its samples would "
        "no longer be the ones the index numbers: rewrite a dataset under a new prefix, never "
        "in place under a running job",
        url,
    )


EARLIER = "this process read it earlier at"
ON_BOARD = "another process of this job read it at"


def refused(url: str, pin: str, how: str = EARLIER) -> ObjectChangedError:
    """A read conditional on the version this job read first was refused: the server holds
    another (its identity never came back). ``how``: where that first version was read."""
    return rewritten(url, pin, "another", how)


class Board:
    """The versions fixed by the processes of one dataset object on this node (see the
    module's docstring): ``path`` is its directory, made at the first claim. A DataLoader
    worker's copy of a dataset (pickled) has the same path: its loader's board."""

    def __init__(self, path: str) -> None:
        self.path = path

    @classmethod
    def new(cls, root: str) -> Board:
        """A board of its own for a dataset built now, under the cache root ``root``."""
        return cls(os.path.join(root, ".astream", "versions", uuid.uuid4().hex))

    def _file(self, key: Key) -> str:
        name = hashlib.sha256(f"{key[0]}\0{key[1]}".encode()).hexdigest()[:40]
        return os.path.join(self.path, name)

    def lookup(self, key: Key) -> str | None:
        """The version of ``key`` a process of this dataset fixed, if one did."""
        try:
            return os.readlink(self._file(key))
        except OSError:  # none yet; or no board here (a read-only cache): as without one
            return None

    def claim(self, key: Key, version: str) -> str:
        """Put ``version`` on the board for ``key`` unless a version is there already;
        returns the board's version (``version`` when this call put it there). An entry is a
        symbolic link whose target is the version (never followed): made in one step, so a
        reader never sees it partly written, of two processes claiming at once exactly one
        wins, and it takes an inode but no data block."""
        path = self._file(key)
        for _ in range(2):
            try:
                os.symlink(version, path)
                return version
            except FileExistsError:
                theirs = self.lookup(key)
                return version if theirs is None else theirs
            except FileNotFoundError:  # the first claim (or a copy outlived the board)
                try:
                    os.makedirs(self.path, exist_ok=True)
                except OSError:
                    return version
            except OSError:  # a cache where nothing can be created: as without a board
                return version
        return version

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class Versions:
    """The version of each indexed-identity-less object this process has read or adopted
    from its dataset's :class:`Board` (see the module's docstring). Lives in one process:
    never pickled; what it shares goes through the board."""

    def __init__(self, board: Board | None = None) -> None:
        self.board = board
        self._of: dict[Key, str] = {}
        self._adopted: set[Key] = set()  # versions taken from the board, not read here
        # read by ranges here, its cache file not yet compared: key -> (path, size, url)
        self._unchecked: dict[Key, tuple[str, int, str]] = {}
        # keep() from the loop thread (reads, downloads) and the consumer's thread (hand-over)
        self._lock = threading.Lock()

    def of(self, key: Key) -> str | None:
        """The version of ``key`` this job reads: the one this process fixed, else the one
        another process of its dataset put on the board (adopted here from now on)."""
        v = self._of.get(key)
        if v is None and self.board is not None:
            v = self.board.lookup(key)
            if v is not None:
                with self._lock:
                    if key not in self._of:
                        self._of[key] = v
                        self._adopted.add(key)
                    v = self._of[key]
        return v

    def how(self, key: Key) -> str:
        """Where the version of ``key`` this process holds was read (for error messages)."""
        return ON_BOARD if key in self._adopted else EARLIER

    def keep(self, key: Key, seen: Iterable[str], url: str, how: str = "it was read at") -> None:
        """Record the versions a read of ``key`` named (``seen``): the first one ever is kept
        (and put on the board, unless the board holds another: an ObjectChangedError); any
        other is an ObjectChangedError (``how`` says where the first came from)."""
        fresh = None
        with self._lock:
            have = self._of.get(key)
            if have is not None and key in self._adopted:
                how = ON_BOARD
            for v in seen:
                if have is None:
                    have = fresh = self._of[key] = v
                elif not _same(have, v):
                    raise rewritten(url, have, v, how)
        if fresh is not None and self.board is not None:
            theirs = self.board.claim(key, fresh)
            if not _same(theirs, fresh):
                with self._lock:  # the job's version is the board's, whatever was read here
                    self._of[key] = theirs
                    self._adopted.add(key)
                raise rewritten(url, theirs, fresh, ON_BOARD)

    def subset(self, keys: Iterable[Key]) -> dict[Key, str]:
        return {k: self._of[k] for k in keys if k in self._of}

    async def read(
        self,
        store: Any,
        remote: str,
        key: str,
        start: int,
        end: int,
        etag: str | None,
        cached: tuple[str, int] | None = None,
    ) -> bytes:
        """Bytes ``[start, end)`` of ``key``: conditional on ``etag`` (an indexed identity)
        when given, else on the version this process read first, else unconditional with the
        version the server names kept. ``cached``: the (path, size) of the object's file in
        the cache, to be compared once it is there (:meth:`expect_file`)."""
        if etag is not None:
            data: bytes = await store.get_range(key, start, end, etag=etag)
            return data
        k = (remote, key)
        if cached is not None:
            self.expect_file(k, cached[0], cached[1], store.url_for(key))
        pin = self.of(k)
        if pin is not None:
            try:
                data = await store.get_range(key, start, end, etag=pin)
            except ObjectChangedError as exc:
                raise refused(store.url_for(key), pin, self.how(k)) from exc
            return data
        seen: list[str] = []
        data = await store.get_range(key, start, end, seen=seen)
        self.keep(k, seen, store.url_for(key))
        return data

    def record(self, path: str, key: Key) -> None:
        """Mark the file at ``path`` (a shard just downloaded, not yet published) with the
        version of ``key`` it holds; nothing where the file system takes no attributes."""
        v = self._of.get(key)
        if v is None:
            return
        try:
            os.setxattr(path, XATTR, v.encode())
        except OSError:
            pass  # e.g. ENOTSUP: the file is trusted as before (see the module's docstring)

    def check_file(self, path: str, key: Key, url: str) -> None:
        """Before this process first reads the cached file at ``path``: when this job read
        ``key`` already (by ranges here, or in another process of its dataset: the board), the
        file must hold that version (when the file names one)."""
        pin = self.of(key)
        if pin is None:  # no version read (the server names none): nothing to compare
            with self._lock:
                self._unchecked.pop(key, None)
            return
        try:
            v = os.getxattr(path, XATTR).decode()
        except OSError as exc:
            if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
                raise
            v = None  # a file that names no version: nothing to compare, now or later
        with self._lock:
            self._unchecked.pop(key, None)
        if v is not None and not _same(pin, v):
            how = ON_BOARD if key in self._adopted else "this process read it by ranges at"
            raise rewritten(url, pin, v, how)

    def expect_file(self, key: Key, path: str, size: int, url: str) -> None:
        """``key`` was read by ranges here and its file (``path``, ``size`` bytes) may appear
        in the cache, downloaded by any process of the node: :meth:`sweep` compares it then,
        even if this process never opens it (its other samples are another worker's)."""
        with self._lock:
            self._unchecked.setdefault(key, (path, size, url))

    def sweep(self) -> None:
        """Compare every file expected by :meth:`expect_file` that is now complete in the
        cache with the version read here: an ObjectChangedError when it holds another. A
        loader's process calls this before it hands out each batch, and every process before
        it opens a shard, so a batch with samples of a file of another version than the
        ranges read of it is never handed out."""
        if not self._unchecked:
            return
        with self._lock:
            items = list(self._unchecked.items())
        for key, (path, size, url) in items:
            try:
                if os.stat(path).st_size != size:
                    continue
            except FileNotFoundError:
                continue
            self.check_file(path, key, url)

    def unchecked(self) -> list[Key]:
        """The objects read by ranges here whose cache files were not compared yet."""
        with self._lock:
            return list(self._unchecked)
