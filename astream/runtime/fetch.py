"""Bringing one shard from its remote store into the cache, once per node.

Theory of operation
-------------------
``ShardFetcher.download(shard)`` guarantees that, when it returns True, the shard's raw file is
complete under its final name. The steps, each safe against a crash at any instant:

1. Take the shard's download lock (flock, exclusive; waiting happens in a thread). Whoever holds
   it is the only process of the node fetching that shard; everyone else waits for it instead of
   fetching again, then finds the file present.
2. With the lock held, any ``<file>.tmp-*`` of this shard is a dead process's leftover: delete.
3. Reserve the bytes (raw + compressed) in the :class:`CacheSpace` by creating the temporary
   files at full size, then fetch into them: one GET for a small object, parallel ranged GETs
   of ``part_size`` for a large one, each written at its offset with ``pwrite``. A prefetch
   passes :class:`Streams` instead: its object is read in that many near-equal ranged GETs,
   each holding one of the prefetcher's shared stream slots while it runs.
4. Check the size, and the hash when ``validate_hash`` names one; on a mismatch delete and fetch
   once more, then raise :class:`IntegrityError`. Decompress into the raw temporary file.
5. ``os.replace`` the raw temporary file to its final name (atomic), keep or drop the compressed
   one (``keep_zip``), release the lock. A file under its final name is therefore always whole.
"""

from __future__ import annotations

import asyncio
import mmap
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from astream.core.compression import decompress
from astream.core.hashing import hexdigest
from astream.errors import FormatError, IntegrityError, ObjectChangedError, ObjectNotFoundError
from astream.runtime.cache import TMP_MARK, CacheSpace, ShardFiles
from astream.runtime.diskerror import disk_error
from astream.runtime.gets import Gets, Slots, Streams, even_parts, fixed_parts
from astream.runtime.locks import FileLock
from astream.runtime.stats import Stats
from astream.runtime.versions import Board, Versions, refused
from astream.storage.base import ObjectStore

__all__ = ["RemoteShard", "ShardFetcher", "Slots", "Streams", "is_complete"]


@dataclass(frozen=True)
class RemoteShard:
    """Everything needed to fetch one shard: its cache files and where its bytes live."""

    files: ShardFiles
    remote: str | None  # root URL of the stream's remote copy; None for local-only data
    raw_key: str
    zip_key: str | None
    compression: str | None
    raw_hashes: dict[str, str]
    zip_hashes: dict[str, str]
    # a split-format (json/csv/tsv/xsv) shard's meta file: fetched before the data file
    meta: RemoteShard | None = None
    validate_hash: str | None = None  # its stream's; None: the fetcher's
    keep_zip: bool | None = None  # its stream's; None: the fetcher's
    # a Parquet row group: these [start, end) ranges of raw_key, concatenated, are the file
    ranges: tuple[tuple[int, int], ...] | None = None
    # the object's indexed identity: every ranged GET is conditional on it (a Parquet row group)
    etag: str | None = None

    def url(self) -> str:
        if self.remote is None:
            return self.files.raw_path
        return f"{self.remote.rstrip('/')}/{self.zip_key or self.raw_key}"


def is_complete(path: str, size: int) -> bool:
    try:
        return os.stat(path).st_size == size
    except FileNotFoundError:
        return False


