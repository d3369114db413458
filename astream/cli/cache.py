"""``astream cache``: list and clear the cache entries astream made, and nothing else.

The cache root is ``--dir``, else ``$ASTREAM_CACHE_DIR``, else ``~/.cache/astream`` -- where
``StreamingDataset(local=None)`` puts each remote's stable cache directory. A direct
sub-directory is an *entry* only if astream created it and marked it so
(``<entry>/.astream/entry``, see :mod:`astream.runtime.binding`); anything else under the root
-- a folder of photos, a dataset written by ``MDSWriter`` -- is never listed as an entry and
never deleted. An entry that holds files astream did not put there is refused too.

In use: every process holding a dataset over an entry holds a lease there (a flock on
``.astream/leases/<pid>``), so ``list`` names the pids and ``clear`` refuses the entry unless
``--force``. A shard pinned or being downloaded (its lock under ``.astream/locks`` taken) also
counts, with the holder's pid read from ``/proc/locks`` where the kernel shows it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from typing import Any

from astream.cli.common import human_bytes
from astream.errors import AstreamError, CacheError, ConfigError

__all__ = ["add_parser", "cache_root", "entries", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cache", help="list or clear cache directories")
    csub = p.add_subparsers(dest="cache_cmd", required=True, metavar="{list,clear}")
    ls = csub.add_parser("list", help="cache entries and their sizes")
    ls.add_argument("--dir", help="cache root (default $ASTREAM_CACHE_DIR or ~/.cache/astream)")
    ls.add_argument("--json", action="store_true")
    cl = csub.add_parser("clear", help="delete cache entries")
    cl.add_argument("names", nargs="*", help="entries to delete (see `astream cache list`)")
    cl.add_argument("--all", action="store_true", help="delete every entry astream made")
    cl.add_argument("--dir", help="cache root (default $ASTREAM_CACHE_DIR or ~/.cache/astream)")
    cl.add_argument("--force", action="store_true", help="delete even if a process uses it")
    p.set_defaults(func=run)


def cache_root(given: str | None = None) -> str:
    if given:
        return os.path.abspath(os.path.expanduser(given))
    from astream.runtime.binding import cache_base

    return cache_base()


def _size(path: str) -> tuple[int, int]:
    total = files = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.lstat(os.path.join(root, n)).st_size
                files += 1
            except FileNotFoundError:
                pass
    return total, files


def _meta_dirs(path: str) -> list[str]:
    """Every directory under ``path`` (itself included) that has a ``.astream`` directory."""
    out = []
    for root, dirs, _ in os.walk(path):
        if ".astream" in dirs:
            out.append(root)
            dirs.remove(".astream")
    return out


def _proc_lock_pids() -> dict[int, set[int]]:
    """inode -> pids holding a flock on it, from /proc/locks (empty where there is none)."""
    out: dict[int, set[int]] = {}
    try:
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        if "->" in parts:  # a waiter, not a holder
            continue
        if len(parts) >= 6 and parts[1] == "FLOCK":
            try:
                out.setdefault(int(parts[5].rsplit(":", 1)[1]), set()).add(int(parts[4]))
            except (ValueError, IndexError):
                continue
    return out


def _users(path: str) -> tuple[bool, list[int]]:
    """(in use, pids known to use it): leases first, then held shard locks."""
    from astream.runtime.binding import lease_holders
    from astream.runtime.locks import FileLock, lock_dir

    pids: set[int] = set()
    busy = False
    proc: dict[int, set[int]] | None = None
    for d in _meta_dirs(path):
        held = lease_holders(d)
        pids.update(held)
        busy = busy or bool(held)
        locks = lock_dir(d)
        try:
            names = os.listdir(locks)
        except (FileNotFoundError, NotADirectoryError):
            continue
        for n in names:
            lk = FileLock(os.path.join(locks, n))
            try:
                free = lk.try_exclusive()
            except OSError:
                continue
            if free:
                lk.release()
                continue
            busy = True
            if proc is None:
                proc = _proc_lock_pids()
            try:
                pids.update(proc.get(os.stat(lk.path).st_ino, ()))
            except FileNotFoundError:
                pass
    pids.discard(0)
    return busy, sorted(pids)


def _known_files(path: str) -> set[str]:
    """Absolute paths of the files astream may have put under ``path`` (besides .astream/):
    each cache directory's index.json and the shard files it names."""
    from astream.core.index import parse_index

    known: set[str] = set()
    for d in _meta_dirs(path):
        index = os.path.join(d, "index.json")
        known.add(index)
        try:
            with open(index, "rb") as f:
                parsed = parse_index(f.read(), index)
        except (OSError, AstreamError):  # unreadable: it names nothing
            continue
        for entry in parsed.shards:
            for info in (entry.raw_data, entry.zip_data):
                if info is not None:
                    known.add(os.path.join(d, info.basename))
    return known


