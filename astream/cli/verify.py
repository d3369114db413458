"""``astream verify``: re-read every shard file of a dataset, concurrently, and check its size
and every hash index.json lists; exit 1 on any mismatch or missing file.

Theory of operation
-------------------
For each shard, the file that exists in storage (the compressed one if any, and the meta file
of split formats) is read whole -- ``--concurrency`` at a time, on astream's loop thread for
remote datasets -- and checked against its ``FileInfo`` (size, then each listed hash). A
compressed file is also decompressed and the result checked against the raw ``FileInfo``, so
a shard whose index lists no zip hash is still verified end to end. Hashing and decompression
run in worker threads, so reads of other shards go on meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from astream.cli.common import human_bytes, is_local, join_split, local_path, read_index
from astream.core.compression import decompress
from astream.core.hashing import hexdigest
from astream.core.index import FileInfo, Index, ShardEntry
from astream.errors import AstreamError, ConfigError, ObjectNotFoundError

__all__ = ["Problem", "add_parser", "run", "verify"]


@dataclass(frozen=True)
class Problem:
    file: str
    what: str


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify", help="re-hash every shard and report mismatches (exit 1)")
    p.add_argument("url", help="dataset directory or remote URL")
    p.add_argument("--split", help="sub-directory of the dataset")
    p.add_argument("--concurrency", type=int, default=8, help="files read at once (default 8)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=run)


def _check(data: bytes, info: FileInfo) -> list[str]:
    if len(data) != info.bytes:
        return [f"size {len(data)} != {info.bytes} in index.json"]
    bad = []
    for algo, want in sorted(info.hashes.items()):
        got = hexdigest(algo, data)
        if got != want.lower():
            bad.append(f"{algo} {got} != {want} in index.json")
    return bad


def _check_file(data: bytes, stored: FileInfo, raw: FileInfo, compression: str | None) -> list[str]:
    bad = _check(data, stored)
    if bad or stored is raw:
        return bad
    try:
        plain = decompress(compression, data, raw.bytes, stored.basename)
    except AstreamError as exc:
        return [f"cannot decompress: {exc}"]
    return [f"decompressed: {w}" for w in _check(plain, raw)]


def _files(s: ShardEntry) -> list[tuple[FileInfo, FileInfo]]:
    out = [(s.zip_data or s.raw_data, s.raw_data)]
    if s.raw_meta is not None:
        out.append((s.zip_meta or s.raw_meta, s.raw_meta))
    return out


async def verify(url: str, index: Index, concurrency: int) -> tuple[list[Problem], int, int]:
    """Check every file; return (problems, files checked, bytes read)."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be >= 1, got {concurrency}")
    sem = asyncio.Semaphore(concurrency)
    problems: list[Problem] = []
    totals = [0, 0]
    store: Any = None
    root = local_path(url) if is_local(url) else None
    if root is None:
        from astream.storage import open_store

        store = open_store(url)

    async def read(key: str) -> bytes:
        if root is None:
            data: bytes = await store.get_range(key)
            return data

        def load() -> bytes:
            with open(os.path.join(root, key), "rb") as f:
                return f.read()

        try:
            return await asyncio.to_thread(load)
        except FileNotFoundError:
            raise ObjectNotFoundError("missing", os.path.join(root, key)) from None

    async def one(s: ShardEntry, stored: FileInfo, raw: FileInfo) -> None:
        async with sem:
            try:
                data = await read(stored.basename)
            except ObjectNotFoundError:
                problems.append(Problem(stored.basename, "missing"))
                return
            bad = await asyncio.to_thread(_check_file, data, stored, raw, s.compression)
            totals[0] += 1
            totals[1] += len(data)
        problems.extend(Problem(stored.basename, w) for w in bad)

    try:
        await asyncio.gather(*(one(s, st, raw) for s in index.shards for st, raw in _files(s)))
    finally:
        if store is not None:
            await store.aclose()
    problems.sort(key=lambda p: p.file)
    return problems, totals[0], totals[1]


def run(args: argparse.Namespace) -> int:
    from astream.runtime import bridge

    url = join_split(args.url, args.split)
    index = read_index(url)
    t0 = time.perf_counter()
    problems, files, nbytes = bridge.run(verify(url, index, args.concurrency))
    dt = time.perf_counter() - t0
    hashed = any(s.hashes for s in index.shards)
    if args.json:
        out = {
            "url": url,
            "shards": len(index.shards),
            "files_checked": files,
            "bytes_read": nbytes,
            "hashes_listed": hashed,
            "ok": not problems,
            "problems": [{"file": p.file, "problem": p.what} for p in problems],
        }
        print(json.dumps(out, indent=1))
    else:
        for p in problems:
            print(f"MISMATCH {p.file}: {p.what}")
        verdict = "all files match" if not problems else f"{len(problems)} problem(s)"
        print(
            f"verified {len(index.shards)} shards ({files} files, {human_bytes(nbytes)}) "
            f"in {dt:.2f} s: {verdict}"
        )
        if not hashed:
            print("note: index.json lists no hashes; only sizes (and decompression) were checked")
    return 1 if problems else 0
