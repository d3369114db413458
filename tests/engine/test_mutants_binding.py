"""A cache directory's own files (``runtime/binding.py``) at their edges, in one process on
real files: the exact bytes of the binding and the entry mark, the exact error for a broken
binding and for a full disk, and the leases -- counted per owner, dropped in a forked child,
retaken when ``astream cache`` deletes a lease file under us.

A full disk is a real one: the process's file size limit (``RLIMIT_FSIZE``, with ``SIGXFSZ``
ignored) makes the write fail with ``EFBIG``. ``astream cache`` deleting a lease file between
its open and its flock is played by wrapping ``FileLock.exclusive`` to delete the file right
after the lock is taken, the window the retry exists for.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import resource
import signal
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from astream.errors import CacheError, ConfigError
from astream.runtime import binding
from astream.runtime.binding import (
    Binding,
    hold_leases,
    lease_holders,
    mark_entry,
    read_binding,
    write_atomic,
    write_binding,
)
from astream.runtime.locks import FileLock


class _Owner:
    """Anything a lease can live as long as."""


def _meta(root: str, *parts: str) -> str:
    return os.path.join(root, ".astream", *parts)


def _bound(root: str) -> str:
    write_binding(root, Binding("s3://bucket/ds", "ab" * 32))
    return root


@contextlib.contextmanager
def _file_size_limit(n: int) -> Iterator[None]:
    old = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (n, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old)


_FULL_HINT = (
    "free space there, point `local` at a bigger disk, or set cache_limit below the free space"
)


# -- binding and entry files ---------------------------------------------------------------------
def test_binding_and_entry_files_hold_exactly_these_bytes(tmp_path: Any) -> None:
    root = str(tmp_path)
    write_binding(root, Binding("s3://b/d", "ab"))
    with open(_meta(root, "binding.json"), "rb") as f:
        assert f.read() == b'{\n "remote": "s3://b/d",\n "digest": "ab"\n}'
    assert read_binding(root) == Binding("s3://b/d", "ab")
    mark_entry(root, "s3://b/d")
    with open(_meta(root, "entry"), "rb") as f:
        assert f.read() == b'{"created_by": "astream", "remote": "s3://b/d"}'
    assert sorted(os.listdir(_meta(root))) == ["binding.json", "entry"]  # no temporary left


@pytest.mark.parametrize(
    ("data", "what"),
    [
        (b"[1, 2]", "not an object"),
        (b'{"remote": 1, "digest": "ab"}', "remote and digest must be strings"),
        (b'{"remote": "s3://b/d", "digest": 2}', "remote and digest must be strings"),
        (b'{"digest": "ab"}', "missing 'remote'"),
    ],
)
def test_a_broken_binding_is_named_with_its_fault(tmp_path: Any, data: bytes, what: str) -> None:
    root = str(tmp_path)
    os.makedirs(_meta(root))
    path = _meta(root, "binding.json")
    with open(path, "wb") as f:
        f.write(data)
    with pytest.raises(ConfigError) as err:
        read_binding(root)
    assert str(err.value) == (
        f"{path} is not a valid astream binding ({what}); delete {root} (or just that file) "
        "to rebuild it"
    )


def test_a_binding_that_is_not_utf8_is_a_config_error(tmp_path: Any) -> None:
    root = str(tmp_path)
    os.makedirs(_meta(root))
    with open(_meta(root, "binding.json"), "wb") as f:
        f.write(b'{"remote": "\xff", "digest": "ab"}')
    with pytest.raises(ConfigError, match=r"is not a valid astream binding \(.*utf-8"):
        read_binding(root)


def test_a_full_disk_is_a_cache_error_naming_the_directory(tmp_path: Any) -> None:
    root = str(tmp_path / "c")
    path = os.path.join(root, "sub", "f.bin")
    with _file_size_limit(4096), pytest.raises(CacheError) as err:
        write_atomic(path, b"x" * 10_000, root)
    assert str(err.value) == (
        f"cache directory {root}: file too large writing {path} (10000 bytes needed, no "
        f"cache_limit); {_FULL_HINT}"
    )
    assert os.listdir(os.path.dirname(path)) == []  # the partial temporary file is gone
    remote = "s3://b/" + "d" * 10_000
    writes: list[Callable[[], None]] = [
        lambda: write_binding(root, Binding(remote, "ab")),
        lambda: mark_entry(root, remote),
    ]
    for write in writes:
        with (
            _file_size_limit(4096),
            pytest.raises(CacheError, match=f"^cache directory {re.escape(root)}: "),
        ):
            write()
    assert os.listdir(_meta(root)) == []


def test_another_os_error_is_raised_as_it_is(tmp_path: Any) -> None:
    root = str(tmp_path)
    with open(os.path.join(root, "afile"), "wb"):
        pass
    with pytest.raises(FileExistsError):  # its directory would be a file
        write_atomic(os.path.join(root, "afile", "x"), b"x", root)


# -- which directories are astream's --------------------------------------------------------------
def test_a_missing_directory_is_empty(tmp_path: Any) -> None:
    assert binding._is_empty(str(tmp_path / "missing")) is True
    assert binding._is_empty(str(tmp_path)) is True
    os.makedirs(_meta(str(tmp_path)))
    assert binding._is_empty(str(tmp_path)) is True
    with open(os.path.join(str(tmp_path), "x"), "wb"):
        pass
    assert binding._is_empty(str(tmp_path)) is False


# -- leases --------------------------------------------------------------------------------------
def test_only_a_bound_or_entry_directory_gets_a_lease(tmp_path: Any) -> None:
    bound, entry, plain = (str(tmp_path / n) for n in ("bound", "entry", "plain"))
    _bound(bound)
    mark_entry(entry, "s3://b/d")
    os.makedirs(_meta(plain, "locks"))  # read in place: astream's locks, but no binding
    owner = _Owner()
    hold_leases(owner, [plain, entry, bound])
    assert lease_holders(bound) == [os.getpid()] and lease_holders(entry) == [os.getpid()]
    assert lease_holders(plain) == [] and not os.path.exists(_meta(plain, "leases"))
    del owner
    gc.collect()
    assert lease_holders(bound) == [] and lease_holders(entry) == []


def test_leases_are_counted_per_owner(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # as in a process that has just imported the module (no lease yet, no pid noted)
    monkeypatch.setattr(binding, "_leases", {})
    monkeypatch.setattr(binding, "_leases_pid", -1)
    root = _bound(str(tmp_path))
    first, second = _Owner(), _Owner()
    hold_leases(first, [root])
    hold_leases(second, [root])
    lease = _meta(root, "leases", str(os.getpid()))
    del first
    gc.collect()
    assert lease_holders(root) == [os.getpid()] and os.path.exists(lease)
    del second
    gc.collect()
    assert lease_holders(root) == [] and not os.path.exists(lease)
    assert root not in binding._leases


def test_a_collection_that_starts_inside_the_lease_mutex_releases_without_deadlock(
    tmp_path: Any,
) -> None:
    import threading

    root = _bound(str(tmp_path))
    owner = _Owner()
    owner.me = owner  # type: ignore[attr-defined]  # a cycle: only a collection frees it
    hold_leases(owner, [root])
    del owner
    done = threading.Event()

    def run() -> None:
        with binding._leases_mutex:  # as _acquire holds it when an allocation starts a collection
            gc.collect()  # runs the owner's finalizer, which takes the mutex again
        done.set()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert done.is_set(), "the finalizer deadlocked on the lease mutex"
    assert lease_holders(root) == []


def test_releasing_skips_a_root_it_does_not_hold(tmp_path: Any) -> None:
    root = _bound(str(tmp_path / "held"))
    assert binding._acquire(root) is True
    binding._release([str(tmp_path / "not-held"), root], os.getpid())
    assert root not in binding._leases and lease_holders(root) == []
    binding._release([root], os.getpid() + 1)  # another process's finalizer: nothing


def test_lease_holders_skip_strangers_and_clear_stale_leases(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bound(str(tmp_path))
    owner = _Owner()
    hold_leases(owner, [root])
    d = _meta(root, "leases")
    os.makedirs(os.path.join(d, "999999999"))  # cannot be locked: skipped
    for name in ("zz", "888888888"):  # not a pid; a dead process's lease
        with open(os.path.join(d, name), "wb"):
            pass
    real = os.listdir
    monkeypatch.setattr(os, "listdir", lambda p: sorted(real(p), reverse=True))
    assert lease_holders(root) == [os.getpid()]
    monkeypatch.undo()
    assert sorted(os.listdir(d)) == sorted([str(os.getpid()), "999999999", "zz"])


def _deleting_after_lock(monkeypatch: pytest.MonkeyPatch, times: int) -> list[int]:
    """``FileLock.exclusive`` deletes the locked file the first ``times`` times, as
    ``astream cache`` may between a lease's open and its flock."""
    real: Callable[[FileLock], None] = FileLock.exclusive
    calls: list[int] = []

    def exclusive(self: FileLock) -> None:
        real(self)
        calls.append(1)
        if len(calls) <= times:
            os.unlink(self.path)

    monkeypatch.setattr(FileLock, "exclusive", exclusive)
    return calls


