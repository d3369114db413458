"""The Parquet index model: files, row groups and the byte ranges of their column chunks.

Theory of operation
-------------------
A Parquet *table* is a set of ``*.parquet`` objects under one root. Its index records, per
file, the object's identity (key, size, ETag/generation/mtime tag), its footer (the Thrift
``FileMetaData`` bytes, kept so that a reader can decode a row group without reading the footer
again), its top-level column names and, per row group, the row count and the byte ranges of
each top-level column's chunks (a nested column has several leaf chunks, merged here). Nothing
here parses Thrift: the runtime builds :class:`ParquetFile` records from footers with pyarrow;
this module is pure (stdlib + numpy).

Each row group becomes one *virtual shard* (:class:`RowGroupShard`, a :class:`ShardEntry` of
format ``"parquet"``) for the planner: its sample count is the row count, its raw file is the
cache file holding the concatenated chunks of the projected columns (``raw_data.bytes`` is their
total), and :meth:`RowGroupShard.ranges` lists the object byte ranges the fetcher copies, in
that order, into it. The cache file's name carries a digest of the file's identity and the
projection, so a changed object or another projection can never be served stale bytes.

The index serialises to one binary file (:func:`dump_table`, :func:`parse_table`):
``b"ASTPQIX1" | u64 json length | JSON | footer bytes``; the JSON gives each footer's offset
and length in the blob. Untrusted bytes are validated field by field (``FormatError`` naming the
source), like ``index.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from astream.core.index import FileInfo, ShardEntry
from astream.core.paths import safe_relpath
from astream.errors import ConfigError, FormatError

__all__ = [
    "INDEX_NAME",
    "ParquetFile",
    "ParquetTable",
    "RowGroup",
    "RowGroupShard",
    "dump_table",
    "merge_ranges",
    "parse_table",
    "row_group_shards",
    "select_keys",
]

INDEX_NAME = "_astream_parquet_index.bin"  # written next to the data by `astream index`
_MAGIC = b"ASTPQIX1"
_VERSION = 1


@dataclass(frozen=True)
class RowGroup:
    """One row group: its row count and, per top-level column (file order), its byte ranges
    ``[start, end)`` in the object."""

    rows: int
    chunks: tuple[tuple[tuple[int, int], ...], ...]


@dataclass(frozen=True)
class ParquetFile:
    """One object of the table, as its footer describes it."""

    key: str
    size: int
    etag: str | None
    columns: tuple[str, ...]
    types: tuple[str, ...]
    row_groups: tuple[RowGroup, ...]
    footer: bytes = field(repr=False)

    def identity(self) -> tuple[str, int, str | None]:
        return (self.key, self.size, self.etag)

    @property
    def rows(self) -> int:
        return sum(g.rows for g in self.row_groups)


@dataclass(frozen=True)
class ParquetTable:
    """Every file of the table, in key order."""

    files: tuple[ParquetFile, ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for f in self.files)

    def schema(self) -> list[tuple[str, str]]:
        """(name, arrow type) of the first file's top-level columns."""
        if not self.files:
            return []
        f = self.files[0]
        return list(zip(f.columns, f.types))


