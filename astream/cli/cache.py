"""``astream cache``: list and clear cache directories and their sizes.

The cache root is ``--dir``, else ``$ASTREAM_CACHE_DIR``, else ``~/.cache/astream`` -- where
``StreamingDataset(local=None)`` puts each remote's stable cache directory. Each direct
sub-directory is one entry. ``clear`` refuses an entry a live process is reading: readers hold
flocks on the files under ``<entry>/.astream/locks`` (see ``astream.runtime.locks``), and an
entry is in use when one of them cannot be taken exclusively right now.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
from typing import Any

from astream.cli.common import human_bytes
from astream.errors import CacheError, ConfigError

__all__ = ["add_parser", "cache_root", "entries", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("cache", help="list or clear cache directories")
    csub = p.add_subparsers(dest="cache_cmd", required=True, metavar="{list,clear}")
    ls = csub.add_parser("list", help="cache entries and their sizes")
    ls.add_argument("--dir", help="cache root (default $ASTREAM_CACHE_DIR or ~/.cache/astream)")
    ls.add_argument("--json", action="store_true")
    cl = csub.add_parser("clear", help="delete cache entries")
    cl.add_argument("names", nargs="*", help="entries to delete (see `astream cache list`)")
    cl.add_argument("--all", action="store_true", help="delete every entry")
    cl.add_argument("--dir", help="cache root (default $ASTREAM_CACHE_DIR or ~/.cache/astream)")
    cl.add_argument("--force", action="store_true", help="delete even if a process reads it")
    p.set_defaults(func=run)


def cache_root(given: str | None = None) -> str:
    if given:
        return os.path.abspath(os.path.expanduser(given))
    from astream.runtime.config import default_local

    return os.path.dirname(default_local("", None))


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


def _in_use(path: str) -> bool:
    from astream.runtime.locks import FileLock, lock_dir

    locks = lock_dir(path)
    try:
        names = os.listdir(locks)
    except FileNotFoundError:
        return False
    for n in names:
        lk = FileLock(os.path.join(locks, n))
        if not lk.try_exclusive():
            return True
        lk.release()
    return False


def _describe(path: str) -> dict[str, Any]:
    size, files = _size(path)
    out: dict[str, Any] = {"name": os.path.basename(path), "path": path, "bytes": size}
    out["files"] = files
    index = os.path.join(path, "index.json")
    if os.path.isfile(index):
        try:
            with open(index, "rb") as f:
                shards = json.load(f).get("shards", [])
            out["shards"] = len(shards)
            out["samples"] = sum(int(s.get("samples", 0)) for s in shards)
        except (OSError, ValueError, AttributeError, TypeError):
            out["shards"] = None
    out["in_use"] = _in_use(path)
    return out


def entries(root: str) -> list[dict[str, Any]]:
    if not os.path.isdir(root):
        return []
    return [
        _describe(os.path.join(root, n))
        for n in sorted(os.listdir(root))
        if os.path.isdir(os.path.join(root, n)) and not os.path.islink(os.path.join(root, n))
    ]


def _list(root: str, as_json: bool) -> int:
    found = entries(root)
    if as_json:
        total = sum(e["bytes"] for e in found)
        print(json.dumps({"root": root, "bytes": total, "entries": found}, indent=1))
        return 0
    print(f"cache root {root}: {len(found)} entries, {human_bytes(sum(e['bytes'] for e in found))}")
    for e in found:
        what = f"{e['shards']} shards indexed" if e.get("shards") is not None else "no index"
        busy = ", in use" if e["in_use"] else ""
        print(f"  {e['name']}  {human_bytes(e['bytes'])}  {e['files']} files  {what}{busy}")
    return 0


def _clear(root: str, names: list[str], everything: bool, force: bool) -> int:
    if everything == bool(names):
        raise ConfigError("cache clear: give entry names or --all (not both)")
    if everything:
        names = [e["name"] for e in entries(root)]
    targets = []
    for n in names:
        if not n or "/" in n or n in (".", ".."):
            raise ConfigError(f"cache clear: {n!r} is not an entry name")
        path = os.path.join(root, n)
        if not os.path.isdir(path):
            raise ConfigError(f"cache clear: no entry {n!r} under {root}")
        if not force and _in_use(path):
            raise CacheError(f"cache entry {path} is in use by a running process (--force)")
        targets.append(path)
    freed = 0
    for path in targets:
        freed += _size(path)[0]
        shutil.rmtree(path)
    print(f"cleared {len(targets)} entries under {root}, {human_bytes(freed)} freed")
    return 0


def run(args: argparse.Namespace) -> int:
    root = cache_root(args.dir)
    if args.cache_cmd == "list":
        return _list(root, args.json)
    return _clear(root, args.names, args.all, args.force)