def _foreign(path: str) -> list[str]:
    """Files under the entry ``path`` that astream did not put there."""
    from astream.runtime.cache import TMP_MARK

    known = _known_files(path)
    out = []
    for root, dirs, names in os.walk(path):
        if ".astream" in dirs:
            dirs.remove(".astream")
        for n in names:
            p = os.path.join(root, n)
            cut = p.rfind(TMP_MARK)
            if p in known or (cut > 0 and p[:cut] in known):
                continue
            out.append(os.path.relpath(p, path))
    return sorted(out)


def _describe(path: str) -> dict[str, Any]:
    from astream.runtime.binding import ENTRY_MARK, meta_dir

    size, files = _size(path)
    out: dict[str, Any] = {"name": os.path.basename(path), "path": path, "bytes": size}
    out["files"] = files
    try:
        with open(os.path.join(meta_dir(path), ENTRY_MARK), "rb") as f:
            out["remote"] = json.loads(f.read()).get("remote")
    except (OSError, ValueError, AttributeError):
        out["remote"] = None
    shards = samples = 0
    indexed = False
    for d in _meta_dirs(path):
        index = os.path.join(d, "index.json")
        if not os.path.isfile(index):
            continue
        try:
            with open(index, "rb") as f:
                listed = json.load(f).get("shards", [])
            shards += len(listed)
            samples += sum(int(s.get("samples", 0)) for s in listed)
            indexed = True
        except (OSError, ValueError, AttributeError, TypeError):
            pass
    if indexed:
        out["shards"], out["samples"] = shards, samples
    else:
        out["shards"] = None
    out["in_use"], out["pids"] = _users(path)
    return out


def _children(root: str) -> tuple[list[str], list[str]]:
    """(entries astream made, other directories) directly under ``root``."""
    from astream.runtime.binding import is_entry

    if not os.path.isdir(root):
        return [], []
    ours: list[str] = []
    others: list[str] = []
    for n in sorted(os.listdir(root)):
        p = os.path.join(root, n)
        if not os.path.isdir(p) or os.path.islink(p) or n == ".astream":
            continue
        (ours if is_entry(p) else others).append(n)
    return ours, others


def entries(root: str) -> list[dict[str, Any]]:
    return [_describe(os.path.join(root, n)) for n in _children(root)[0]]


def _who(pids: list[int]) -> str:
    if not pids:
        return "a running process"
    return ("pid " if len(pids) == 1 else "pids ") + ", ".join(map(str, pids))


def _list(root: str, as_json: bool) -> int:
    found = entries(root)
    others = _children(root)[1]
    total = sum(e["bytes"] for e in found)
    if as_json:
        out = {"root": root, "bytes": total, "entries": found, "not_entries": others}
        print(json.dumps(out, indent=1))
        return 0
    print(f"cache root {root}: {len(found)} entries, {human_bytes(total)}")
    for e in found:
        what = f"{e['shards']} shards indexed" if e.get("shards") is not None else "no index"
        busy = f", in use by {_who(e['pids'])}" if e["in_use"] else ""
        print(f"  {e['name']}  {human_bytes(e['bytes'])}  {e['files']} files  {what}{busy}")
    if others:
        print(f"not astream cache entries (never cleared): {', '.join(others)}")
    return 0


def _refusal(path: str, force: bool) -> str | None:
    """Why ``path`` must not be deleted, or None."""
    from astream.runtime.binding import is_entry

    if not is_entry(path):
        return (
            f"{path} is not an astream cache entry (astream did not create it: no "
            ".astream/entry mark); delete it yourself if you mean to"
        )
    foreign = _foreign(path)
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        return (
            f"cache entry {path} holds files astream did not put there "
            f"({', '.join(foreign[:3])}{more}); move them out or delete it yourself"
        )
    if not force:
        busy, pids = _users(path)
        if busy:
            return (
                f"cache entry {path} is in use by {_who(pids)}; stop it first, or pass --force "
                "to delete it anyway"
            )
    return None


def _clear(root: str, names: list[str], everything: bool, force: bool) -> int:
    if everything == bool(names):
        raise ConfigError("cache clear: give entry names or --all (not both)")
    skipped: list[str] = []
    if everything:
        names, skipped = _children(root)
    targets = []
    for n in names:
        if not n or "/" in n or n in (".", ".."):
            raise ConfigError(f"cache clear: {n!r} is not an entry name")
        path = os.path.join(root, n)
        if not os.path.isdir(path) or os.path.islink(path):
            raise ConfigError(f"cache clear: no entry {n!r} under {root}")
        why = _refusal(path, force)
        if why is not None:
            raise CacheError(why)
        targets.append(path)
    freed = 0
    for path in targets:
        freed += _size(path)[0]
        shutil.rmtree(path)
    print(f"cleared {len(targets)} entries under {root}, {human_bytes(freed)} freed")
    if skipped:
        print(f"left alone (not astream cache entries): {', '.join(skipped)}")
    return 0


def run(args: argparse.Namespace) -> int:
    root = cache_root(args.dir)
    if args.cache_cmd == "list":
        return _list(root, args.json)
    return _clear(root, args.names, args.all, args.force)