def test_a_lease_deleted_under_us_is_taken_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bound(str(tmp_path))
    calls = _deleting_after_lock(monkeypatch, 2)
    owner = _Owner()
    hold_leases(owner, [root])
    assert len(calls) == 3 and lease_holders(root) == [os.getpid()]
    del owner
    gc.collect()
    assert lease_holders(root) == []


def test_a_lease_deleted_three_times_is_given_up(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _bound(str(tmp_path))
    calls = _deleting_after_lock(monkeypatch, 3)
    assert binding._acquire(root) is False
    assert len(calls) == 3 and root not in binding._leases and lease_holders(root) == []


def test_an_unwritable_lease_directory_gives_no_lease(tmp_path: Any) -> None:
    root = _bound(str(tmp_path))
    with open(_meta(root, "leases"), "wb"):  # a file where the directory should be
        pass
    assert binding._acquire(root) is False and root not in binding._leases
    owner = _Owner()
    hold_leases(owner, [root])  # no error: nothing there to protect
    assert root not in binding._leases


def test_a_forked_child_drops_the_parents_leases_and_takes_its_own(tmp_path: Any) -> None:
    root = _bound(str(tmp_path))
    binding._after_fork_in_child()  # in the process that is no child: only a fresh mutex
    parent = _Owner()
    hold_leases(parent, [root])
    assert sorted(binding._leases) == [root]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            inherited = sorted(binding._leases)
            child = _Owner()
            hold_leases(child, [root])
            os.write(w, json.dumps([inherited, lease_holders(root), os.getpid()]).encode())
            del child
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        got = f.read()
    os.waitpid(pid, 0)
    inherited, holders, child_pid = json.loads(got)
    assert inherited == [] and holders == sorted([os.getpid(), child_pid])
    assert lease_holders(root) == [os.getpid()]  # the child's lease died with it
