"""A fast path for large MDS index.json files: typed decoding straight into shard columns.

Theory of operation
-------------------
:func:`astream.core.index.parse_index` validates every field of every shard in Python: ~20 us
a shard, 2+ s and a full tree of dicts (~800 MB peak) for 100k shards. This module accepts
the common case -- every shard an ``mds`` entry -- much faster and in bounded memory:

1. ``msgspec`` splits the document into raw top-level values and the ``shards`` list into raw
   per-shard byte slices (no Python objects for their contents).
2. Slices are decoded in chunks of ``CHUNK`` into typed structs that reject, while decoding,
   what the validating parser rejects by type: missing or unknown keys, ``bool`` or ``float``
   where an int belongs, negative sizes, non-string digests.
3. Each chunk is folded into columns (:class:`~astream.core.shard_table.ShardTable`); the fields
   shards share (encodings, names, sizes, compression, hash algorithms, size limit) are
   validated once per distinct combination, by the validating parser's own shard check, and kept
   once as a template. Per-shard rules (basename safety, zip file iff compression, the u32 offset
   bound, the header fitting the file, unique basenames) are checked on the columns.

This path never decides that an index is bad. When anything is not as expected (a split
format, a type mismatch, a rule broken, JSON msgspec does not read), it returns ``None`` and
the caller runs the validating parser, which accepts or raises its precise ``FormatError``.
So the accepted set and every error message are those of :func:`parse_index`; only the time
and memory differ. Top-level keys other than ``shards`` and ``version`` are decoded with the
standard ``json`` module, as the validating parser does.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
import numpy as np

from astream.core.shard_entry import ShardEntry
from astream.core.shard_table import ShardTable
from astream.errors import FormatError

__all__ = ["CHUNK", "parse_mds_fast"]

CHUNK = 4096
NonNeg = Annotated[int, msgspec.Meta(ge=0)]


class _File(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    basename: str
    bytes: NonNeg
    hashes: dict[str, str]


class _Mds(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    column_encodings: list[str]
    column_names: list[str]
    column_sizes: list[NonNeg | None]
    compression: str | None
    format: str
    hashes: list[str]
    raw_data: _File
    samples: NonNeg
    size_limit: NonNeg | None
    version: int
    zip_data: _File | None


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])
_SHARDS = msgspec.json.Decoder(list[_Mds])
_EMPTY: dict[str, str] = {}


class _Reject(Exception):
    """Not for the fast path: the validating parser decides."""


def _safe_name(name: str) -> bool:
    """The quick test of a basename; anything unusual goes to the validating parser."""
    if "\\" in name or "\x00" in name or ":" in name:
        return False
    if "/" in name:  # a merged dataset's "part/shard.00000.mds": no empty or dot components
        parts = name.split("/")
        return "" not in parts and "." not in parts and ".." not in parts
    return name not in ("", ".", "..")


class _Columns:
    def __init__(self, template_of: Any) -> None:
        self.template_of = template_of  # (where, builtins of one shard) -> validated ShardEntry
        self.templates: list[ShardEntry] = []
        self.keys: dict[tuple[Any, ...], int] = {}
        self.kind: list[int] = []
        self.samples: list[int] = []
        self.raw_names: list[str] = []
        self.raw_bytes: list[int] = []
        self.raw_hashes: list[dict[str, str]] = []
        self.zip_names: list[str | None] = []
        self.zip_bytes: list[int] = []
        self.zip_hashes: list[dict[str, str]] = []
        self.any_zip = False
        self._last: _Mds | None = None
        self._last_kind = -1

    def _kind(self, s: _Mds, i: int) -> int:
        last = self._last
        if (
            last is not None
            and s.column_encodings == last.column_encodings
            and s.column_names == last.column_names
            and s.column_sizes == last.column_sizes
            and s.compression == last.compression
            and s.hashes == last.hashes
            and s.size_limit == last.size_limit
        ):
            return self._last_kind
        key = (
            tuple(s.column_encodings),
            tuple(s.column_names),
            tuple(s.column_sizes),
            s.compression,
            tuple(s.hashes),
            s.size_limit,
        )
        k = self.keys.get(key)
        if k is None:
            # the validating parser's own check of this shard: raises on anything it refuses
            self.templates.append(self.template_of(f"shards[{i}]", msgspec.to_builtins(s)))
            k = self.keys[key] = len(self.templates) - 1
        self._last, self._last_kind = s, k
        return k

    def add(self, s: _Mds, i: int) -> None:
        if s.format != "mds" or s.version != 2:
            raise _Reject
        raw, zip_ = s.raw_data, s.zip_data
        if (s.compression is None) != (zip_ is None) or not _safe_name(raw.basename):
            raise _Reject
        self.kind.append(self._kind(s, i))
        self.samples.append(s.samples)
        self.raw_names.append(raw.basename)
        self.raw_bytes.append(raw.bytes)
        self.raw_hashes.append(raw.hashes or _EMPTY)
        if zip_ is None:
            self.zip_names.append(None)
            self.zip_bytes.append(-1)
            self.zip_hashes.append(_EMPTY)
        else:
            if not _safe_name(zip_.basename):
                raise _Reject
            self.any_zip = True
            self.zip_names.append(zip_.basename)
            self.zip_bytes.append(zip_.bytes)
            self.zip_hashes.append(zip_.hashes or _EMPTY)

    def table(self) -> ShardTable:
        n = len(self.raw_names)
        try:
            raw_bytes = np.array(self.raw_bytes, dtype=np.int64)
            samples = np.array(self.samples, dtype=np.int64)
            zip_bytes = np.array(self.zip_bytes, dtype=np.int64)
        except OverflowError:
            raise _Reject from None
        # u32 offsets bound the file; the header (8 + 4 * samples bytes) must fit in it
        if n and (raw_bytes.max() >= 1 << 32 or (8 + 4 * samples > raw_bytes).any()):
            raise _Reject
        names = set(self.raw_names)
        zips = [z for z in self.zip_names if z is not None]
        names.update(zips)
        if len(names) != n + len(zips):
            raise _Reject  # a basename used twice
        return ShardTable(
            templates=self.templates,
            kind=np.array(self.kind, dtype=np.int32),
            samples=samples,
            raw_names=self.raw_names,
            raw_bytes=raw_bytes,
            raw_hashes=self.raw_hashes,
            zip_names=self.zip_names if self.any_zip else None,
            zip_bytes=zip_bytes if self.any_zip else None,
            zip_hashes=self.zip_hashes if self.any_zip else None,
        )


def parse_mds_fast(data: bytes, template_of: Any) -> tuple[ShardTable, dict[str, Any]] | None:
    """(shard table, extra top-level keys) of an all-``mds`` index, or None when the
    validating parser must decide (see the module docstring). ``template_of(where, obj)``
    validates one shard's builtins the way the validating parser does and returns its entry."""
    try:
        top = _TOP.decode(data)
        extra = {k: json.loads(bytes(v)) for k, v in top.items() if k not in ("shards", "version")}
        version = json.loads(bytes(top["version"]))
        if type(version) is not int or version != 2:
            return None
        raws = _RAWS.decode(top["shards"])
        cols = _Columns(template_of)
        for lo in range(0, len(raws), CHUNK):
            chunk = raws[lo : lo + CHUNK]
            structs = _SHARDS.decode(b"[" + b",".join(bytes(r) for r in chunk) + b"]")
            for j, s in enumerate(structs):
                cols.add(s, lo + j)
        return cols.table(), extra
    except (msgspec.MsgspecError, ValueError, KeyError, TypeError, FormatError, _Reject):
        return None
