"""The node cache's byte budget (``runtime/cache.py``) at its edges, in one process on real
files: exact byte counts at the limit, exact victim sets, which lock a reservation waits on,
which temporary files are reclaimed, and where the cache lock is held.

A second process is played by a second ``FileLock`` in this process: flock locks belong to an
open file description, so two locks on one path conflict even within one process.

The scan's races (a download renamed into place, or a file deleted, between the directory
listing and the ``stat``) are produced for real: ``os.scandir`` is wrapped to list a directory
(sorted by name, so the order is fixed), then rename or delete files, and only then hand the
listing to the scan.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from astream.core.eviction import NEVER
from astream.errors import CacheError, ConfigError
from astream.runtime.binding import Binding, lease_holders, write_binding
from astream.runtime.cache import TMP_MARK, CacheSpace, ShardFiles, scan
from astream.runtime.locks import FileLock

from .test_cache_space import _put


def _maker(path: str, n: int) -> Callable[[], None]:
    return lambda: _put(path, n)


def _free(lock: str) -> bool:
    """Whether nobody holds ``lock`` (taken and released at once)."""
    lk = FileLock(lock)
    if not lk.try_exclusive():
        return False
    lk.release()
    return True


def _cache_lock(root: str) -> str:
    return os.path.join(root, ".astream", "cache.lock")


def _names(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n != ".astream")


# -- ShardFiles ----------------------------------------------------------------------------------
def test_shard_files_paths_locks_and_footprint(tmp_path: Any) -> None:
    root = str(tmp_path)
    locks = os.path.join(root, ".astream", "locks")
    plain = ShardFiles(root, "d/s.mds", 100)
    assert plain.raw_path == os.path.join(root, "d", "s.mds")
    assert plain.zip_path is None and plain.side_path is None
    assert plain.pin_lock == os.path.join(locks, "d%2Fs.mds.pin")
    assert plain.download_lock == os.path.join(locks, "d%2Fs.mds.dl")
    assert plain.side_lock == os.path.join(locks, "d%2Fs.mds.side")
    assert plain.footprint() == 100  # no compressed file: nothing added
    assert plain.lock_of_tmp(plain.raw_path + TMP_MARK + "1") == plain.download_lock
    full = ShardFiles(root, "s.mds", 100, zip="s.mds.zstd", zip_size=40, side="s.mds.cols")
    assert full.footprint() == 140
    assert full.zip_path == os.path.join(root, "s.mds.zstd")
    assert full.side_path == os.path.join(root, "s.mds.cols")
    assert full.lock_of_tmp(str(full.side_path) + TMP_MARK + "7") == full.side_lock
    assert full.lock_of_tmp(full.raw_path + TMP_MARK + "7") == full.download_lock
    assert full.lock_of_tmp(str(full.zip_path) + TMP_MARK + "7") == full.download_lock


# -- scan ----------------------------------------------------------------------------------------
def test_scan_missing_and_unreadable_roots(tmp_path: Any) -> None:
    good, missing, afile = (str(tmp_path / n) for n in ("good", "missing", "afile"))
    _put(os.path.join(good, "s.mds"), 7)
    _put(afile, 3)  # a root that is a file cannot be listed
    with pytest.raises(NotADirectoryError):
        scan([afile])
    skipped = scan([afile], unreadable_ok=True)
    assert (skipped.usage, skipped.listed, skipped.present, skipped.tmps) == (0, False, {}, [])
    assert scan([missing]).listed is False
    assert scan([good]).listed is True
    # the last root is scanned first: a missing or unreadable one does not stop the others
    assert scan([good, missing]).usage == 7
    after_unreadable = scan([good, afile], unreadable_ok=True)
    assert after_unreadable.usage == 7 and after_unreadable.listed is True


def test_scan_descends_every_directory_but_astream(tmp_path: Any) -> None:
    root = str(tmp_path)
    # only directories at the top: each of them is descended
    _put(os.path.join(root, "a", "s0.mds"), 10)
    _put(os.path.join(root, "b", "s1.mds"), 20)
    _put(os.path.join(root, "b", ".astream", "locks", "x.pin"), 1000)
    _put(os.path.join(root, ".astream", "cache.lock"), 1000)
    out = scan([root])
    assert out.usage == 30
    assert sorted(os.path.relpath(p, root) for p in out.present) == ["a/s0.mds", "b/s1.mds"]


def test_scan_counts_a_symlink_as_itself(tmp_path: Any) -> None:
    root, outside = str(tmp_path / "root"), str(tmp_path / "outside")
    _put(os.path.join(outside, "big.bin"), 5000)
    os.makedirs(root)
    os.symlink(outside, os.path.join(root, "dirlink"))
    os.symlink(os.path.join(outside, "big.bin"), os.path.join(root, "filelink"))
    out = scan([root])
    sizes = len(outside) + len(os.path.join(outside, "big.bin"))
    assert out.usage == sizes  # the links' own sizes; neither the directory nor the file
    assert sorted(os.path.basename(p) for p in out.present) == ["dirlink", "filelink"]


class _Listing:
    def __init__(self, entries: list[os.DirEntry[str]]) -> None:
        self.entries = entries

    def __enter__(self) -> Iterator[os.DirEntry[str]]:
        return iter(self.entries)

    def __exit__(self, *exc: object) -> None:
        return None


def _list_then(monkeypatch: pytest.MonkeyPatch, after: Callable[[], None]) -> None:
    """``os.scandir`` lists by name, then runs ``after`` once (the race), then returns."""
    real = os.scandir
    pending = [after]

    def scandir(path: str) -> _Listing:
        with real(path) as it:
            entries = sorted(it, key=lambda e: e.name)
        while pending:
            pending.pop()()
        return _Listing(entries)

    monkeypatch.setattr(os, "scandir", scandir)


def test_scan_index_files_are_skipped_not_the_rest(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    _put(os.path.join(root, "index.json"), 500)  # listed before the shards
    _put(os.path.join(root, "shard.0.mds"), 10)
    _put(os.path.join(root, "shard.1.mds"), 20)
    _list_then(monkeypatch, lambda: None)
    assert scan([root]).usage == 30


def test_scan_counts_a_download_renamed_after_the_listing_once(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    final = os.path.join(root, "s.mds")
    _put(final + TMP_MARK + "1", 400, mtime=1_000_000)
    _put(final + TMP_MARK + "2", 400)
    _put(os.path.join(root, "z.mds"), 5, mtime=5)

    def race() -> None:
        os.replace(final + TMP_MARK + "1", final)  # finished: renamed into place
        os.unlink(final + TMP_MARK + "2")  # a second one gave up

    _list_then(monkeypatch, race)
    out = scan([root])
    assert out.usage == 405 and out.tmps == []
    assert out.present == {final: 1_000_000.0, os.path.join(root, "z.mds"): 5.0}


def test_scan_a_rename_over_a_listed_final_file_is_not_counted_twice(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    final = os.path.join(root, "s.mds")
    _put(final, 400)
    _put(final + TMP_MARK + "1", 400)
    _list_then(monkeypatch, lambda: os.replace(final + TMP_MARK + "1", final))
    out = scan([root])
    assert out.usage == 400 and list(out.present) == [final] and out.tmps == []


def test_scan_files_deleted_after_the_listing_are_skipped(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    for name in ("a.mds" + TMP_MARK + "1", "b.bin", TMP_MARK + "3"):
        _put(os.path.join(root, name), 100)  # each listed before z.mds, then deleted
    _put(os.path.join(root, "z.mds"), 9)

    def race() -> None:
        for name in ("a.mds" + TMP_MARK + "1", "b.bin", TMP_MARK + "3"):
            os.unlink(os.path.join(root, name))

    _list_then(monkeypatch, race)
    out = scan([root])
    # a file named only by the mark has no final name: not the directory's own size
    assert out.usage == 9 and list(out.present) == [os.path.join(root, "z.mds")]


def test_scan_a_renamed_download_is_found_by_its_last_mark(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path)
    inner = os.path.join(root, "x" + TMP_MARK + "7")  # a temporary file of a temporary file
    _put(inner + TMP_MARK + "9", 300)
    one = os.path.join(root, "y")  # a one-character final name
    _put(one + TMP_MARK + "9", 200)

    def race() -> None:
        os.replace(inner + TMP_MARK + "9", inner)
        os.replace(one + TMP_MARK + "9", one)

    _list_then(monkeypatch, race)
    out = scan([root])
    assert out.usage == 500 and out.tmps == [inner] and list(out.present) == [one]


# -- CacheSpace: construction, pins, locks -----------------------------------------------------
def test_construction_normalises_roots_and_holds_a_lease(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    write_binding(a, Binding("s3://bucket/ds", "0" * 64))
    space = CacheSpace([b, a, a + os.sep, os.path.relpath(a)], limit=None)
    assert space.roots == [a, b]
    assert space.policy == "next_use" and space.future is None and space.evictions == 0
    assert lease_holders(a) == [os.getpid()]  # a bound root: this process uses it
    assert lease_holders(b) == []  # not a cache astream made: no lease files
    del space
    gc.collect()
    assert lease_holders(a) == [] and os.listdir(os.path.join(a, ".astream", "leases")) == []
    with pytest.raises(ConfigError, match=r"^cache_policy must be 'next_use' or 'lru', got 'x'$"):
        CacheSpace([a], limit=None, policy="x")


def test_note_pin_counts_this_process_pins(tmp_path: Any) -> None:
    space = CacheSpace([str(tmp_path)], limit=None)
    space.note_pin("p", -1)  # releasing what is not held: nothing
    assert space._own_pins == {}
    space.note_pin("p", 1)
    assert space._own_pins == {"p": 1}
    space.note_pin("p", 1)
    assert space._own_pins == {"p": 2}
    space.note_pin("q", 1)
    space.note_pin("p", -2)
    assert space._own_pins == {"q": 1}


def test_commit_holds_every_roots_cache_lock_in_a_daemon_thread(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    seen: list[bool] = []

    def fn() -> None:
        seen.extend([_free(_cache_lock(a)), _free(_cache_lock(b))])
        seen.append(threading.current_thread().daemon)

    limited = CacheSpace([a, b], limit=10)
    asyncio.run(limited.commit(fn))
    assert seen == [False, False, True]  # locked; a daemon thread never holds up an exit
    seen.clear()
    limited.commit_now(fn)
    assert seen == [False, False, False]  # the caller's own thread
    assert _free(_cache_lock(a)) and _free(_cache_lock(b))
    unlimited = CacheSpace([a, b], limit=None)  # no limit: nothing to keep consistent
    seen.clear()
    asyncio.run(unlimited.commit(fn))
    unlimited.commit_now(fn)
    assert seen == [True, True, False, True, True, False]


def test_a_failed_cache_lock_releases_the_ones_taken(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _put(b, 1)  # a file: its .astream/cache.lock cannot be made
    space = CacheSpace([a, b], limit=10)
    with pytest.raises(OSError):
        space.commit_now(lambda: None)
    assert _free(_cache_lock(a))


# -- take_free, reserve ---------------------------------------------------------------------------
def test_take_free_takes_exactly_the_free_room_and_never_evicts(tmp_path: Any) -> None:
    root = str(tmp_path)
    old = ShardFiles(root, "old.mds", 60)
    _put(old.raw_path, 60, mtime=1)
    space = CacheSpace([root], limit=100)
    space.register([old])
    assert space.take_free(40, _maker(os.path.join(root, "a.side"), 40)) is True
    assert space.take_free(1, _maker(os.path.join(root, "b.side"), 1)) is False
    assert _names(root) == ["a.side", "old.mds"] and space.evictions == 0
    empty = CacheSpace([str(tmp_path / "e")], limit=100)
    made: list[int] = []
    assert empty.take_free(101, lambda: made.append(101)) is False and made == []
    assert empty.take_free(100, lambda: made.append(100)) is True and made == [100]


def test_reserve_runs_materialize_in_a_daemon_thread(tmp_path: Any) -> None:
    space = CacheSpace([str(tmp_path)], limit=100)
    daemon: list[bool] = []
    got = asyncio.run(
        space.reserve(10, lambda: daemon.append(threading.current_thread().daemon), block=True)
    )
    assert got is True and daemon == [True]


def test_a_full_cache_names_every_root(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    _put(os.path.join(a, "l.mds"), 100)
    space = CacheSpace([b, a], limit=100)
    space.register([ShardFiles(a, "l.mds", 100, evictable=False)])
    made: list[int] = []
    assert asyncio.run(space.reserve(10, lambda: made.append(1), block=False)) is False
    msg = (
        "cache_limit=100 bytes is full of files that cannot be evicted (local-only data, other "
        f"datasets' files or this process's own pins) and 10 more bytes are needed under {a}, {b}"
    )
    with pytest.raises(CacheError) as err:
        asyncio.run(space.reserve(10, lambda: made.append(1), block=True))
    assert str(err.value) == msg and made == []


def test_a_blocking_reservation_waits_for_another_process_pin(tmp_path: Any) -> None:
    root = str(tmp_path)
    sf = ShardFiles(root, "s.mds", 100)
    _put(sf.raw_path, 100)
    space = CacheSpace([root], limit=100)
    space.register([sf])
    new = os.path.join(root, "n.mds")

    async def main() -> bool:
        pin = FileLock(sf.pin_lock)
        pin.shared()  # another reader
        task = asyncio.ensure_future(space.reserve(100, _maker(new, 100), block=True))
        await asyncio.sleep(0.3)
        assert not task.done() and os.path.exists(sf.raw_path)
        pin.release()  # the kernel wakes the waiter, which evicts and retries
        return await asyncio.wait_for(task, 30)

    assert asyncio.run(main()) is True
    assert _names(root) == ["n.mds"] and space.evictions == 1


# -- _try_reserve: the limit's edges ---------------------------------------------------------------
def test_an_exact_fit_neither_cleans_nor_evicts_nor_asks_the_future(tmp_path: Any) -> None:
    root = str(tmp_path)
    sf = ShardFiles(root, "s.mds", 300)
    _put(sf.raw_path, 300)
    stale = sf.raw_path + TMP_MARK + "dead"
    _put(stale, 200)
    space = CacheSpace([root], limit=1000)
    space.register([sf])
    asked: list[int] = []

    def future(files: list[ShardFiles]) -> Sequence[int]:
        asked.append(len(files))
        return [NEVER] * len(files)

    space.future = future
    assert space._try_reserve(500, _maker(os.path.join(root, "a"), 500)) == (True, None)
    assert os.path.exists(stale) and os.path.exists(sf.raw_path) and asked == []
    # one byte more: the dead download's file goes first, and that is enough
    assert space._try_reserve(1, _maker(os.path.join(root, "b"), 1)) == (True, None)
    assert not os.path.exists(stale) and os.path.exists(sf.raw_path) and asked == []
    assert space.usage() == 801


def test_try_reserve_evicts_by_default_and_not_when_told(tmp_path: Any) -> None:
    root = str(tmp_path)
    sf = ShardFiles(root, "s.mds", 100)
    _put(sf.raw_path, 100)
    space = CacheSpace([root], limit=100)
    space.register([sf])
    assert space._try_reserve(1, lambda: None, evict=False) == (False, None)
    assert os.path.exists(sf.raw_path)
    assert space._try_reserve(1, _maker(os.path.join(root, "n"), 1)) == (True, None)
    assert _names(root) == ["n"] and space.evictions == 1


def test_one_byte_over_evicts_one_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    shards = [ShardFiles(root, f"{k}.mds", 100) for k in range(3)]
    for k, sf in enumerate(shards):
        _put(sf.raw_path, 100, mtime=1_000 + k)
    space = CacheSpace([root], limit=300, policy="lru")
    space.register(shards)
    assert space._try_reserve(1, _maker(os.path.join(root, "n"), 1)) == (True, None)
    assert _names(root) == ["1.mds", "2.mds", "n"] and space.evictions == 1
    assert space.usage() == 201


# -- dead downloads' temporary files -------------------------------------------------------------
def test_stale_tmps_are_reclaimed_per_lock_and_counted_exactly(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")  # b is scanned first
    live = ShardFiles(b, "l.mds", 100)
    dead = ShardFiles(a, "d.mds", 100, zip="d.mds.zstd", zip_size=50, side="d.mds.cols")
    _put(live.raw_path + TMP_MARK + "1", 100)
    _put(dead.raw_path + TMP_MARK + "1", 100)
    _put(str(dead.zip_path) + TMP_MARK + "1", 50)
    _put(str(dead.side_path) + TMP_MARK + "1", 30)
    _put(os.path.join(a, "x.bin" + TMP_MARK + "1"), 10)  # nobody's: never deleted
    space = CacheSpace([a, b], limit=300)
    space.register([live, dead])
    with FileLock(live.download_lock) as lk:
        lk.exclusive()  # a download in progress
        # 290 used; 180 reclaimable: 110 + 191 is one byte too many
        assert space.take_free(191, _maker(os.path.join(a, "n"), 191)) is False
        assert space.usage() == 110
        _put(dead.raw_path + TMP_MARK + "1", 100)
        _put(str(dead.zip_path) + TMP_MARK + "1", 50)
        _put(str(dead.side_path) + TMP_MARK + "1", 30)
        assert space.take_free(190, _maker(os.path.join(a, "n"), 190)) is True
    assert space.usage() == 300
    assert _names(a) == ["n", "x.bin" + TMP_MARK + "1"]
    assert _names(b) == ["l.mds" + TMP_MARK + "1"]


def test_a_live_side_file_writer_keeps_only_its_own_tmp(tmp_path: Any) -> None:
    root = str(tmp_path)
    sf = ShardFiles(root, "d.mds", 100, side="d.mds.cols")
    _put(sf.raw_path + TMP_MARK + "1", 100)
    _put(str(sf.side_path) + TMP_MARK + "1", 30)
    space = CacheSpace([root], limit=130)
    space.register([sf])
    assert space._owner_of_tmp(sf.raw_path + "x") is None  # no mark: not a temporary file
    with FileLock(sf.side_lock) as lk:
        lk.exclusive()  # the side writer lives; the download is dead
        assert space.take_free(100, _maker(os.path.join(root, "n"), 100)) is True
    assert _names(root) == ["d.mds.cols" + TMP_MARK + "1", "n"]


def test_a_mark_in_a_parent_directory_does_not_confuse_the_owner(tmp_path: Any) -> None:
    root = str(tmp_path / ("c" + TMP_MARK + "0") / "cache")
    sf = ShardFiles(root, "s.mds", 100)
    tmp = sf.raw_path + TMP_MARK + "1"
    _put(tmp, 100)
    space = CacheSpace([root], limit=100)
    space.register([sf])
    assert space._owner_of_tmp(tmp) is sf
    assert space.take_free(100, _maker(os.path.join(root, "n"), 100)) is True
    assert _names(root) == ["n"]


# -- eviction: candidates, victims, what to wait on -------------------------------------------
def test_candidates_are_found_by_any_of_their_files(tmp_path: Any) -> None:
    root = str(tmp_path)
    kept = ShardFiles(root, "k.mds", 100, evictable=False)  # registered first
    source = ShardFiles(root, "c.mds", 100, zip="c.mds.zstd", zip_size=60, zip_is_source=True)
    zonly = ShardFiles(root, "z.mds", 100, zip="z.mds.zstd", zip_size=50)
    sonly = ShardFiles(root, "s.mds", 100, side="s.mds.cols")
    raw = ShardFiles(root, "r.mds", 100, zip="r.mds.zstd", zip_size=70, side="r.mds.cols")
    _put(kept.raw_path, 100, mtime=0)
    _put(str(source.zip_path), 60, mtime=0)  # its only copy: never a candidate
    _put(str(zonly.zip_path), 50, mtime=1)
    _put(str(sonly.side_path), 30, mtime=2)
    _put(raw.raw_path, 100, mtime=3)  # its zip and side files are not there
    space = CacheSpace([root], limit=10**6, policy="lru")
    space.register([kept, source, zonly, sonly, raw])
    assert space._evict(scan([root]), 50) == (50, None)
    assert _names(root) == ["c.mds.zstd", "k.mds", "r.mds", "s.mds.cols"]
    assert space._evict(scan([root]), 10**6) == (130, None)
    assert _names(root) == ["c.mds.zstd", "k.mds"] and space.evictions == 3


def _three(root: str) -> tuple[CacheSpace, list[ShardFiles]]:
    shards = [ShardFiles(root, f"{n}.mds", 100) for n in "ABC"]
    for k, sf in enumerate(shards):
        _put(sf.raw_path, 100, mtime=1_000 + k)  # A oldest
    space = CacheSpace([root], limit=300, policy="lru")
    space.register(shards)
    return space, shards


def test_eviction_frees_exactly_the_excess_past_a_pinned_shard(tmp_path: Any) -> None:
    root = str(tmp_path)
    space, (a, b, _) = _three(root)
    with FileLock(a.pin_lock) as other:
        other.shared()  # another process reads A
        assert space._evict(scan([root]), 1) == (100, None)  # B; enough, so nothing to wait on
        assert _names(root) == ["A.mds", "C.mds"] and space.evictions == 1
        _put(b.raw_path, 100, mtime=1_001)
        assert space._evict(scan([root]), 100) == (100, None)
        assert _names(root) == ["A.mds", "C.mds"] and space.evictions == 2
        _put(b.raw_path, 100, mtime=1_001)
        assert space._evict(scan([root]), 150) == (200, None)
        assert _names(root) == ["A.mds"] and space.evictions == 4
        _put(b.raw_path, 100, mtime=1_001)
        assert space._evict(scan([root]), 250) == (100, a.pin_lock)  # not enough: wait on A
        assert _free(b.pin_lock) and not _free(a.pin_lock)


def test_the_wait_is_on_the_oldest_pin_of_another_process(tmp_path: Any) -> None:
    root = str(tmp_path)
    space, (a, b, c) = _three(root)
    pins = [FileLock(sf.pin_lock) for sf in (a, b, c)]
    for p in pins:
        p.shared()
    space.note_pin(c.pin_lock, 1)  # C is this process's own pin
    try:
        assert space._try_reserve(1, lambda: None) == (False, a.pin_lock)
        pins[0].release()
        space.note_pin(a.pin_lock, 1)
        pins[0].shared()  # now A is ours too
        assert space._try_reserve(1, lambda: None) == (False, b.pin_lock)
        pins[1].release()
        space.note_pin(b.pin_lock, 1)
        pins[1].shared()
        assert space._try_reserve(1, lambda: None) == (False, None)  # never wait on ourselves
    finally:
        for p in pins:
            p.release()
    assert _names(root) == ["A.mds", "B.mds", "C.mds"] and space.evictions == 0


def test_with_nothing_evictable_the_wait_is_on_a_live_download(tmp_path: Any) -> None:
    a, b = str(tmp_path / "a"), str(tmp_path / "b")  # b is scanned first
    full = ShardFiles(a, "f.mds", 100, evictable=False)
    writing = ShardFiles(a, "w.mds", 50, side="w.mds.cols")
    pinned = ShardFiles(a, "p.mds", 20)
    _put(full.raw_path, 100)
    _put(os.path.join(b, "x.bin" + TMP_MARK + "1"), 10)  # nobody's temporary file, seen first
    _put(str(writing.side_path) + TMP_MARK + "1", 20)
    space = CacheSpace([a, b], limit=130)
    space.register([full, writing])
    with FileLock(writing.side_lock) as lk:
        lk.exclusive()  # the side writer lives
        assert space._try_reserve(1, lambda: None) == (False, writing.side_lock)
        _put(pinned.raw_path, 20, mtime=1)
        space.register([pinned])
        with FileLock(pinned.pin_lock) as pin:
            pin.shared()  # a pin of another process comes first
            assert space._try_reserve(1, lambda: None) == (False, pinned.pin_lock)
