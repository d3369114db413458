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
source), like ``index.json``: that is the published form (``astream index``).

The cache astream writes for itself is the *compact* form (:class:`CompactTable`,
:func:`dump_compact`, :func:`load_compact`): the same table as columns -- one int64 array per
field, with offsets for the nesting (files -> row groups -> column cells -> byte ranges) --
plus the keys, identities, distinct schemas and footers, ending in a blake2b-256 digest of
the file. Loading it checks the digest and the arrays' lengths, nothing field by field (a
mismatch: ``None``, the caller rebuilds). :func:`compact_shards` builds the virtual shards
from it as a :class:`RowGroupTable` (a :class:`ShardTable` whose columns are computed with
numpy -- the bytes each row group's projected chunks cover come from one sorted pass over all
ranges -- and whose :class:`RowGroupShard` entries are made when asked):
``list(compact_shards(compact_table(t), c)) == row_group_shards(t, c)``, errors included.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from astream.core.index import FileInfo, ShardEntry
from astream.core.paths import safe_relpath
from astream.core.shard_table import ShardTable
from astream.errors import ConfigError, FormatError

__all__ = [
    "INDEX_NAME",
    "CompactTable",
    "ParquetFile",
    "ParquetTable",
    "RowGroup",
    "RowGroupShard",
    "RowGroupTable",
    "compact_shards",
    "compact_table",
    "dump_compact",
    "dump_table",
    "load_compact",
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
    first file), one per row group that has rows. A projected column missing from a file, or
    of another type there, is a ``FormatError`` naming the file."""
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
            if not rg.rows:
                continue  # a row group of no rows is no shard (pyarrow skips it too)
            ranges = merge_ranges([r for c in want for r in rg.chunks[pos[c]]])
            nbytes = sum(e - s for s, e in ranges)
            name = f"{f.key}.rg{g:05d}.{sig}"
            out.append(_rg_shard(f, g, want, types, name, nbytes, rg.rows, ranges))
    return out


def _rg_shard(
    f: ParquetFile,
    g: int,
    want: list[str],
    types: dict[str, str],
    name: str,
    nbytes: int,
    rows: int,
    ranges: list[tuple[int, int]],
) -> RowGroupShard:
    """Row group ``g`` of ``f`` as a virtual shard of the columns ``want`` (of ``types``),
    its chunks' merged byte ``ranges`` (``nbytes`` in all) cached under ``name``: the one
    constructor of both the object index (:func:`row_group_shards`) and the compact one."""
    return RowGroupShard(
        format="parquet",
        column_encodings=[types[c] for c in want],
        column_names=want,
        column_sizes=[None] * len(want),
        compression=None,
        hashes=[],
        raw_data=FileInfo(name, nbytes, {}),
        zip_data=None,
        samples=rows,
        size_limit=None,
        source=f,
        row_group=g,
        projection=tuple(want),
        chunk_ranges=tuple(ranges),
    )


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


# -- the compact form: columns, for the cache astream writes itself ---------------------------

I64 = np.ndarray[Any, np.dtype[np.int64]]
_CMAGIC = b"ASTPQIC1"
_CVERSION = 1
_DIGEST = 32  # blake2b-256 of everything before it, at the end of a compact file
_STRS = msgspec.json.Decoder(list[str])
_OPT_STRS = msgspec.json.Decoder(list[str | None])
_SCHEMAS = msgspec.json.Decoder(list[tuple[list[str], list[str]]])
_ARRAYS = ("sizes", "schema", "foot_off", "rg_off", "rows", "cell_off", "range_off", "starts",
           "ends")  # fmt: skip


class CompactTable:
    """A :class:`ParquetTable` as columns (one array per field, no object per row group or
    file): what the local cache holds and what a warm start works on.

    File ``i`` has ``keys[i]``, ``sizes[i]``, ``etags[i]``, the schema ``schemas[schema[i]]``
    (``(names, types)``; tables nearly always have one) and the footer
    ``footers[foot_off[i]:foot_off[i + 1]]``; its row groups are ``rg_off[i]:rg_off[i + 1]``
    (global numbers), row group ``g`` has ``rows[g]`` rows and one *cell* per top-level column
    of its file, ``cell_off[g]:cell_off[g + 1]``; cell ``c``'s byte ranges are
    ``starts/ends[range_off[c]:range_off[c + 1]]``. :meth:`file` builds one file's
    :class:`ParquetFile` when asked (kept: the row groups' virtual shards point at it)."""

    __slots__ = ("_files", "cell_off", "ends", "etags", "foot_off", "footers", "keys", "range_off",
                 "rg_off", "rows", "schema", "schemas", "sizes", "starts")  # fmt: skip

    def __init__(
        self,
        *,
        keys: list[str],
        etags: list[str | None],
        schemas: list[tuple[tuple[str, ...], tuple[str, ...]]],
        footers: bytes,
        sizes: I64,
        schema: I64,
        foot_off: I64,
        rg_off: I64,
        rows: I64,
        cell_off: I64,
        range_off: I64,
        starts: I64,
        ends: I64,
    ) -> None:
        self.keys = keys
        self.etags = etags
        self.schemas = schemas
        self.footers = footers
        self.sizes = sizes
        self.schema = schema
        self.foot_off = foot_off
        self.rg_off = rg_off
        self.rows = rows
        self.cell_off = cell_off
        self.range_off = range_off
        self.starts = starts
        self.ends = ends
        self._files: dict[int, ParquetFile] = {}

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def rows_total(self) -> int:
        return int(self.rows.sum())

    def file(self, i: int) -> ParquetFile:
        got = self._files.get(i)
        if got is not None:
            return got
        names, types = self.schemas[int(self.schema[i])]
        groups = []
        co, ro, st, en = self.cell_off, self.range_off, self.starts, self.ends
        for g in range(int(self.rg_off[i]), int(self.rg_off[i + 1])):
            chunks = []
            for c in range(int(co[g]), int(co[g + 1])):
                a, b = int(ro[c]), int(ro[c + 1])
                chunks.append(tuple(zip(st[a:b].tolist(), en[a:b].tolist())))
            groups.append(RowGroup(int(self.rows[g]), tuple(chunks)))
        a, b = int(self.foot_off[i]), int(self.foot_off[i + 1])
        got = self._files[i] = ParquetFile(
            self.keys[i], int(self.sizes[i]), self.etags[i], names, types, tuple(groups),
            self.footers[a:b],
        )  # fmt: skip
        return got

    def table(self) -> ParquetTable:
        """Every file as objects (the slow form)."""
        return ParquetTable(tuple(self.file(i) for i in range(len(self))))


def compact_table(table: ParquetTable) -> CompactTable:
    """``table`` as columns."""
    schemas: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    seen: dict[tuple[tuple[str, ...], tuple[str, ...]], int] = {}
    schema, rg_off, foot_off, rows, cell_off, range_off = [], [0], [0], [], [0], [0]
    starts: list[int] = []
    ends: list[int] = []
    for f in table.files:
        k = seen.setdefault((f.columns, f.types), len(seen))
        if k == len(schemas):
            schemas.append((f.columns, f.types))
        schema.append(k)
        foot_off.append(foot_off[-1] + len(f.footer))
        rg_off.append(rg_off[-1] + len(f.row_groups))
        for g in f.row_groups:
            rows.append(g.rows)
            cell_off.append(cell_off[-1] + len(g.chunks))
            for c in g.chunks:
                range_off.append(range_off[-1] + len(c))
                for s, e in c:
                    starts.append(s)
                    ends.append(e)

    def arr(x: list[int]) -> I64:
        return np.asarray(x, dtype=np.int64)

    return CompactTable(
        keys=[f.key for f in table.files],
        etags=[f.etag for f in table.files],
        schemas=schemas,
        footers=b"".join(f.footer for f in table.files),
        sizes=arr([f.size for f in table.files]),
        schema=arr(schema), foot_off=arr(foot_off), rg_off=arr(rg_off), rows=arr(rows),
        cell_off=arr(cell_off), range_off=arr(range_off), starts=arr(starts), ends=arr(ends),
    )  # fmt: skip


def dump_compact(ct: CompactTable) -> bytes:
    """``b"ASTPQIC1" | u64 header length | header JSON | arrays (<i8) | blobs | digest``; the
    digest (blake2b-256 of everything before it) is what lets :func:`load_compact` trust it."""
    parts: list[bytes] = []
    where: dict[str, list[int]] = {}
    pos = 0
    for name in _ARRAYS:
        b = np.ascontiguousarray(getattr(ct, name), dtype="<i8").tobytes()
        where[name] = [pos, len(b) // 8]
        parts.append(b)
        pos += len(b)
    blobs = {
        "keys": msgspec.json.encode(ct.keys),
        "etags": msgspec.json.encode(ct.etags),
        "schemas": msgspec.json.encode([[list(n), list(t)] for n, t in ct.schemas]),
        "footers": bytes(ct.footers),
    }
    for name, blob in blobs.items():
        where[name] = [pos, len(blob)]
        parts.append(blob)
        pos += len(blob)
    head = json.dumps({"version": _CVERSION, "where": where}, sort_keys=True).encode()
    head += b" " * (-(len(_CMAGIC) + 8 + len(head)) % 8)  # arrays 8-aligned
    body = b"".join([_CMAGIC, struct.pack("<Q", len(head)), head, *parts])
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def is_compact(data: bytes) -> bool:
    return data[:8] == _CMAGIC


def load_compact(data: bytes) -> CompactTable | None:
    """The table :func:`dump_compact` wrote, or None when ``data`` is not one whole, intact
    compact file (the caller then rebuilds it: a damaged cache is never an error)."""
    if len(data) < 16 + _DIGEST or data[:8] != _CMAGIC:
        return None
    mv = memoryview(data)
    if hashlib.blake2b(mv[:-_DIGEST], digest_size=_DIGEST).digest() != data[-_DIGEST:]:
        return None
    try:
        (hlen,) = struct.unpack("<Q", mv[8:16])
        head = json.loads(bytes(mv[16 : 16 + hlen]))
        if head.get("version") != _CVERSION:
            return None
        base = 16 + hlen
        where = head["where"]
        arrays = {}
        for name in _ARRAYS:
            off, count = where[name]
            arrays[name] = np.frombuffer(data, dtype="<i8", count=count, offset=base + off)

        def blob(name: str) -> memoryview:
            off, n = where[name]
            if base + off + n > len(data) - _DIGEST:
                raise ValueError(name)
            return mv[base + off : base + off + n]

        keys = _STRS.decode(blob("keys"))
        etags = _OPT_STRS.decode(blob("etags"))
        schemas = [(tuple(n), tuple(t)) for n, t in _SCHEMAS.decode(blob("schemas"))]
        footers = bytes(blob("footers"))
    except (ValueError, KeyError, TypeError, struct.error, msgspec.DecodeError):
        return None
    n, g = len(keys), len(arrays["rows"])
    shape_ok = (
        len(etags) == n == len(arrays["sizes"]) == len(arrays["schema"])
        and len(arrays["foot_off"]) == n + 1 == len(arrays["rg_off"])
        and len(arrays["cell_off"]) == g + 1
        and len(arrays["range_off"]) == int(arrays["cell_off"][-1]) + 1
        and len(arrays["starts"]) == len(arrays["ends"]) == int(arrays["range_off"][-1])
        and int(arrays["rg_off"][-1]) == g
        and int(arrays["foot_off"][-1]) == len(footers)
        and (n == 0 or int(arrays["schema"].min()) >= 0)
        and (n == 0 or int(arrays["schema"].max()) < len(schemas))
    )  # fmt: skip
    if not shape_ok:
        return None
    return CompactTable(keys=keys, etags=etags, schemas=schemas, footers=footers, **arrays)


class RowGroupTable(ShardTable):
    """The virtual shards of a :class:`CompactTable` as a shard table: the columns the planner
    uses (sample counts, cache-file names and sizes) are arrays; a :class:`RowGroupShard` is
    built when a shard is asked for (and kept: a process asks for the ones it reads)."""

    __slots__ = ("_rows", "compact", "file_of", "group_of", "pos", "types_of", "want")

    def __init__(self, compact: CompactTable, want: list[str], types_of: dict[str, str],
                 pos: list[list[int]], file_of: I64, group_of: I64,
                 **columns: Any) -> None:  # fmt: skip
        super().__init__(**columns)
        self.compact = compact
        self.want = want
        self.types_of = types_of
        self.pos = pos  # per schema: the projected columns' positions in that schema
        self.file_of = file_of
        self.group_of = group_of  # shard j is the table's row group group_of[j] (rows > 0)
        self._rows: dict[int, RowGroupShard] = {}

    def _row(self, j: int) -> ShardEntry:
        got = self._rows.get(j)
        if got is not None:
            return got
        ct = self.compact
        i = int(self.file_of[j])
        f = ct.file(i)
        g = int(self.group_of[j]) - int(ct.rg_off[i])
        chunks = f.row_groups[g].chunks
        want = self.want
        ranges = merge_ranges([r for p in self.pos[int(ct.schema[i])] for r in chunks[p]])
        got = self._rows[j] = _rg_shard(
            f, g, want, self.types_of, self.raw_names[j], int(self.raw_bytes[j]),
            int(self.samples[j]), ranges,
        )  # fmt: skip
        return got

    def to_compact(self, meta: dict[str, Any], extra: dict[str, Any]) -> bytes | None:
        return None  # an MDS index's compact copy; a Parquet table has its own


def _union_bytes(gid: I64, s: I64, e: I64, groups: int, limit: int) -> I64:
    """Per group (``gid`` in ``[0, groups)``): the bytes the union of its ranges covers,
    touching or overlapping ranges counted once (as :func:`merge_ranges` merges them).
    ``limit``: every end is at most this."""
    out = np.zeros(groups, dtype=np.int64)
    if not len(s):
        return out
    if groups * (limit + 1) >= 1 << 62:  # the shifted offsets would overflow: group by group
        for g in range(groups):
            m = gid == g
            out[g] = sum(b - a for a, b in merge_ranges(list(zip(s[m].tolist(), e[m].tolist()))))
        return out
    # shift each group past the previous one's ends, so one running maximum serves them all
    base = gid * (limit + 1)
    s2, e2 = s + base, e + base
    order = np.lexsort((s2, gid))
    s2, e2, g2 = s2[order], e2[order], gid[order]
    reach = np.maximum.accumulate(e2)
    new = np.ones(len(s2), dtype=bool)
    new[1:] = s2[1:] > reach[:-1]  # a range starting at or before the reach so far merges
    first = np.flatnonzero(new)
    last = np.append(first[1:] - 1, len(s2) - 1)
    np.add.at(out, g2[first], reach[last] - s2[first])
    return out


def compact_shards(ct: CompactTable, columns: list[str] | None) -> RowGroupTable | list[Any]:
    """:func:`row_group_shards` of ``ct.table()`` -- the same entries, the same errors -- built
    from the columns without an object per row group."""
    n = len(ct)
    if not n:
        return []
    names0, types0 = ct.schemas[int(ct.schema[0])]
    want = list(names0) if columns is None else list(columns)
    types_of = dict(zip(names0, types0))
    for c in want:
        if c not in types_of:
            raise ConfigError(
                f"columns: {c!r} is not a column of {ct.keys[0]} (columns: {list(names0)})"
            )
    pos: list[list[int]] = []
    bad: list[str | None] = []
    for names, types in ct.schemas:
        at = {c: i for i, c in enumerate(names)}
        msg = None
        for c in want:
            if c not in at:
                msg = f"has no column {c!r} (the first file has it)"
            elif types[at[c]] != types_of[c]:
                msg = f"column {c!r} is {types[at[c]]}, the first file's is {types_of[c]}"
            if msg:
                break
        bad.append(msg)
        pos.append([at.get(c, 0) for c in want])
    if any(bad):
        i = next(i for i in range(n) if bad[int(ct.schema[i])])
        raise FormatError(bad[int(ct.schema[i])], ct.keys[i])  # type: ignore[arg-type]
    groups = len(ct.rows)
    per_file = np.diff(ct.rg_off)
    file_of = np.repeat(np.arange(n, dtype=np.int64), per_file)
    # the projected cells of every row group: (groups, len(want))
    posa = np.asarray(pos, dtype=np.int64).reshape(len(pos), len(want))
    cells = ct.cell_off[:-1, None] + posa[ct.schema[file_of]]
    lo, hi = ct.range_off[cells].ravel(), ct.range_off[cells + 1].ravel()
    counts = hi - lo
    total = int(counts.sum())
    idx = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(total, dtype=np.int64)
    gid = np.repeat(np.repeat(np.arange(groups, dtype=np.int64), len(want)), counts)
    limit = max(int(ct.sizes.max()), int(ct.ends.max(initial=0)))
    nbytes = _union_bytes(gid, ct.starts[idx], ct.ends[idx], groups, limit)
    proj = tuple(want)
    raw_names: list[str] = []
    for i, (key, g0, g1) in enumerate(
        zip(ct.keys, ct.rg_off[:-1].tolist(), ct.rg_off[1:].tolist())
    ):
        sig = _digest(int(ct.sizes[i]), ct.etags[i], proj)
        raw_names += [f"{key}.rg{g:05d}.{sig}" for g in range(g1 - g0)]
    keep = np.flatnonzero(ct.rows > 0)  # a row group of no rows is no shard
    if len(keep) < groups:
        file_of, nbytes = file_of[keep], nbytes[keep]
        raw_names = [raw_names[g] for g in keep.tolist()]
    return RowGroupTable(
        ct, want, types_of, pos, file_of, keep,
        templates=[], kind=np.zeros(len(keep), dtype=np.int32), samples=ct.rows[keep],
        raw_names=raw_names, raw_bytes=nbytes, raw_hashes=[_NO_HASHES] * len(keep),
    )  # fmt: skip


_NO_HASHES: dict[str, str] = {}
