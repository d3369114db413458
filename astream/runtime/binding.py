"""What a cache directory holds, who made it, and who is using it now.

Theory of operation
-------------------
A stream's ``local`` directory carries three kinds of small files under ``local/.astream/``:

- **Binding** (``binding.json``): the remote URL (without credentials) whose cache this is, and
  a digest of the index it holds (:func:`index_digest`). Written when a
  dataset with a remote first uses the directory, rewritten when the remote's index changes.
  A dataset with *another* remote is refused at construction: two datasets with the same shard
  names and sizes would otherwise share bytes silently. Checked once per construction; nothing
  on the hot path.
- **Entry mark** (``entry``): astream created this directory (it did not exist, or was empty),
  so ``astream cache clear`` may delete it whole. A directory that held anything before astream
  used it -- a dataset written by ``MDSWriter``, a folder of photos -- is never marked.
- **Leases** (``leases/<pid>``): every process that holds a dataset over the directory (the
  process that built it, and each DataLoader worker on first use) holds an exclusive flock on
  its own lease file for as long as the dataset lives there. ``astream cache`` lists the pids
  whose lease it cannot take and refuses to clear their entries. A lease dies with its process
  (flock), and a free lease file is deleted by whoever finds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from astream.errors import ConfigError
from astream.runtime.diskerror import disk_error
from astream.runtime.locks import FileLock

__all__ = [
    "BINDING",
    "ENTRY_MARK",
    "Binding",
    "cache_base",
    "hold_leases",
    "index_digest",
    "is_entry",
    "lease_holders",
    "mark_entry",
    "new_dirs",
    "read_binding",
    "write_binding",
]

BINDING = "binding.json"
ENTRY_MARK = "entry"
LEASES = "leases"
_HASH_DIR = re.compile(r"^[0-9a-f]{20}$")  # runtime.config.default_local's directory names


def meta_dir(local: str) -> str:
    return os.path.join(local, ".astream")


def cache_base() -> str:
    """Where ``local=None`` puts each remote's directory ($ASTREAM_CACHE_DIR or
    ~/.cache/astream)."""
    return os.path.abspath(
        os.environ.get("ASTREAM_CACHE_DIR")
        or os.path.join(os.path.expanduser("~"), ".cache", "astream")
    )


@dataclass(frozen=True)
class Binding:
    remote: str
    digest: str


def index_digest(data: bytes) -> str:
    """sha256 of the index.json bytes: which version of the remote's dataset a cache holds.

    The bytes, not a re-serialised shard table: hashing them costs ~20 ms for a 100k-shard
    index where rebuilding the table costs ~1.7 s. A change that leaves every shard entry
    equal (a reformatted index) only re-binds; shards are compared entry by entry."""
    return hashlib.sha256(data).hexdigest()


def read_binding(local: str) -> Binding | None:
    path = os.path.join(meta_dir(local), BINDING)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    try:
        obj = json.loads(data)
        if not isinstance(obj, dict):
            raise ValueError("not an object")
        remote, digest = obj["remote"], obj["digest"]
        if not isinstance(remote, str) or not isinstance(digest, str):
            raise ValueError("remote and digest must be strings")
    except (ValueError, KeyError) as exc:
        what = f"missing {exc}" if isinstance(exc, KeyError) else str(exc)
        raise ConfigError(
            f"{path} is not a valid astream binding ({what}); delete {local} (or just that "
            "file) to rebuild it"
        ) from None
    return Binding(remote, digest)


def write_atomic(path: str, data: bytes, root: str, tmp: str | None = None) -> None:
    """Write ``data`` to ``path`` under the cache ``root`` via ``tmp`` (default: beside it) and
    a rename; a full or unwritable disk is a ``CacheError`` (see ``diskerror.disk_error``)."""
    tmp = tmp or f"{path}.tmp-{os.getpid()}"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        err = disk_error(exc, path, root=root, need=len(data), limit=None)
        if err is None:
            raise
        raise err from exc


def write_binding(local: str, binding: Binding) -> None:
    data = json.dumps({"remote": binding.remote, "digest": binding.digest}, indent=1).encode()
    write_atomic(os.path.join(meta_dir(local), BINDING), data, local)


def is_entry(path: str) -> bool:
    return os.path.isfile(os.path.join(meta_dir(path), ENTRY_MARK))


def mark_entry(path: str, remote: str) -> None:
    data = json.dumps({"created_by": "astream", "remote": remote}).encode()
    write_atomic(os.path.join(meta_dir(path), ENTRY_MARK), data, path)


def _is_empty(path: str) -> bool:
    try:
        return all(n == ".astream" for n in os.listdir(path))
    except FileNotFoundError:
        return True


def new_dirs(local: str) -> list[str]:
    """The directories that creating ``local`` would create (outermost first), plus ``local``
    itself when it exists but is empty: the ones astream may mark as its own."""
    out: list[str] = []
    d = os.path.abspath(local)
    while not os.path.exists(d):
        out.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    if not out and _is_empty(local):
        out.append(os.path.abspath(local))
    base = cache_base()
    # the default cache root holds entries; it is never one. A remote's directory there (named
    # by runtime.config.default_local) is astream's by construction, even from older versions.
    out = [p for p in reversed(out) if p != base]
    rel = os.path.relpath(os.path.abspath(local), base)
    first = rel.split(os.sep, 1)[0]
    if not rel.startswith("..") and _HASH_DIR.match(first):
        top = os.path.join(base, first)
        chain = [top]
        for part in rel.split(os.sep)[1:]:
            chain.append(os.path.join(chain[-1], part))
        out = sorted(set(out) | set(chain), key=len)
    return out


# -- leases ----------------------------------------------------------------------------------
_leases: dict[str, list[Any]] = {}  # root -> [FileLock, refcount]
_leases_pid = -1
# reentrant: a dataset's finalizer (_release) may run from a garbage collection that starts
# while this thread holds the mutex in _acquire; a plain Lock would deadlock there
_leases_mutex = threading.RLock()


def _fresh_after_fork() -> None:
    global _leases_pid
    if _leases_pid != os.getpid():
        # A forked child shares the parent's lease locks through inherited descriptors: drop
        # its copies (the parent keeps its locks) so that a dead parent's lease dies with it.
        for lk, _ in _leases.values():
            lk.release()
        _leases.clear()
        _leases_pid = os.getpid()


def _after_fork_in_child() -> None:
    # A fresh mutex (another thread may have held it at the fork), and drop the inherited
    # lease descriptors now, not at the child's first lease: a child that never uses the
    # dataset would otherwise keep its dead parent's lease alive.
    global _leases_mutex
    _leases_mutex = threading.RLock()
    _fresh_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _acquire(root: str) -> bool:
    with _leases_mutex:
        _fresh_after_fork()
        held = _leases.get(root)
        if held is not None:
            held[1] += 1
            return True
        path = os.path.join(meta_dir(root), LEASES, str(os.getpid()))
        for _ in range(3):
            lk = FileLock(path)
            try:
                lk.exclusive()  # our own pid's file: nobody else takes it while we live
                # `astream cache` deletes a lease file it could lock: if it did so between
                # our open and our flock, our lock is on a deleted file -- take a new one
                same = os.path.samestat(os.fstat(lk._fd), os.stat(path))  # type: ignore[arg-type]
            except FileNotFoundError:
                same = False
            except OSError:
                lk.release()
                return False  # a read-only dataset directory: nothing there to protect
            if same:
                _leases[root] = [lk, 1]
                return True
            lk.release()
        return False


def _release(roots: list[str], pid: int) -> None:
    with _leases_mutex:
        if pid != os.getpid():
            return
        for root in roots:
            held = _leases.get(root)
            if held is None:
                continue
            held[1] -= 1
            if held[1] == 0:
                del _leases[root]
                lk = held[0]
                try:
                    os.unlink(lk.path)
                except OSError:
                    pass
                lk.release()


def hold_leases(owner: object, roots: Iterable[str]) -> None:
    """Hold this process's lease on each root that is a cache (bound, or an entry astream
    made) for as long as ``owner`` lives. A dataset read in place gets no lease files."""
    cands = sorted({os.path.abspath(r) for r in roots})
    cands = [r for r in cands if os.path.exists(os.path.join(meta_dir(r), BINDING)) or is_entry(r)]
    taken = [r for r in cands if _acquire(r)]
    if taken:
        weakref.finalize(owner, _release, taken, os.getpid())


def lease_holders(root: str) -> list[int]:
    """Pids of live processes holding a lease on ``root`` (stale lease files are removed)."""
    d = os.path.join(meta_dir(root), LEASES)
    try:
        names = os.listdir(d)
    except (FileNotFoundError, NotADirectoryError):
        return []
    pids = []
    for n in names:
        if not n.isdigit():
            continue
        lk = FileLock(os.path.join(d, n))
        try:
            if lk.try_exclusive():
                try:
                    os.unlink(lk.path)  # its process is gone
                except OSError:
                    pass
                lk.release()
            else:
                pids.append(int(n))
        except OSError:
            continue
    return sorted(pids)
