"""The node cache's byte budget (``runtime/cache.py``) in one process, on real files: what
counts against ``cache_limit``, when a reservation evicts, waits or refuses (with its exact
message), and the temporary files of dead downloads. Multi-process behaviour (pins held by
other processes, live downloads) is in ``tests/reliability/test_concurrency.py``."""

from __future__ import annotations

import asyncio
import errno
import os

import pytest

from astream.errors import AstreamError, CacheError
from astream.runtime.cache import TMP_MARK, CacheSpace, ShardFiles, unlink_shard
from astream.runtime.diskerror import disk_error
from astream.runtime.locks import FileLock


def _put(path: str, n: int, mtime: float | None = None) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x" * n)
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def _reserve(space: CacheSpace, need: int, make: str | None = None, block: bool = True) -> bool:
    def materialize() -> None:
        if make is not None:
            _put(make, need)

    return asyncio.run(space.reserve(need, materialize, block=block))


def test_usage_counts_every_file_but_indexes_and_astream_metadata(tmp_path: object) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")  # type: ignore[operator]
    _put(os.path.join(a, "shard.00000.mds"), 100)
    _put(os.path.join(a, "sub", "shard.00001.mds"), 30)
    _put(os.path.join(a, "index.json"), 7)  # not counted, at any depth
    _put(os.path.join(a, "sub", "index.json"), 9)
    _put(os.path.join(a, ".astream", "locks", "x.lock"), 50)  # metadata: not counted
    _put(os.path.join(b, "shard.00000.mds" + TMP_MARK + "123"), 11)  # a download in flight
    _put(os.path.join(b, "other.bin"), 5)  # a file astream does not know still takes room
    space = CacheSpace([a, b, os.path.join(str(tmp_path), "missing")], limit=None)
    assert space.usage() == 100 + 30 + 11 + 5
    scan = space._scan()
    assert sorted(os.path.basename(p) for p in scan.tmps) == ["shard.00000.mds" + TMP_MARK + "123"]
    assert sorted(os.path.relpath(p, str(tmp_path)) for p in scan.present) == [
        "a/shard.00000.mds", "a/sub/shard.00001.mds", "b/other.bin",
    ]  # fmt: skip


def test_no_limit_never_scans_nor_evicts(tmp_path: object) -> None:
    root = str(tmp_path)
    _put(os.path.join(root, "s.mds"), 10)
    space = CacheSpace([root], limit=None)
    space.register([ShardFiles(root, "s.mds", 10)])
    assert _reserve(space, 10**12, None, block=False) is True
    assert os.path.exists(os.path.join(root, "s.mds")) and space.evictions == 0
    made: list[int] = []
    assert space.take_free(10**12, lambda: made.append(1)) is True and made == [1]


def test_a_reservation_larger_than_the_limit_is_refused_by_name(tmp_path: object) -> None:
    space = CacheSpace([str(tmp_path)], limit=1000)
    msg = (
        r"^cache_limit=1000 bytes cannot hold one shard of 1001 bytes \(raw \+ compressed\); "
        r"raise cache_limit to at least 1001$"
    )
    with pytest.raises(CacheError, match=msg):
        _reserve(space, 1001)
    assert _reserve(space, 1000, os.path.join(str(tmp_path), "s.mds")) is True  # exactly fits
    assert space.usage() == 1000


def test_prefetch_takes_free_room_only_and_demand_evicts(tmp_path: object) -> None:
    root = str(tmp_path)
    old = ShardFiles(root, "old.mds", 600)
    _put(old.raw_path, 600, mtime=1_000_000)
    space = CacheSpace([root], limit=1000)
    space.register([old])
    # 400 free: a prefetch of 401 does not evict and gets nothing; 400 fits
    assert _reserve(space, 401, os.path.join(root, "p.mds"), block=False) is False
    assert os.path.exists(old.raw_path) and space.evictions == 0
    assert _reserve(space, 400, os.path.join(root, "p.mds"), block=False) is True
    assert space.usage() == 1000
    # full: a demand read evicts the registered shard (the unregistered p.mds is not astream's)
    assert _reserve(space, 600, os.path.join(root, "d.mds")) is True
    assert not os.path.exists(old.raw_path) and space.evictions == 1
    assert space.usage() == 1000
    # take_free never evicts: no room left
    assert space.take_free(1, lambda: None) is False
    with pytest.raises(CacheError, match=r"^cache_limit=1000 bytes is full of files that cannot "
                       r"be evicted .* and 1 more bytes are needed under "):  # fmt: skip
        _reserve(space, 1)


