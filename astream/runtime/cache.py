"""The node-wide disk cache: which shard files may stay, and who may write the next one.

Theory of operation
-------------------
A *cache* is the set of ``local`` directories of one dataset (one per stream, split included).
Every process of the node that reads the dataset -- ranks and their DataLoader workers, and other
jobs pointed at the same directories -- shares it through the file system only:

- **Bytes.** Usage is what a directory listing says: the sum of ``st_size`` of every file under
  the roots, outside ``.astream/``, except the streams' ``index.json`` files (a few KB each,
  written once at start, before any limit could be enforced against them). A download
  *reserves* its bytes by creating its temporary files at full size (``ftruncate``) while
  holding the roots' ``cache.lock`` files, and renames them to their final names under the same
  lock, so two processes can never both believe the same free bytes are theirs, a scan never
  misses a file in the middle of its rename, and usage never exceeds ``limit``.
- **Pins.** A process reading a shard holds a shared flock on the shard's ``.pin`` lock file. An
  evictor may delete a shard only while holding that lock exclusively, which it tries without
  blocking: a pinned shard is skipped. A killed reader's pin vanishes with it.
- **Eviction.** ``policy="next_use"`` (the default of the dataset's ``cache_policy``): the
  shard the node reads furthest in the future goes first (Belady's rule); the process asks its
  ``future`` hook (set by the engine while an iteration runs, see
  :class:`astream.core.eviction.NodeFuture`) for the next use of every candidate, and shards
  not read again, or with no known future (random access, another job), go least recently used
  first. ``policy="lru"``: least recently used first, by the shard file's mtime (touched on
  every pin). One rule for both: :func:`astream.core.eviction.eviction_order`, which the
  planner's replay uses too. Only shards of streams that have a remote copy are candidates,
  and only files named in their index: a dataset whose only copy is local is never evicted,
  nor are files astream doesn't know.
- **Waiting for space.** If nothing unpinned can be evicted, a blocking reservation waits -- in
  the kernel, not by polling -- for the least recently used shard pinned by *another* process
  to be released, evicts it, and tries again; or for another process's in-flight download to
  finish. Readers hold at most one pin while they wait for nothing (see ``reader.py``), so this
  cannot deadlock. With nothing to wait for, the limit is simply too small: :class:`CacheError`.
- **Disk errors.** A full or unwritable directory (ENOSPC, EDQUOT, EFBIG, EACCES, EPERM,
  EROFS) is a :class:`CacheError` naming the directory, the bytes needed and ``cache_limit``
  (:func:`astream.runtime.diskerror.disk_error`); the operation's temporary files are removed,
  so nothing partial is ever trusted.
- **Crashes.** Temporary files carry ``.tmp-`` in their name and are only ever renamed into place
  once complete and verified. A temporary file whose shard's download lock is free belongs to a
  dead process: any reservation that needs room deletes it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from astream.core.eviction import NEVER, check_policy, eviction_order
from astream.errors import CacheError
from astream.runtime.binding import hold_leases
from astream.runtime.locks import FileLock, lock_path, waiters

__all__ = ["CacheSpace", "ShardFiles", "TMP_MARK", "scan", "unlink_shard"]

TMP_MARK = ".tmp-"


@dataclass(frozen=True)
class ShardFiles:
    """The files one shard may have in the cache, relative to its stream's local root."""

    root: str
    raw: str
    raw_size: int
    zip: str | None = None
    zip_size: int | None = None
    evictable: bool = True
    zip_is_source: bool = False  # local-only compressed data: the zip is the only copy
    # a file derived from the raw one (a Parquet row group's decoded columns,
    # parquet/io_rowgroup.py): counted like any file, evicted with the raw file, written
    # under ``side_lock`` (not the download lock)
    side: str | None = None

    @property
    def raw_path(self) -> str:
        return os.path.join(self.root, self.raw)

    @property
    def zip_path(self) -> str | None:
        return None if self.zip is None else os.path.join(self.root, self.zip)

    @property
    def pin_lock(self) -> str:
        return lock_path(self.root, self.raw, "pin")

    @property
    def download_lock(self) -> str:
        return lock_path(self.root, self.raw, "dl")

    @property
    def side_path(self) -> str | None:
        return None if self.side is None else os.path.join(self.root, self.side)

    @property
    def side_lock(self) -> str:
        return lock_path(self.root, self.raw, "side")

    def lock_of_tmp(self, tmp: str) -> str:
        """The lock a live writer of temporary file ``tmp`` (one of this shard's) holds."""
        side = self.side_path
        if side is not None and tmp.startswith(side + TMP_MARK):
            return self.side_lock
        return self.download_lock

    def footprint(self) -> int:
        """Bytes this shard needs on disk while it is being fetched."""
        return self.raw_size + (self.zip_size or 0)


@dataclass
class _Scan:
    usage: int = 0
    present: dict[str, float] = field(default_factory=dict)  # abs path -> mtime
    tmps: list[str] = field(default_factory=list)
    listed: bool = False