class ShardFetcher:
    def __init__(
        self,
        space: CacheSpace,
        stats: Stats,
        store_for: Callable[[str], ObjectStore],
        *,
        validate_hash: str | None = None,
        keep_zip: bool = False,
        part_size: int = 8 << 20,
        part_concurrency: int = 8,
        board: Board | None = None,
    ) -> None:
        self.space = space
        self.stats = stats
        self.store_for = store_for
        self.validate_hash = validate_hash
        self.keep_zip = keep_zip
        self.part_size = part_size
        self.part_concurrency = part_concurrency
        # the version of each object without an indexed identity this process read first
        # (and those its dataset's other processes fixed: ``board``, runtime/versions.py)
        self.versions = Versions(board)

    async def download(
        self, shard: RemoteShard, *, block: bool = True, streams: Streams | None = None
    ) -> bool:
        """Make the shard's raw file present. False only if ``block`` is false and the cache
        has no room without waiting, or another process is fetching the shard already.
        ``streams``: how a prefetch reads the object (None: parts of ``part_size``).

        A full or unwritable cache directory (ENOSPC, EDQUOT, EFBIG, EACCES, EPERM, EROFS from
        a lock, a temporary file, a write, an inflate or a rename) is a :class:`CacheError`
        naming the directory, the bytes needed and ``cache_limit``; the temporary files are
        gone by then, so nothing partial is ever trusted."""
        try:
            return await self._download(shard, block=block, streams=streams)
        except OSError as exc:
            files = shard.files
            err = disk_error(
                exc,
                exc.filename or files.raw_path,
                root=files.root,
                need=files.footprint(),
                limit=self.space.limit,
            )
            if err is None:
                raise
            raise err from exc

    async def _download(
        self, shard: RemoteShard, *, block: bool = True, streams: Streams | None = None
    ) -> bool:
        """Make the shard's raw file present. False only if ``block`` is false and the cache
        has no room without waiting, or another process is fetching the shard already."""
        if shard.meta is not None and not await self.download(shard.meta, block=block):
            return False  # a split shard: its (small) meta file first, then its data file
        files = shard.files
        if is_complete(files.raw_path, files.raw_size):
            return True
        if (
            shard.remote is None
            and files.zip_path is not None
            and is_complete(files.zip_path, files.zip_size or -1)
        ):
            return await self._inflate_local(shard, block=block)
        if shard.remote is None:
            if os.path.exists(files.raw_path):
                size = os.path.getsize(files.raw_path)
                raise FormatError(
                    f"shard is {size} bytes, index says {files.raw_size}"
                    + (" (truncated)" if size < files.raw_size else ""),
                    files.raw_path,
                )
            raise ObjectNotFoundError(
                "shard file is missing from the local dataset and no remote was given",
                files.raw_path,
            )
        _check_inside(files)
        dl = FileLock(files.download_lock)
        if not block:
            # A prefetch never queues behind another process's download of the same shard
            # (workers of a rank read the same region): it moves on to the next shard, and
            # whoever needs this one later waits for that download then.
            if not dl.try_exclusive():
                return False
        else:
            await dl.exclusive_async()
        try:
            if is_complete(files.raw_path, files.raw_size):
                return True  # another process fetched it while we waited
            self._drop_tmps(files)
            for attempt in range(2):
                ok = await self._attempt(shard, block=block, last=attempt == 1, streams=streams)
                if ok is None:
                    self.stats.integrity_retries += 1
                    continue
                return ok
            raise AssertionError("unreachable")
        finally:
            dl.release()

    async def _inflate_local(self, shard: RemoteShard, *, block: bool) -> bool:
        """A local-only compressed shard: decompress the local file into the raw one (kept
        beside it; both stay, since the compressed file is the only copy of the data)."""
        files = shard.files
        dl = FileLock(files.download_lock)
        await dl.exclusive_async()
        try:
            if is_complete(files.raw_path, files.raw_size):
                return True
            self._drop_tmps(files)
            raw_tmp = f"{files.raw_path}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"

            def materialize() -> None:
                with open(raw_tmp, "wb") as f:
                    f.truncate(files.raw_size)

            if not await self.space.reserve(files.raw_size, materialize, block=block):
                return False
            try:
                assert files.zip_path is not None
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, self._inflate, shard, files.zip_path, raw_tmp)
                await self.space.commit(lambda: os.replace(raw_tmp, files.raw_path))
                return True
            finally:
                try:
                    os.unlink(raw_tmp)
                except FileNotFoundError:
                    pass
        finally:
            dl.release()

    def _drop_tmps(self, files: ShardFiles) -> None:
        for path in (files.raw_path, files.zip_path):
            if path is None:
                continue
            d, base = os.path.split(path)
            try:
                names = os.listdir(d)
            except FileNotFoundError:
                os.makedirs(d, exist_ok=True)
                continue
            for n in names:
                if n.startswith(base + TMP_MARK):
                    try:
                        os.unlink(os.path.join(d, n))
                    except FileNotFoundError:
                        pass

    async def _attempt(
        self, shard: RemoteShard, *, block: bool, last: bool, streams: Streams | None = None
    ) -> bool | None:
        """One fetch. True: done; False: no room; None: hash mismatch, try again."""
        files = shard.files
        tag = f"{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        raw_tmp = files.raw_path + tag
        zip_tmp = files.zip_path + tag if files.zip_path is not None else None
        fetched_tmp, fetched_size = (
            (zip_tmp, files.zip_size) if zip_tmp is not None else (raw_tmp, files.raw_size)
        )
        assert fetched_size is not None

        def materialize() -> None:
            for path, size in ((raw_tmp, files.raw_size), (zip_tmp, files.zip_size)):
                if path is not None and size is not None:
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    with open(path, "wb") as f:
                        f.truncate(size)

        if not await self.space.reserve(files.footprint(), materialize, block=block):
            return False
        loop = asyncio.get_running_loop()
        try:
            key = shard.zip_key if shard.zip_key is not None else shard.raw_key
            await self._fetch_into(shard, key, fetched_tmp, fetched_size, streams)
            algo = shard.validate_hash or self.validate_hash
            if algo is not None:
                hashes = shard.zip_hashes if zip_tmp is not None else shard.raw_hashes
                want = hashes.get(algo)
                if want is not None:
                    got = await loop.run_in_executor(None, _hash_file, algo, fetched_tmp)
                    if got != want:
                        if last:
                            raise IntegrityError(
                                f"{algo} of {shard.url()} is {got}, index says "
                                f"{want} (after one re-fetch)"
                            )
                        return None
            if zip_tmp is not None:
                await loop.run_in_executor(None, self._inflate, shard, zip_tmp, raw_tmp)

            keep = self.keep_zip if shard.keep_zip is None else shard.keep_zip

            def publish() -> None:
                os.replace(raw_tmp, files.raw_path)
                if zip_tmp is not None and keep and files.zip_path is not None:
                    os.replace(zip_tmp, files.zip_path)

            await self.space.commit(publish)
            self.stats.shards_fetched += 1
            return True
        finally:
            for path in (raw_tmp, zip_tmp):
                if path is not None:
                    try:
                        os.unlink(path)
                    except FileNotFoundError:
                        pass

    def _inflate(self, shard: RemoteShard, zip_tmp: str, raw_tmp: str) -> None:
        with open(zip_tmp, "rb") as f:
            data = f.read()
        assert shard.compression is not None
        raw = decompress(shard.compression, data, expected_size=shard.files.raw_size)
        if len(raw) != shard.files.raw_size:
            raise FormatError(
                f"decompressed to {len(raw)} bytes, index says {shard.files.raw_size}",
                shard.url(),
            )
        with open(raw_tmp, "r+b") as f:
            f.write(raw)

    async def _fetch_into(
        self, shard: RemoteShard, key: str, path: str, size: int, streams: Streams | None
    ) -> None:
        assert shard.remote is not None
        store = self.store_for(shard.remote)
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            tag = None
            if streams is not None and shard.ranges is None:
                parts = even_parts(size, streams.split)
                slots, tag = streams.slots, streams.tag
            else:
                parts = fixed_parts(shard.ranges or ((0, size),), self.part_size)
                slots = Slots(self.part_concurrency)
            url = store.url_for(key)
            # no indexed identity (an MDS shard): every part, and every resumption of one,
            # must come from one version of the object, the one this process read before if
            # it did (then every part is conditional on it); else the identities the server
            # names are gathered here and compared once all parts are in
            k = (shard.remote, key)
            pin = self.versions.of(k) if shard.etag is None else None
            etag = shard.etag if pin is None else pin
            seen: list[str] | None = [] if etag is None else None
            if not parts:
                return
            gets = Gets(self.stats, store, key, url, fd, slots, etag, seen, shard.remote, tag)
            try:
                await gets.run(parts)
            except ObjectChangedError as exc:
                if pin is None:
                    raise
                raise refused(url, pin, self.versions.how(k)) from exc
            versions = sorted({x.strip('"') for x in seen or ()})
            if len(versions) > 1:
                raise ObjectChangedError(
                    f"rewritten while it downloaded: its parts came from {len(versions)} "
                    f"versions of the object ({', '.join(versions)}), so the file would mix "
                    "them; its samples would no longer be the ones the index numbers: rewrite "
                    "a dataset under a new prefix, never in place under a running job",
                    url,
                )
            if seen:  # one version: the one to read from now on (or another process's, read
                # by ranges while this downloaded: two versions, refused before publishing)
                self.versions.keep(k, seen, url, "this process read it earlier at")
            if shard.etag is None:
                self.versions.record(path, k)
        finally:
            os.close(fd)


def _check_inside(files: ShardFiles) -> None:
    """Refuse to write a shard whose directory resolves outside the cache root: basenames are
    checked when the index is parsed, but a symlink planted in the cache could still redirect."""
    root = os.path.realpath(files.root)
    for path in (files.raw_path, files.zip_path):
        if path is None:
            continue
        where = os.path.realpath(os.path.dirname(path))
        if where != root and not where.startswith(root + os.sep):
            raise FormatError(
                f"shard path leaves the cache directory {root} (resolves into {where})", path
            )


def _hash_file(algo: str, path: str) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return hexdigest(algo, b"")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm, memoryview(mm) as mv:
            return hexdigest(algo, mv)
