"""The shards of an index as columns: one numpy array or list per field, not one object per shard.

Theory of operation
-------------------
A large dataset has 100k+ shards whose entries differ only in their files (basename, size,
digests) and sample count; the column layout (encodings, names, sizes), compression, hash
algorithms and size limit are nearly always the same. A :class:`ShardTable` stores each shard
as a row of columns (``samples``, ``raw_bytes``, ``zip_bytes`` as int64 arrays, basenames and
digest dicts as lists) plus ``kind[i]``, the position of the shard's *template*: a
:class:`ShardEntry` holding the shared fields, kept once per distinct configuration. A
``ShardEntry`` is built only when code asks for ``table[i]`` (about 2 us) and is not kept.

Tables made from a list of entries (the writer's, the validating parser's, split formats with
meta files) keep that list and serve it as is; the columns are derived from it, so code that
works on columns (sample counts, footprints) has one path for both.

A table is a read-only ``Sequence[ShardEntry]``: ``len``, indexing, slicing (a list), iteration
and ``==`` with any sequence of entries behave as with the list it replaces.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np

from astream.core.shard_entry import FileInfo, ShardEntry

__all__ = ["ShardTable"]

I64 = np.ndarray[Any, np.dtype[np.int64]]


class ShardTable(Sequence[ShardEntry]):
    """Every shard of one index, column-wise (see the module docstring)."""

    __slots__ = (
        "_entries",
        "kind",
        "raw_bytes",
        "raw_hashes",
        "raw_names",
        "samples",
        "templates",
        "zip_bytes",
        "zip_hashes",
        "zip_names",
    )

    def __init__(
        self,
        *,
        templates: list[ShardEntry],
        kind: np.ndarray[Any, np.dtype[np.int32]],
        samples: I64,
        raw_names: list[str],
        raw_bytes: I64,
        raw_hashes: list[dict[str, str]],
        zip_names: list[str | None] | None = None,
        zip_bytes: I64 | None = None,
        zip_hashes: list[dict[str, str]] | None = None,
        entries: list[ShardEntry] | None = None,
    ) -> None:
        self.templates = templates
        self.kind = kind
        self.samples = samples
        self.raw_names = raw_names
        self.raw_bytes = raw_bytes
        self.raw_hashes = raw_hashes
        self.zip_names = zip_names  # None: no shard is compressed
        self.zip_bytes = zip_bytes  # -1 where a shard has no zip file
        self.zip_hashes = zip_hashes
        self._entries = entries

    @classmethod
    def from_entries(cls, entries: Sequence[ShardEntry]) -> ShardTable:
        """A table serving ``entries`` as they are, with its columns derived from them."""
        if isinstance(entries, ShardTable):
            return entries
        entries = list(entries)
        n = len(entries)
        zips = [e.zip_data for e in entries]
        any_zip = any(z is not None for z in zips)
        return cls(
            templates=[],
            kind=np.zeros(n, dtype=np.int32),
            samples=np.fromiter((e.samples for e in entries), dtype=np.int64, count=n),
            raw_names=[e.raw_data.basename for e in entries],
            raw_bytes=np.fromiter((e.raw_data.bytes for e in entries), dtype=np.int64, count=n),
            raw_hashes=[e.raw_data.hashes for e in entries],
            zip_names=[z.basename if z is not None else None for z in zips] if any_zip else None,
            zip_bytes=np.fromiter((z.bytes if z else -1 for z in zips), dtype=np.int64, count=n)
            if any_zip
            else None,
            zip_hashes=[z.hashes if z is not None else {} for z in zips] if any_zip else None,
            entries=entries,
        )

    # -- Sequence ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.raw_names)

    @overload
    def __getitem__(self, i: int) -> ShardEntry: ...

    @overload
    def __getitem__(self, i: slice) -> list[ShardEntry]: ...

    def __getitem__(self, i: int | slice) -> ShardEntry | list[ShardEntry]:
        if isinstance(i, slice):
            return [self._row(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        j = int(i)
        if j < 0:
            j += n
        if not 0 <= j < n:
            raise IndexError(f"shard {i} out of range for {n} shards")
        return self._row(j)

    def __iter__(self) -> Iterator[ShardEntry]:
        if self._entries is not None:
            return iter(self._entries)
        return (self._row(j) for j in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, (str, bytes)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardTable({len(self)} shards)"

    def _row(self, j: int) -> ShardEntry:
        if self._entries is not None:
            return self._entries[j]
        t = self.templates[int(self.kind[j])]
        raw = FileInfo(self.raw_names[j], int(self.raw_bytes[j]), self.raw_hashes[j])
        zip_ = None
        if self.zip_names is not None and self.zip_bytes is not None and self.zip_hashes:
            name = self.zip_names[j]
            if name is not None:
                zip_ = FileInfo(name, int(self.zip_bytes[j]), self.zip_hashes[j])
        return ShardEntry(
            format=t.format,
            column_encodings=t.column_encodings,
            column_names=t.column_names,
            column_sizes=t.column_sizes,
            compression=t.compression,
            hashes=t.hashes,
            raw_data=raw,
            zip_data=zip_,
            samples=int(self.samples[j]),
            size_limit=t.size_limit,
        )

    # -- column views ----------------------------------------------------------------------
    def configs(self) -> list[tuple[int, ShardEntry]]:
        """(first shard, an entry) for each distinct shard configuration: what checks of the
        shared fields (encodings, hash algorithms) need to look at, once per configuration."""
        if self._entries is not None:
            return list(enumerate(self._entries))
        firsts = np.unique(self.kind, return_index=True)[1]
        return [(int(i), self._row(int(i))) for i in sorted(firsts.tolist())]

    def file_names(self) -> Iterator[str]:
        """Every file basename the index names, shard by shard: data (raw, zip), then a split
        shard's meta files."""
        for j, raw in enumerate(self.raw_names):
            yield raw
            if self.zip_names is not None and self.zip_names[j] is not None:
                yield self.zip_names[j]  # type: ignore[misc]
            if self._entries is not None:
                e = self._entries[j]
                yield from (f.basename for f in (e.raw_meta, e.zip_meta) if f is not None)

    def footprints(self) -> I64:
        """Bytes each shard takes in the cache while it is fetched: its data file(s), and a
        split-format shard's meta file(s)."""
        out = self.raw_bytes.copy()
        if self.zip_bytes is not None:
            out += np.maximum(self.zip_bytes, 0)
        if self._entries is not None:
            out += np.fromiter(
                (
                    (e.raw_meta.bytes if e.raw_meta else 0)
                    + (e.zip_meta.bytes if e.zip_meta else 0)
                    for e in self._entries
                ),
                dtype=np.int64,
                count=len(self._entries),
            )
        return out
