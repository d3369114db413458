"""``astream verify``: re-read every shard file of a dataset, concurrently, check its size and
every hash index.json lists, then run the reader's structural checks on it and decode every
sample; exit 1 on any problem (``--quick``: sizes and hashes only).

Theory of operation
-------------------
First every entry of index.json is checked against the format's schema (``SCHEMA``): the key
set of its format (a missing or unknown key, with the closest known key for a misspelt one),
each value's type, then the validating parser's own rules. Each problem is reported against
``index.json`` and names the entry; an entry with one is not read further, the others are. Its
``hashes`` list is checked against its files' digests: a digest of an algorithm the list does
not name is a problem, and so is an algorithm the list names without a digest (its digest is
computed over the file and shown). A top-level ``index.json`` that is not an object with a
``shards`` list and version 2 is an error (exit 2), as before.

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
index, and here also its ``hashes``, ``compression`` and ``size_limit``) and every sample is
decoded column by column. The first failure of a shard is reported as ``sample <i>: <what>``.
Columns of unsafe encodings (``pkl``) are decoded only with ``--allow-unsafe-types``
(unpickling runs code); otherwise their shards get the structural checks and a note says the
columns were not decoded.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from astream.cli.common import human_bytes, is_local, join_split, local_path
from astream.core.compression import decompress
from astream.core.encodings import UNSAFE_ENCODINGS
from astream.core.hashing import hash_names, hexdigest
from astream.core.index import INDEX_BASENAME, FileInfo, Index, ShardEntry, parse_index
from astream.core.shard import SampleDecoder, ShardView, header_size
from astream.core.splitformats import SplitShardView
from astream.errors import AstreamError, ConfigError, FormatError, ObjectNotFoundError

__all__ = ["SCHEMA", "Problem", "add_parser", "check_index", "run", "verify"]


@dataclass(frozen=True)
class Problem:
    file: str
    what: str


# -- the schema of a shard entry (MDS_FORMAT.md, "index.json"): key -> kind of value ------------

_COMMON = {
    "compression": "str?",
    "format": "str",
    "hashes": "strs",
    "raw_data": "file",
    "samples": "int",
    "size_limit": "int?",
    "version": "two",
    "zip_data": "file?",
}
_SPLIT = {"newline": "str", "raw_meta": "file", "zip_meta": "file?"}
_COLUMNS = {"column_encodings": "strs", "column_names": "strs"}
SCHEMA: dict[str, dict[str, str]] = {
    "mds": {**_COMMON, **_COLUMNS, "column_sizes": "sizes"},
    "json": {**_COMMON, **_SPLIT, "columns": "str_map"},
    "csv": {**_COMMON, **_SPLIT, **_COLUMNS},
    "tsv": {**_COMMON, **_SPLIT, **_COLUMNS},
    "xsv": {**_COMMON, **_SPLIT, **_COLUMNS, "separator": "str"},
}
_FILE = {"basename": "str", "bytes": "int", "hashes": "digests"}
_FILES = ("raw_data", "zip_data", "raw_meta", "zip_meta")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _is_strs(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


_KINDS: dict[str, tuple[str, Callable[[Any], bool]]] = {
    "str": ("a string", lambda v: isinstance(v, str)),
    "str?": ("a string or null", lambda v: v is None or isinstance(v, str)),
    "int": ("an integer >= 0", _is_int),
    "int?": ("an integer >= 0 or null", lambda v: v is None or _is_int(v)),
    "two": ("2", lambda v: _is_int(v) and v == 2),
    "strs": ("a list of strings", _is_strs),
    "sizes": (
        "a list of integers >= 0 or nulls",
        lambda v: isinstance(v, list) and all(x is None or _is_int(x) for x in v),
    ),
    "str_map": (
        "an object of strings",
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    ),
    "digests": (
        "an object of string digests",
        lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    ),
}


def _shown(v: Any) -> str:
    text = json.dumps(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _keys(obj: dict[str, Any], want: dict[str, str], path: str = "") -> list[str]:
    """Problems of ``obj``'s key set against ``want``'s keys, and of each known key's type
    (``path``: where ``obj`` is in the entry, "" for the entry itself)."""
    out = []
    at = f"{path}: " if path else ""
    dot = f"{path}." if path else ""
    for k in sorted(k for k in want if k not in obj):
        out.append(f"{at}missing key {k!r}")
    for k in sorted(k for k in obj if k not in want):
        near = difflib.get_close_matches(k, list(want), n=1, cutoff=0.75)
        hint = f" (did you mean {near[0]!r}?)" if near and near[0] not in obj else ""
        out.append(f"{at}unknown key {k!r}{hint}")
    for k, kind in want.items():
        if k not in obj:
            continue
        v = obj[k]
        if kind in ("file", "file?"):
            if v is None and kind == "file?":
                continue
            if not isinstance(v, dict):
                out.append(f"{dot}{k}: expected an object {{basename, bytes, hashes}}, "
                           f"got {_shown(v)}")  # fmt: skip
                continue
            out.extend(_keys(v, _FILE, f"{dot}{k}"))
            continue
        desc, ok = _KINDS[kind]
        if not ok(v):
            out.append(f"{dot}{k}: expected {desc}, got {_shown(v)}")
    return out


def _hash_listing(obj: dict[str, Any]) -> list[str]:
    """Problems of an entry's ``hashes`` against its files' digests that need no file: an
    algorithm no hash library knows, and a digest of an algorithm ``hashes`` does not list
    (an algorithm the list names without a digest is reported with the file, whose digest
    is then computed)."""
    known = set(hash_names())
    listed = obj["hashes"]
    out = [f"hashes: unsupported hash algorithm {a!r}" for a in listed if a not in known]
    for key in _FILES:
        info = obj.get(key)
        if not isinstance(info, dict):
            continue
        for algo in sorted(info["hashes"]):
            if algo not in known:
                out.append(f"{key}.hashes: unsupported hash algorithm {algo!r}")
            elif algo not in listed:
                out.append(
                    f"{key}.hashes has a {algo} digest, but hashes {_shown(listed)} does not "
                    f"list {algo}"
                )
    return out


def _entry(obj: Any, i: int, source: str) -> tuple[ShardEntry | None, list[str]]:
    """Shard entry ``i`` parsed (None when it breaks the schema or the parser's rules), and
    its problems, each starting ``shards[i] (<basename>): ``."""
    head = f"shards[{i}]"
    if not isinstance(obj, dict):
        return None, [f"{head}: expected an object, got {_shown(obj)}"]
    raw = obj.get("raw_data")
    if isinstance(raw, dict) and isinstance(raw.get("basename"), str):
        head += f" ({raw['basename']})"
    fmt = obj.get("format")
    if not isinstance(fmt, str) or fmt not in SCHEMA:
        formats = ", ".join(sorted(SCHEMA))
        return None, [f"{head}: format: unknown shard format {_shown(fmt)} (one of {formats})"]
    bad = _keys(obj, SCHEMA[fmt])
    if bad:
        return None, [f"{head}: {w}" for w in bad]
    bad = [f"{head}: {w}" for w in _hash_listing(obj)]
    try:  # the validating parser's own rules (encodings, sizes, basenames, ...)
        one = parse_index(json.dumps({"shards": [obj], "version": 2}).encode(), source)
    except FormatError as exc:
        msg = _message(exc)
        for lead in ("shards[0]: ", "shards[0]."):
            if msg.startswith(lead):
                msg = msg[len(lead) :]
        return None, [*bad, f"{head}: {msg}"]
    return one.shards[0], bad  # a listing problem: its files are still read and checked


@dataclass(frozen=True)
class Checked:
    """index.json checked entry by entry: the entries to read (as an Index), every problem
    found in the entries, and how many entries it has."""

    index: Index
    problems: list[Problem]
    entries: int


def check_index(data: bytes, source: str) -> Checked:
    """Check every shard entry of index.json bytes against the format's schema. A document
    that is not an object with a ``shards`` list and version 2 raises the parser's
    :class:`FormatError`."""
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    if not (isinstance(obj, dict) and isinstance(obj.get("shards"), list)) or (
        obj.get("version") != 2 or isinstance(obj.get("version"), bool)
    ):
        parse_index(data, source)  # raises its precise error
        raise FormatError("not an index.json", source)  # pragma: no cover
    name = os.path.basename(source)
    problems: list[Problem] = []
    good: list[ShardEntry] = []
    owner: dict[str, int] = {}
    for i, raw in enumerate(obj["shards"]):
        entry, bad = _entry(raw, i, source)
        problems.extend(Problem(name, w) for w in bad)
        if entry is None:
            continue
        files = [f.basename for f in (entry.raw_data, entry.zip_data, entry.raw_meta,
                                      entry.zip_meta) if f is not None]  # fmt: skip
        clash = [f for f in files if f in owner]
        if clash:
            problems.append(
                Problem(name, f"shards[{i}]: file {clash[0]} is also shards[{owner[clash[0]]}]'s")
            )
            continue
        owner.update(dict.fromkeys(files, i))
        good.append(entry)
    return Checked(Index(good, {}), problems, len(obj["shards"]))


def _index_bytes(url: str) -> tuple[bytes, str]:
    """``url``/index.json's bytes, and the name errors give it."""
    if is_local(url):
        path = os.path.join(local_path(url), INDEX_BASENAME)
        try:
            with open(path, "rb") as f:
                return f.read(), path
        except FileNotFoundError:
            raise ObjectNotFoundError("no index.json (is this an MDS dataset?)", path) from None
    from astream import bridge
    from astream.storage import open_store

    async def go() -> bytes:
        store = open_store(url)
        try:
            data: bytes = await store.get_range(INDEX_BASENAME)
            return data
        finally:
            await store.aclose()

    return bridge.run(go()), url.rstrip("/") + "/" + INDEX_BASENAME


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


def _check(data: bytes, info: FileInfo, listed: Sequence[str] = ()) -> list[str]:
    """Size, then every digest ``info`` has; then every algorithm of ``listed`` (the entry's
    ``hashes``) that ``info`` has no digest of, with the file's digest."""
    if len(data) != info.bytes:
        return [f"size {len(data)} != {info.bytes} in index.json"]
    known = set(hash_names())  # an unknown algorithm is reported with the index entry
    bad = []
    for algo, want in sorted(info.hashes.items()):
        if algo not in known:
            continue
        got = hexdigest(algo, data)
        if got != want.lower():
            bad.append(f"{algo} {got} != {want} in index.json")
    for algo in listed:
        if algo in known and algo not in info.hashes:
            bad.append(
                f"hashes lists {algo}, but index.json has no {algo} digest of {info.basename} "
                f"(the file's is {hexdigest(algo, data)})"
            )
    return bad


def _check_file(
    data: bytes,
    stored: FileInfo,
    raw: FileInfo,
    compression: str | None,
    listed: Sequence[str] = (),
) -> tuple[list[str], bytes | None]:
    """Problems of one stored file, and its plain (decompressed) bytes when it had none."""
    bad = _check(data, stored, listed)
    if bad:
        return bad, None
    if stored is raw:
        return [], data
    try:
        plain = decompress(compression, data, raw.bytes, stored.basename)
    except AstreamError as exc:
        return [f"cannot decompress: {exc}"], None
    bad = [f"decompressed: {w}" for w in _check(plain, raw, listed)]
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


def _config_differs(s: ShardEntry, data: bytes, meta: bytes | None) -> str | None:
    """Where the config JSON a shard carries (an MDS shard's, a split shard's meta file's)
    differs from its index entry, on any key both have; None when it agrees. Called once the
    reader's checks passed, so the bytes are where the header says."""
    if s.format == "mds":
        raw = data[header_size(s.samples) : int.from_bytes(data[4:8], "little")]
        what = "shard config"
    else:
        if meta is None:  # pragma: no cover - _files always lists the meta file
            return None
        raw = meta[header_size(s.samples) :]
        what = "meta file config"
    try:
        config = json.loads(raw)
    except ValueError:
        return f"{what} JSON is corrupt"
    if not isinstance(config, dict):
        return f"{what} JSON is not an object"
    want = s.config()
    for key in sorted(want):
        if key not in config:
            continue
        got, exp = config[key], want[key]
        if key == "hashes" and isinstance(got, list) and sorted(set(map(str, got))) == exp:
            continue
        if got != exp:
            return f"{what} {key} {_shown(got)} differs from the index {_shown(exp)}"
    return None


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
                differs = _config_differs(s, data, None)
                if differs is not None:
                    return differs
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
            differs = _config_differs(s, data, meta)
            if differs is not None:
                return differs
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
                bad, body = await asyncio.to_thread(
                    _check_file, data, stored, raw, s.compression, s.hashes
                )
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
    t0 = time.perf_counter()
    checked = check_index(*_index_bytes(url))
    index = checked.index
    problems, files, nbytes = bridge.run(
        verify(
            url,
            index,
            args.concurrency,
            quick=args.quick,
            allow_unsafe_types=args.allow_unsafe_types,
        )
    )
    problems = sorted(checked.problems + problems, key=lambda p: p.file)
    dt = time.perf_counter() - t0
    hashed = any(s.hashes for s in index.shards)
    if args.json:
        out = {
            "url": url,
            "shards": checked.entries,
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
            f"verified {checked.entries} shards ({files} files, {human_bytes(nbytes)}) "
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