def merge_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, with touching or overlapping ranges merged."""
    out: list[tuple[int, int]] = []
    for s, e in sorted(ranges):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


@dataclass(frozen=True)
class RowGroupShard(ShardEntry):
    """A row group of a Parquet object as a virtual shard (see the module docstring)."""

    source: ParquetFile | None = None
    row_group: int = 0
    projection: tuple[str, ...] = ()
    chunk_ranges: tuple[tuple[int, int], ...] = ()

    def ranges(self) -> tuple[tuple[int, int], ...]:
        return self.chunk_ranges


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=6).hexdigest()


def row_group_shards(table: ParquetTable, columns: list[str] | None) -> list[RowGroupShard]:
    """The virtual shards of ``table`` projected on ``columns`` (None: every column of the
    first file). A projected column missing from a file, or of another type there, is a
    ``FormatError`` naming the file."""
    if not table.files:
        return []
    first = table.files[0]
    want = list(first.columns) if columns is None else list(columns)
    types = dict(zip(first.columns, first.types))
    for c in want:
        if c not in types:
            raise ConfigError(
                f"columns: {c!r} is not a column of {first.key} (columns: {list(first.columns)})"
            )
    out: list[RowGroupShard] = []
    for f in table.files:
        pos = {c: i for i, c in enumerate(f.columns)}
        for c in want:
            if c not in pos:
                raise FormatError(f"has no column {c!r} (the first file has it)", f.key)
            if f.types[pos[c]] != types[c]:
                raise FormatError(
                    f"column {c!r} is {f.types[pos[c]]}, the first file's is {types[c]}", f.key
                )
        sig = _digest(f.size, f.etag, tuple(want))
        for g, rg in enumerate(f.row_groups):
            ranges = merge_ranges([r for c in want for r in rg.chunks[pos[c]]])
            nbytes = sum(e - s for s, e in ranges)
            out.append(
                RowGroupShard(
                    format="parquet",
                    column_encodings=[types[c] for c in want],
                    column_names=want,
                    column_sizes=[None] * len(want),
                    compression=None,
                    hashes=[],
                    raw_data=FileInfo(f"{f.key}.rg{g:05d}.{sig}", nbytes, {}),
                    zip_data=None,
                    samples=rg.rows,
                    size_limit=None,
                    source=f,
                    row_group=g,
                    projection=tuple(want),
                    chunk_ranges=tuple(ranges),
                )
            )
    return out


def select_keys(keys: list[str], split: str | None) -> list[str]:
    """The ``*.parquet`` keys of a listing, sorted; with ``split``, those of that split in the
    Hugging Face datasets layouts: a directory named ``split`` anywhere in the key
    (``train/0.parquet``, ``data/train/0.parquet``) or a file name starting with
    ``split`` then ``-``, ``_`` or ``.`` (``data/train-00000-of-00002.parquet``)."""
    out = [k for k in keys if k.endswith(".parquet")]
    if split:
        name = re.compile(rf"^{re.escape(split)}[-_.]")
        out = [k for k in out if split in k.split("/")[:-1] or name.match(k.rsplit("/", 1)[-1])]
    return sorted(out)


# -- serialisation ---------------------------------------------------------------------------


def dump_table(table: ParquetTable) -> bytes:
    blob = bytearray()
    files = []
    for f in table.files:
        files.append(
            {
                "key": f.key,
                "size": f.size,
                "etag": f.etag,
                "columns": list(f.columns),
                "types": list(f.types),
                "footer": [len(blob), len(f.footer)],
                "row_groups": [
                    {"rows": g.rows, "chunks": [[list(r) for r in c] for c in g.chunks]}
                    for g in f.row_groups
                ],
            }
        )
        blob += f.footer
    head = json.dumps({"version": _VERSION, "files": files}, separators=(",", ":")).encode()
    return _MAGIC + struct.pack("<Q", len(head)) + head + bytes(blob)


def _fail(source: str, where: str, msg: str) -> FormatError:
    return FormatError(f"{where}: {msg}", source)


def _int(obj: Any, source: str, where: str) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int) or obj < 0:
        raise _fail(source, where, f"expected an integer >= 0, got {obj!r}")
    return obj


def _strs(obj: Any, source: str, where: str) -> tuple[str, ...]:
    if not isinstance(obj, list) or not all(isinstance(x, str) for x in obj):
        raise _fail(source, where, "expected a list of strings")
    return tuple(obj)


def _file(obj: Any, blob: memoryview, source: str, where: str) -> ParquetFile:
    keys = {"key", "size", "etag", "columns", "types", "footer", "row_groups"}
    if not isinstance(obj, dict) or set(obj) != keys:
        raise _fail(source, where, f"expected the keys {sorted(keys)}")
    key = safe_relpath(obj["key"], source) if isinstance(obj["key"], str) else None
    if key is None:
        raise _fail(source, f"{where}.key", "expected a string")
    size = _int(obj["size"], source, f"{where}.size")
    etag = obj["etag"]
    if etag is not None and not isinstance(etag, str):
        raise _fail(source, f"{where}.etag", "expected a string or null")
    cols = _strs(obj["columns"], source, f"{where}.columns")
    types = _strs(obj["types"], source, f"{where}.types")
    if len(cols) != len(types):
        raise _fail(source, where, "columns and types differ in length")
    fo = obj["footer"]
    if not isinstance(fo, list) or len(fo) != 2:
        raise _fail(source, f"{where}.footer", "expected [offset, length]")
    off, n = (_int(x, source, f"{where}.footer") for x in fo)
    if off + n > len(blob):
        raise _fail(source, f"{where}.footer", "past the end of the footer blob")
    groups = []
    rgs = obj["row_groups"]
    if not isinstance(rgs, list):
        raise _fail(source, f"{where}.row_groups", "expected a list")
    for g, rg in enumerate(rgs):
        w = f"{where}.row_groups[{g}]"
        if not isinstance(rg, dict) or set(rg) != {"rows", "chunks"}:
            raise _fail(source, w, "expected {rows, chunks}")
        chunks = rg["chunks"]
        if not isinstance(chunks, list) or len(chunks) != len(cols):
            raise _fail(source, f"{w}.chunks", f"expected {len(cols)} columns")
        parsed = []
        for c, ranges in enumerate(chunks):
            if not isinstance(ranges, list):
                raise _fail(source, f"{w}.chunks[{c}]", "expected a list of ranges")
            rs = []
            for r in ranges:
                if not isinstance(r, list) or len(r) != 2:
                    raise _fail(source, f"{w}.chunks[{c}]", "expected [start, end] ranges")
                s, e = (_int(x, source, f"{w}.chunks[{c}]") for x in r)
                if not s < e <= size:
                    raise _fail(source, f"{w}.chunks[{c}]", f"range {s}-{e} outside 0-{size}")
                rs.append((s, e))
            parsed.append(tuple(rs))
        groups.append(RowGroup(_int(rg["rows"], source, f"{w}.rows"), tuple(parsed)))
    return ParquetFile(key, size, etag, cols, types, tuple(groups), bytes(blob[off : off + n]))


def parse_table(data: bytes, source: str) -> ParquetTable:
    """Parse and validate a serialised index; ``FormatError`` naming ``source`` and the field."""
    mv = memoryview(data)
    if len(mv) < 16 or bytes(mv[:8]) != _MAGIC:
        raise FormatError("not an astream Parquet index (bad magic)", source)
    (n,) = struct.unpack("<Q", mv[8:16])
    if 16 + n > len(mv):
        raise FormatError("truncated Parquet index", source)
    try:
        obj = json.loads(bytes(mv[16 : 16 + n]))
    except (ValueError, UnicodeDecodeError):
        raise FormatError("Parquet index JSON is corrupt", source) from None
    if not isinstance(obj, dict) or obj.get("version") != _VERSION:
        raise FormatError(f"unsupported Parquet index version (expected {_VERSION})", source)
    files = obj.get("files")
    if not isinstance(files, list):
        raise _fail(source, "files", "expected a list")
    blob = mv[16 + n :]
    return ParquetTable(tuple(_file(f, blob, source, f"files[{i}]") for i, f in enumerate(files)))
