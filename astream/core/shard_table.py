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

Compact copy. A columnar table (one the fast parser made) can be written as one binary file
(:meth:`ShardTable.to_compact`) and read back (:func:`from_compact`) without parsing JSON: a
header (JSON: the caller's metadata, the templates as index entries, the extra top-level keys,
where each column lies) followed by the int columns as raw little-endian arrays, which the
reader maps from the file (no copy, read-only), and the basenames as one newline-joined UTF-8
blob. Digest dicts are stored only when some shard has one (msgspec JSON). The cache keeps
such a copy of a large remote index (:mod:`astream.runtime.catalog`); loading it costs a few
ms per 100k shards where the parse costs ~0.5 s.
"""

from __future__ import annotations

import json
import mmap
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload

import msgspec
import numpy as np

from astream.core.shard_entry import FileInfo, ShardEntry

__all__ = ["ShardTable", "from_compact"]

I64 = np.ndarray[Any, np.dtype[np.int64]]
MAGIC = b"ASTRIDX1"
_HASHES = msgspec.json.Decoder(list[dict[str, str]])
_NO_HASHES: dict[str, str] = {}


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

    # -- compact copy ------------------------------------------------------------------------
    def to_compact(self, meta: dict[str, Any], extra: dict[str, Any]) -> bytes | None:
        """This table as a compact file (see the module docstring), or None when it is not a
        columnar table or a basename holds a newline (the blob's separator)."""
        if self._entries is not None or not self.templates:
            return None
        n = len(self)
        names = "\n".join(self.raw_names)
        if names.count("\n") != max(n - 1, 0):
            return None
        blobs: dict[str, bytes] = {"raw_names": names.encode()}
        arrays: dict[str, np.ndarray[Any, Any]] = {
            "kind": self.kind.astype("<i4", copy=False),
            "samples": self.samples.astype("<i8", copy=False),
            "raw_bytes": self.raw_bytes.astype("<i8", copy=False),
        }
        if any(self.raw_hashes):
            blobs["raw_hashes"] = msgspec.json.encode(self.raw_hashes)
        if self.zip_names is not None and self.zip_bytes is not None:
            zips = "\n".join(z or "" for z in self.zip_names)
            if zips.count("\n") != max(n - 1, 0):
                return None
            blobs["zip_names"] = zips.encode()
            arrays["zip_bytes"] = self.zip_bytes.astype("<i8", copy=False)
            if self.zip_hashes and any(self.zip_hashes):
                blobs["zip_hashes"] = msgspec.json.encode(self.zip_hashes)
        where: dict[str, list[Any]] = {}
        parts: list[bytes] = []
        pos = 0
        for name, arr in arrays.items():  # arrays first: 8-aligned from the data's start
            b = arr.tobytes()
            where[name] = [pos, arr.dtype.str, len(arr)]
            parts.append(b)
            pos += len(b)
        for name, blob in blobs.items():
            where[name] = [pos, "blob", len(blob)]
            parts.append(blob)
            pos += len(blob)
        header = json.dumps(
            {
                "meta": meta,
                "n": n,
                "templates": [t.to_json() for t in self.templates],
                "extra": extra,
                "where": where,
            },
            sort_keys=True,
        ).encode()
        header += b" " * (-(len(MAGIC) + 8 + len(header)) % 8)
        return b"".join([MAGIC, struct.pack("<Q", len(header)), header, *parts])


def compact_meta(path: str) -> dict[str, Any] | None:
    """The metadata stored in the compact file at ``path`` (its header only), or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if len(head) != 16 or head[:8] != MAGIC:
                return None
            (hlen,) = struct.unpack("<Q", head[8:])
            meta = json.loads(f.read(hlen))["meta"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return meta if isinstance(meta, dict) else None


def from_compact(
    path: str, make_templates: Callable[[list[dict[str, Any]]], list[ShardEntry]]
) -> tuple[ShardTable, dict[str, Any], dict[str, Any]]:
    """(table, extra top-level keys, metadata) from the compact file at ``path``. The int
    columns are read-only views of the mapped file. ``make_templates`` turns the stored
    template entries back into validated entries. Raises ValueError (or OSError) on a file
    that is not a whole compact copy."""
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if buf[:8] != MAGIC:
        raise ValueError(f"{path}: not a compact index")
    (hlen,) = struct.unpack("<Q", buf[8:16])
    head = json.loads(buf[16 : 16 + hlen])
    base = 16 + hlen
    n = int(head["n"])
    where = head["where"]

    def array(name: str) -> np.ndarray[Any, Any]:
        off, dtype, count = where[name]
        arr = np.frombuffer(buf, dtype=np.dtype(dtype), count=count, offset=base + off)
        if len(arr) != n:
            raise ValueError(f"{path}: column {name} has {len(arr)} rows, not {n}")
        return arr

    def blob(name: str) -> bytes | None:
        if name not in where:
            return None
        off, _, size = where[name]
        if base + off + size > len(buf):
            raise ValueError(f"{path}: truncated")
        return buf[base + off : base + off + size]

    def names(name: str) -> list[str]:
        data = blob(name)
        out = data.decode().split("\n") if data is not None and n else []
        if len(out) != n:
            raise ValueError(f"{path}: {name} has {len(out)} names, not {n}")
        return out

    def hashes(name: str) -> list[dict[str, str]]:
        data = blob(name)
        if data is None:
            return [_NO_HASHES] * n
        out = _HASHES.decode(data)
        if len(out) != n:
            raise ValueError(f"{path}: {name} has {len(out)} rows, not {n}")
        return out

    templates = make_templates(head["templates"])
    kind = array("kind")
    if n and (int(kind.min()) < 0 or int(kind.max()) >= len(templates)):
        raise ValueError(f"{path}: a shard names a template that is not there")
    zipped = "zip_names" in where
    table = ShardTable(
        templates=templates,
        kind=kind,
        samples=array("samples"),
        raw_names=names("raw_names"),
        raw_bytes=array("raw_bytes"),
        raw_hashes=hashes("raw_hashes"),
        zip_names=[z or None for z in names("zip_names")] if zipped else None,
        zip_bytes=array("zip_bytes") if zipped else None,
        zip_hashes=hashes("zip_hashes") if zipped else None,
    )
    return table, head["extra"], head["meta"]