def scan(roots: Iterable[str], *, unreadable_ok: bool = False) -> _Scan:
    """What ``cache_limit`` counts under ``roots``: every file but ``index.json`` files and
    what lies under ``.astream/``, temporary files of downloads in flight included. A root that
    is missing is empty; one that cannot be read raises, unless ``unreadable_ok`` (a reader
    outside the job, ``astream top``), which skips it. ``listed``: whether any root was read."""
    out = _Scan()
    stack = [os.path.abspath(r) for r in roots]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except FileNotFoundError:
            continue
        except OSError:
            if not unreadable_ok:
                raise
            continue
        out.listed = True
        listed = {e.name for e in entries}
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                if e.name != ".astream":
                    stack.append(e.path)
                continue
            if e.name == "index.json":
                continue
            path = e.path
            try:
                st = e.stat(follow_symlinks=False)
            except FileNotFoundError:
                # Gone since the listing: deleted, or a finished download renamed to its
                # final name, which the listing may not hold yet. Count the final file. A name
                # that is only the mark has no final name (``name[:0]`` would be the directory).
                cut = e.name.rfind(TMP_MARK)
                if cut <= 0 or e.name[:cut] in listed:
                    continue
                path = os.path.join(d, e.name[:cut])
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                listed.add(e.name[:cut])
            out.usage += st.st_size
            if TMP_MARK in os.path.basename(path):
                out.tmps.append(path)
            else:
                out.present[path] = st.st_mtime
    return out


