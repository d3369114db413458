"""The Parquet index model: files, row groups and the byte ranges of their column chunks.

Pure (stdlib + numpy): nothing here reads an object or parses Thrift; the footers are turned
into :class:`ParquetFile` records by ``parquet/io_footers.py`` (with pyarrow).

A Parquet *table* is a set of ``*.parquet`` objects under one root. Its index records, per
file, the object's identity (key, size, ETag/generation/mtime tag), its footer (the Thrift
``FileMetaData`` bytes, kept so that a reader can decode a row group without reading the footer
again), its top-level column names and, per row group, the row count and the byte ranges of
each top-level column's chunks (a nested column has several leaf chunks, merged here).

Each row group becomes one *virtual shard* (:class:`RowGroupShard`, a :class:`ShardEntry` of
format ``"parquet"``) for the planner: its sample count is the row count, its raw file is the
cache file holding the concatenated chunks of the projected columns (``raw_data.bytes`` is their
total), and :meth:`RowGroupShard.ranges` lists the object byte ranges the fetcher copies, in
that order, into it. The cache file's name carries a digest of the file's identity and the
projection, so a changed object or another projection can never be served stale bytes.

The index has two serialised forms: the published one (``parquet/published.py``, validated
field by field) and the compact one astream caches for itself (``parquet/compact.py``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from astream.core.index import FileInfo, ShardEntry
from astream.errors import ConfigError, FormatError

__all__ = [
    "ParquetFile",
    "ParquetTable",
    "RowGroup",
    "RowGroupShard",
    "merge_ranges",
    "row_group_shard",
    "row_group_shards",
    "select_keys",
    "shard_digest",
]


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


def shard_digest(*parts: object) -> str:
    """The part of a row group's cache-file name that changes with its file's identity and
    the projection."""
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
        sig = shard_digest(f.size, f.etag, tuple(want))
        for g, rg in enumerate(f.row_groups):
            if not rg.rows:
                continue  # a row group of no rows is no shard (pyarrow skips it too)
            ranges = merge_ranges([r for c in want for r in rg.chunks[pos[c]]])
            nbytes = sum(e - s for s, e in ranges)
            name = f"{f.key}.rg{g:05d}.{sig}"
            out.append(row_group_shard(f, g, want, types, name, nbytes, rg.rows, ranges))
    return out


def row_group_shard(
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
