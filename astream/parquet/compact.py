"""The compact Parquet index: the table as columns, the cache astream writes for itself.

Pure (stdlib + numpy + msgspec). :class:`CompactTable` holds the table as one int64 array per
field, with offsets for the nesting (files -> row groups -> column cells -> byte ranges), plus
the keys, identities, distinct schemas and footers; :func:`dump_compact` ends the file in a
blake2b-256 digest of it. Loading it (:func:`load_compact`) checks the digest and the arrays'
lengths, nothing field by field (a mismatch: ``None``, the caller rebuilds).

:func:`compact_shards` builds the virtual shards from it as a :class:`RowGroupTable` (a
:class:`ShardTable` whose columns are computed with numpy -- the bytes each row group's
projected chunks cover come from one sorted pass over all ranges -- and whose
:class:`RowGroupShard` entries are made when asked):
``list(compact_shards(compact_table(t), c)) == row_group_shards(t, c)``, errors included.
"""

from __future__ import annotations

import hashlib
import json
import struct
from typing import Any

import msgspec
import numpy as np

from astream.core.index import ShardEntry
from astream.core.shard_table import ShardTable
from astream.errors import ConfigError, FormatError
from astream.parquet.table import (
    ParquetFile,
    ParquetTable,
    RowGroup,
    RowGroupShard,
    merge_ranges,
    row_group_shard,
    shard_digest,
)

__all__ = [
    "CompactTable",
    "RowGroupTable",
    "compact_shards",
    "compact_table",
    "dump_compact",
    "is_compact",
    "load_compact",
]

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
        got = self._rows[j] = row_group_shard(
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
        sig = shard_digest(int(ct.sizes[i]), ct.etags[i], proj)
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