class CacheSpace:
    """The byte budget over a dataset's local roots, shared by every process of the node."""

    def __init__(self, roots: Iterable[str], limit: int | None, policy: str = "next_use") -> None:
        self.roots = sorted({os.path.abspath(r) for r in roots})
        self.limit = limit
        self.policy = check_policy(policy)
        # next use (in the node's ticks, NEVER: none known) of each file; set by the engine
        # while an iteration runs, None otherwise (then eviction is least recently used)
        self.future: Callable[[list[ShardFiles]], Sequence[int]] | None = None
        hold_leases(self, self.roots)  # a lease per process that uses the cache, workers too
        self._shards: list[ShardFiles] = []
        self._by_path: dict[str, ShardFiles] = {}
        self._own_pins: dict[str, int] = {}
        self.evictions = 0

    def register(self, shards: Iterable[ShardFiles]) -> None:
        for sf in shards:
            self._shards.append(sf)
            self._by_path[sf.raw_path] = sf
            if sf.zip_path is not None:
                self._by_path[sf.zip_path] = sf
            if sf.side_path is not None:
                self._by_path[sf.side_path] = sf

    def _owner_of_tmp(self, path: str) -> ShardFiles | None:
        cut = path.rfind(TMP_MARK)
        return None if cut < 0 else self._by_path.get(path[:cut])

    # -- synchronous use by a reader (a derived file, see ``ShardFiles.side``) ------------------
    def take_free(self, need: int, materialize: Callable[[], None]) -> bool:
        """Call ``materialize`` (which creates files holding ``need`` bytes) if that room is
        free right now, under the cache lock; never evicts nor waits (False: no room)."""
        if self.limit is None:
            materialize()
            return True
        if need > self.limit:
            return False
        return self._try_reserve(need, materialize, evict=False)[0]

    def commit_now(self, fn: Callable[[], None]) -> None:
        """:meth:`commit`, from synchronous code."""
        if self.limit is None:
            fn()
        else:
            self._locked(fn)

    # -- pins held by this process (so that we never wait on ourselves) ---------------------
    def note_pin(self, path: str, delta: int) -> None:
        n = self._own_pins.get(path, 0) + delta
        if n > 0:
            self._own_pins[path] = n
        else:
            self._own_pins.pop(path, None)

    # -- scanning ------------------------------------------------------------------------------
    def _scan(self) -> _Scan:
        return scan(self.roots)

    def usage(self) -> int:
        """Bytes under the roots right now (what the limit bounds)."""
        return self._scan().usage

    # -- the global lock ----------------------------------------------------------------------
    def _lock_all(self) -> list[FileLock]:
        held: list[FileLock] = []
        try:
            for r in self.roots:
                lk = FileLock(os.path.join(r, ".astream", "cache.lock"))
                lk.exclusive()
                held.append(lk)
        except BaseException:
            for lk in held:
                lk.release()
            raise
        return held

    async def commit(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` (a rename into the cache) under the cache lock, so that a scan never sees
        a file between its temporary and its final name."""
        if self.limit is None:
            fn()
            return
        await asyncio.get_running_loop().run_in_executor(waiters(), self._locked, fn)

    def _locked(self, fn: Callable[[], None]) -> None:
        held = self._lock_all()
        try:
            fn()
        finally:
            for lk in held:
                lk.release()

    # -- reservation ---------------------------------------------------------------------------
    async def reserve(self, need: int, materialize: Callable[[], None], *, block: bool) -> bool:
        """Make room for ``need`` bytes and call ``materialize`` (which creates the files that
        hold them) while no other process can take the same room.

        Returns False if ``block`` is false and the room is not free without waiting. A
        non-blocking reservation (a prefetch) also never evicts: it takes free room only, so
        reading ahead cannot push out shards a consumer is about to read.
        """
        if self.limit is None:
            materialize()
            return True
        if need > self.limit:
            raise CacheError(
                f"cache_limit={self.limit} bytes cannot hold one shard of {need} bytes "
                f"(raw + compressed); raise cache_limit to at least {need}"
            )
        loop = asyncio.get_running_loop()
        while True:
            verdict, wait_on = await loop.run_in_executor(
                waiters(), self._try_reserve, need, materialize, block
            )
            if verdict:
                return True
            if not block:
                return False
            if wait_on is None:
                raise CacheError(
                    f"cache_limit={self.limit} bytes is full of files that cannot be evicted "
                    f"(local-only data, other datasets' files or this process's own pins) and "
                    f"{need} more bytes are needed under {', '.join(self.roots)}"
                )
            lk = FileLock(wait_on)
            await lk.exclusive_async()  # the kernel wakes us when its holder lets go
            lk.release()

    def _try_reserve(
        self, need: int, materialize: Callable[[], None], evict: bool = True
    ) -> tuple[bool, str | None]:
        assert self.limit is not None
        held = self._lock_all()
        try:
            scan = self._scan()
            if scan.usage + need > self.limit:
                scan.usage -= self._clean_stale_tmps(scan.tmps)
            wait_on: str | None = None
            if evict and scan.usage + need > self.limit:
                freed, wait_on = self._evict(scan, scan.usage + need - self.limit)
                scan.usage -= freed
            if scan.usage + need > self.limit:
                return False, wait_on
            materialize()
            return True, None
        finally:
            for lk in held:
                lk.release()

    def _clean_stale_tmps(self, tmps: list[str]) -> int:
        freed = 0
        by_lock: dict[str, list[str]] = {}
        for path in tmps:
            sf = self._owner_of_tmp(path)
            if sf is not None:
                by_lock.setdefault(sf.lock_of_tmp(path), []).append(path)
        for lock, paths in by_lock.items():
            lk = FileLock(lock)
            if not lk.try_exclusive():
                continue  # a live download owns these
            try:
                for p in paths:
                    freed += _unlink(p)
            finally:
                lk.release()
        return freed

    def _evict(self, scan: _Scan, excess: int) -> tuple[int, str | None]:
        """Evict unpinned shards, in :meth:`_victims` order, until ``excess`` bytes are freed.

        Returns bytes freed, and the pin lock of the first such shard pinned by another process
        (what a blocking reservation may wait on) when not enough could be freed.
        """
        cands: list[tuple[float, ShardFiles]] = []
        for sf in self._shards:
            if not sf.evictable:
                continue
            t = scan.present.get(sf.raw_path)
            if t is None and sf.zip_path is not None and not sf.zip_is_source:
                t = scan.present.get(sf.zip_path)
            if t is None and sf.side_path is not None:  # left without its raw file
                t = scan.present.get(sf.side_path)
            if t is not None:
                cands.append((t, sf))
        freed = 0
        busy: str | None = None
        for sf in self._victims(cands):
            if freed >= excess:
                break
            lk = FileLock(sf.pin_lock)
            if not lk.try_exclusive():
                if busy is None and sf.pin_lock not in self._own_pins:
                    busy = sf.pin_lock
                continue
            try:
                freed += unlink_shard(sf)
                self.evictions += 1
            finally:
                lk.release()
        if freed >= excess:
            return freed, None
        if busy is None:
            busy = self._live_download(scan)
        return freed, busy

    def _victims(self, cands: list[tuple[float, ShardFiles]]) -> list[ShardFiles]:
        """Candidates (mtime, files), first to evict first (see the module docstring)."""
        files = [sf for _, sf in cands]
        future = self.future
        if self.policy == "next_use" and future is not None and files:
            nxt: Sequence[int] = future(files)
        else:
            nxt = [NEVER] * len(files)
        return [files[i] for i in eviction_order(self.policy, nxt, [t for t, _ in cands])]

    def _live_download(self, scan: _Scan) -> str | None:
        # Downloads of this process count too: they run on the loop independently of the
        # waiter (who holds no download lock with reserved bytes while it waits).
        for path in scan.tmps:
            sf = self._owner_of_tmp(path)
            if sf is not None:
                return sf.lock_of_tmp(path)
        return None


def unlink_shard(sf: ShardFiles) -> int:
    """Delete a shard's cached files (raw, compressed unless it is the source, derived);
    returns the bytes freed. The caller holds the shard's pin lock exclusively."""
    freed = _unlink(sf.raw_path)
    if sf.zip_path is not None and not sf.zip_is_source:
        freed += _unlink(sf.zip_path)
    if sf.side_path is not None:
        freed += _unlink(sf.side_path)
    return freed


def _unlink(path: str) -> int:
    try:
        size = os.stat(path).st_size
        os.unlink(path)
        return size
    except FileNotFoundError:
        return 0