def test_local_only_and_pinned_shards_are_never_evicted(tmp_path: object) -> None:
    root = str(tmp_path)
    local_only = ShardFiles(root, "l.mds", 500, evictable=False)
    pinned = ShardFiles(root, "p.mds", 500)
    _put(local_only.raw_path, 500, mtime=1)
    _put(pinned.raw_path, 500, mtime=2)
    space = CacheSpace([root], limit=1000)
    space.register([local_only, pinned])
    space.note_pin(pinned.pin_lock, 1)
    space.note_pin(pinned.pin_lock, 1)
    space.note_pin(pinned.pin_lock, -1)  # still held once
    with FileLock(pinned.pin_lock) as pin:
        pin.shared()
        with pytest.raises(CacheError, match="is full of files that cannot be evicted"):
            _reserve(space, 10)
    assert os.path.exists(local_only.raw_path) and os.path.exists(pinned.raw_path)
    space.note_pin(pinned.pin_lock, -1)
    assert space._own_pins == {}
    assert _reserve(space, 10, os.path.join(root, "n.mds")) is True  # pin released: evicted
    assert os.path.exists(local_only.raw_path) and not os.path.exists(pinned.raw_path)


def test_a_dead_downloads_temporary_files_are_reclaimed_a_live_ones_are_not(
    tmp_path: object,
) -> None:
    root = str(tmp_path)
    sf = ShardFiles(root, "s.mds", 400, zip="s.mds.zstd", zip_size=300)
    dead = sf.raw_path + TMP_MARK + "1"
    _put(dead, 400)
    space = CacheSpace([root], limit=1000)
    space.register([sf])
    assert space._owner_of_tmp(dead) is sf and space._owner_of_tmp(dead + "x") is sf
    assert space._owner_of_tmp(os.path.join(root, "other" + TMP_MARK + "1")) is None
    assert sf.lock_of_tmp(dead) == sf.download_lock and sf.footprint() == 700
    with FileLock(sf.download_lock) as live:  # a download in progress holds its lock
        live.exclusive()
        assert _reserve(space, 700, os.path.join(root, "a.mds"), block=False) is False
        assert os.path.exists(dead)
    assert _reserve(space, 700, os.path.join(root, "a.mds"), block=False) is True
    assert not os.path.exists(dead) and space.usage() == 700


def test_eviction_deletes_every_file_of_the_shard(tmp_path: object) -> None:
    root = str(tmp_path)
    sf = ShardFiles(root, "s.mds", 100, zip="s.mds.zstd", zip_size=40, side="s.mds.side")
    for p, n in ((sf.raw_path, 100), (sf.zip_path, 40), (sf.side_path, 25)):
        _put(str(p), n)
    assert unlink_shard(sf) == 165
    assert os.listdir(root) == []
    assert unlink_shard(sf) == 0  # already gone
    source = ShardFiles(root, "t.mds", 100, zip="t.mds.zstd", zip_size=40, zip_is_source=True)
    _put(source.raw_path, 100)
    _put(str(source.zip_path), 40)
    assert unlink_shard(source) == 100 and os.listdir(root) == ["t.mds.zstd"]


@pytest.mark.parametrize(
    ("code", "what"),
    [
        (errno.ENOSPC, "no space left on device"),
        (errno.EDQUOT, "disk quota exceeded"),
        (errno.EFBIG, "file too large"),
        (errno.EACCES, "cannot write: permission denied"),
        (errno.EPERM, "cannot write: operation not permitted"),
        (errno.EROFS, "cannot write: read-only file system"),
    ],
)
def test_disk_errors_name_the_directory_the_file_and_the_bytes(code: int, what: str) -> None:
    exc = OSError(code, os.strerror(code))
    err = disk_error(exc, "/c/s.mds", root="/c", need=123, limit=456)
    assert isinstance(err, CacheError)
    hint = (
        "free space there, point `local` at a bigger disk, or set cache_limit below the free space"
        if "cannot write" not in what
        else "make it writable by this user, or point `local` at a writable directory"
    )
    assert str(err) == (
        f"cache directory /c: {what} writing /c/s.mds (123 bytes needed, cache_limit=456); {hint}"
    )
    nolimit = disk_error(exc, "/c/s.mds", root="/c", need=123, limit=None)
    assert "(123 bytes needed, no cache_limit);" in str(nolimit)
    assert "needed" not in str(disk_error(exc, "/c/s.mds", root="/c", need=None, limit=456))


def test_other_errors_are_not_disk_errors() -> None:
    assert disk_error(OSError(errno.EIO, "io"), "/c/s", root="/c", need=1, limit=None) is None
    already = CacheError("x")
    assert isinstance(already, AstreamError)
    assert disk_error(already, "/c/s", root="/c", need=1, limit=None) is None  # type: ignore[arg-type]
