"""``astream verify``: re-read every shard file of a dataset, concurrently, check its size and
every hash index.json lists, then run the reader's structural checks on it and decode every
sample; exit 1 on any problem (``--quick``: sizes and hashes only).

Theory of operation
-------------------
For each shard, the file that exists in storage (the compressed one if any, and the meta file
of split formats) is read whole -- ``--concurrency`` at a time, on astream's loop thread for
remote datasets -- and checked against its ``FileInfo`` (size, then each listed hash). A
compressed file is also decompressed and the result checked against the raw ``FileInfo``, so
a shard whose index lists no zip hash is still verified end to end. Hashing and decompression
run in worker threads, so reads of other shards go on meanwhile.

Hashes only prove that the bytes are the ones the writer listed -- and many datasets list none.
So, unless ``--quick``, a shard whose files passed those checks is then opened the way the
reader opens it (``ShardView`` / ``SplitShardView``: the header's sample count against the
index, offsets monotone, inside the file and ending at its size, the config JSON against the
index) and every sample is decoded column by column. The first failure of a shard is reported
as ``sample <i>: <what>``. Columns of unsafe encodings (``pkl``) are decoded only with
``--allow-unsafe-types`` (unpickling runs code); otherwise their shards get the structural
checks and a note says the columns were not decoded.
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
from astream.core.encodings import UNSAFE_ENCODINGS
from astream.core.hashing import hexdigest
from astream.core.index import FileInfo, Index, ShardEntry
from astream.core.shard import SampleDecoder, ShardView
from astream.core.splitformats import SplitShardView
from astream.errors import AstreamError, ConfigError, FormatError, ObjectNotFoundError

__all__ = ["Problem", "add_parser", "run", "verify"]


@dataclass(frozen=True)
class Problem:
    file: str
    what: str


def add_parser(sub: Any) -> None:
    p = sub.add_parser("verify", help="re-hash and decode every shard and report problems (exit 1)")
    p.add_argument("url", help="dataset directory or remote URL")
    p.add_argument("--split", help="sub-directory of the dataset")
    p.add_argument("--concurrency", type=int, default=8, help="files read at once (default 8)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--quick", action="store_true", help="sizes and hashes only (no structure, no decoding)"
    )
    p.add_argument(
        "--allow-unsafe-types",
        action="store_true",
        help="also decode pkl columns (unpickling runs code)",
    )
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


def _check_file(
    data: bytes, stored: FileInfo, raw: FileInfo, compression: str | None
) -> tuple[list[str], bytes | None]:
    """Problems of one stored file, and its plain (decompressed) bytes when it had none."""
    bad = _check(data, stored)
    if bad:
        return bad, None
    if stored is raw:
        return [], data
    try:
        plain = decompress(compression, data, raw.bytes, stored.basename)
    except AstreamError as exc:
        return [f"cannot decompress: {exc}"], None
    bad = [f"decompressed: {w}" for w in _check(plain, raw)]
    return bad, (None if bad else plain)


def _files(s: ShardEntry) -> list[tuple[FileInfo, FileInfo]]:
    out = [(s.zip_data or s.raw_data, s.raw_data)]
    if s.raw_meta is not None:
        out.append((s.zip_meta or s.raw_meta, s.raw_meta))
    return out


def _message(exc: FormatError) -> str:
    msg = str(exc)
    if exc.path is not None and msg.startswith(f"{exc.path}: "):
        msg = msg[len(exc.path) + 2 :]
    return msg


def _unsafe(s: ShardEntry) -> bool:
    return any(enc in UNSAFE_ENCODINGS for enc in s.column_encodings)


def check_structure(
    s: ShardEntry, data: bytes, meta: bytes | None, allow_unsafe_types: bool
) -> str | None:
    """The first structural or decoding problem of one shard's plain bytes, or None.

    The same checks the reader makes when it opens a shard, then every sample decoded."""
    name = s.raw_data.basename
    i = -1
    try:
        if s.format == "mds":
            view = ShardView(data, s, name)
            try:
                if _unsafe(s) and not allow_unsafe_types:
                    return None  # structure checked; pkl columns are not decoded
                decode = SampleDecoder(s, allow_unsafe_types, name).decode
                for i in range(len(view)):
                    decode(view.sample_bytes(i))
            finally:
                view.release()
        else:
            if meta is None:  # pragma: no cover - _files always lists the meta file
                return "meta file not read"
            split = SplitShardView(data, meta, s, name)
            for i in range(len(split)):
                split.sample(i)
    except FormatError as exc:
        msg = _message(exc)
        if i >= 0 and not msg.startswith(f"sample {i}:"):
            msg = f"sample {i}: {msg}"
        return msg
    except Exception as exc:  # a decoder raising anything else is a bad sample all the same
        return f"sample {i}: cannot decode ({type(exc).__name__}: {exc})"
    return None


async def verify(
    url: str,
    index: Index,
    concurrency: int,
    *,
    quick: bool = False,
    allow_unsafe_types: bool = False,
) -> tuple[list[Problem], int, int]:
    """Check every file (and, unless ``quick``, every shard's structure and samples); return
    (problems, files checked, bytes read)."""
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

    async def one(s: ShardEntry) -> None:
        plain: list[bytes | None] = []
        async with sem:
            for stored, raw in _files(s):
                try:
                    data = await read(stored.basename)
                except ObjectNotFoundError:
                    problems.append(Problem(stored.basename, "missing"))
                    plain.append(None)
                    continue
                bad, body = await asyncio.to_thread(_check_file, data, stored, raw, s.compression)
                totals[0] += 1
                totals[1] += len(data)
                problems.extend(Problem(stored.basename, w) for w in bad)
                plain.append(body)
            if quick or any(b is None for b in plain):
                return  # a file already failed: its structure adds nothing
            data_b = plain[0]
            assert data_b is not None
            meta_b = plain[1] if len(plain) > 1 else None
            what = await asyncio.to_thread(check_structure, s, data_b, meta_b, allow_unsafe_types)
        if what is not None:
            problems.append(Problem((s.zip_data or s.raw_data).basename, what))

    try:
        await asyncio.gather(*(one(s) for s in index.shards))
    finally:
        if store is not None:
            await store.aclose()
    problems.sort(key=lambda p: p.file)
    return problems, totals[0], totals[1]


def unsafe_shards(index: Index) -> list[str]:
    return [s.raw_data.basename for s in index.shards if _unsafe(s)]


def run(args: argparse.Namespace) -> int:
    from astream import bridge

    url = join_split(args.url, args.split)
    index = read_index(url)
    t0 = time.perf_counter()
    problems, files, nbytes = bridge.run(
        verify(
            url,
            index,
            args.concurrency,
            quick=args.quick,
            allow_unsafe_types=args.allow_unsafe_types,
        )
    )
    dt = time.perf_counter() - t0
    hashed = any(s.hashes for s in index.shards)
    if args.json:
        out = {
            "url": url,
            "shards": len(index.shards),
            "files_checked": files,
            "bytes_read": nbytes,
            "hashes_listed": hashed,
            "structure_checked": not args.quick,
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
            what = "sizes (and decompression)" if args.quick else "sizes, structure and decoding"
            print(f"note: index.json lists no hashes; only {what} were checked")
        skipped = [] if args.quick or args.allow_unsafe_types else unsafe_shards(index)
        if skipped:
            print(
                f"note: {len(skipped)} shard(s) have pkl columns, not decoded "
                "(pass --allow-unsafe-types to decode them)"
            )
    return 1 if problems else 0
