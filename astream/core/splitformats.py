"""Reading the split-file shard formats: json, csv, tsv, xsv.

Theory of operation. A split shard is two files: the data file (text lines) and a meta file
``u32 N | u32 offsets[N+1] | config JSON`` whose offsets index the data file. For xsv-family
formats the data file starts with a header line of column names, so ``offsets[0]`` is its
length; for json it is 0. A sample is ``data[offsets[i]:offsets[i+1]]`` minus the trailing
newline: json lines decode with ``json.loads``; xsv lines split on the separator (no quoting,
as the reference writes them) and each field is parsed as str, int or float.

``SplitDecoder`` holds the per-layout part (format, columns, separator, newline) and decodes one
sample's bytes; ``split_offsets`` validates a meta file against its index entry and the data
file's size. ``SplitShardView`` (LocalDataset) and the streaming reader (runtime/reader.py)
both use them, so a shard decodes the same whichever path reads it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from astream.core.index import ShardEntry
from astream.core.shard import compact_offsets, parse_offsets
from astream.errors import FormatError

__all__ = ["SplitDecoder", "SplitShardView", "split_offsets"]

_PARSE = {"str": str, "int": int, "float": float}
_DECODE_KEYS = ("format", "newline", "separator", "columns", "column_names", "column_encodings")


def split_offsets(meta: Any, entry: ShardEntry, source: str) -> Sequence[int]:
    """The ``N+1`` data-file offsets of a split shard's (uncompressed) meta file, validated:
    sample count, order, last offset == the data file's size, and the config JSON after the
    offsets agreeing with the index on everything decoding depends on."""
    if entry.raw_meta is None:
        raise FormatError(f"not a split-format shard: {entry.format!r}", source)
    mv = memoryview(meta).cast("B")
    if len(mv) != entry.raw_meta.bytes:
        raise FormatError(
            f"meta file is {len(mv)} bytes, index says {entry.raw_meta.bytes}", source
        )
    offsets = parse_offsets(mv, source, entry.samples, entry.raw_data.bytes, min_first=0)
    try:
        config = json.loads(bytes(mv[4 * (entry.samples + 2) :]))
    except (ValueError, UnicodeDecodeError):
        raise FormatError("meta file config JSON is corrupt", source) from None
    if not isinstance(config, dict):
        raise FormatError("meta file config JSON is not an object", source)
    want = entry.config()
    for key in _DECODE_KEYS:
        if key in want and config.get(key) != want[key]:
            raise FormatError(
                f"meta file config {key} {config.get(key)!r} differs from the index {want[key]!r}",
                source,
            )
    return compact_offsets(offsets)  # 4 bytes a sample, nothing for the GC (see ShardView)


class SplitDecoder:
    """Decodes one sample's bytes (one line, newline included) for one split-shard layout."""

    __slots__ = ("_cols", "_json", "_newline", "_sep", "source")

    def __init__(self, entry: ShardEntry, source: str) -> None:
        if entry.format == "mds" or entry.raw_meta is None:
            raise FormatError(f"not a split-format shard: {entry.format!r}", source)
        self.source = source
        self._json = entry.format == "json"
        self._newline = (entry.newline or "").encode("utf-8")
        self._sep = entry.separator or {"csv": ",", "tsv": "\t"}.get(entry.format, "")
        self._cols = [
            (name, _PARSE[enc]) for name, enc in zip(entry.column_names, entry.column_encodings)
        ]

    def decode(self, buf: Any, i: int | None = None) -> dict[str, Any]:
        """One sample's columns; a malformed line is a ``FormatError`` naming the file (and
        sample ``i`` of the shard, when given)."""
        reason = ""
        try:
            return self._decode(buf)
        except ValueError as exc:
            reason = str(exc)
        what = "cannot decode sample" if i is None else f"sample {i}: cannot decode"
        raise FormatError(f"{what} ({reason})", self.source)

    def _decode(self, buf: Any) -> dict[str, Any]:
        raw = bytes(buf)
        nl = self._newline
        if nl and raw.endswith(nl):
            raw = raw[: -len(nl)]
        text = raw.decode("utf-8")  # UnicodeDecodeError is a ValueError
        if self._json:
            obj = json.loads(text)
            if not isinstance(obj, dict):
                raise ValueError("a json sample must be an object")
            return obj  # type: ignore[no-any-return]
        parts = text.split(self._sep)
        if len(parts) != len(self._cols):
            raise ValueError(f"{len(parts)} fields, expected {len(self._cols)}")
        return {name: parse(p) for (name, parse), p in zip(self._cols, parts)}


class SplitShardView:
    """Random access to the samples of one uncompressed split shard (data + meta buffers)."""

    def __init__(
        self, data: Any, meta: Any, entry: ShardEntry, source: str, meta_source: str | None = None
    ) -> None:
        self.decoder = SplitDecoder(entry, source)
        data_mv = memoryview(data).cast("B")
        if len(data_mv) != entry.raw_data.bytes:
            raise FormatError(
                f"data file is {len(data_mv)} bytes, index says {entry.raw_data.bytes}", source
            )
        self._offsets = split_offsets(meta, entry, meta_source or source)
        self._data = data_mv
        self.entry = entry
        self.source = source

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def sample_bytes(self, i: int) -> memoryview:
        off = self._offsets
        if not 0 <= i < len(off) - 1:
            raise IndexError(f"{self.source}: sample {i} out of range 0..{len(off) - 2}")
        return self._data[off[i] : off[i + 1]]

    def sample(self, i: int) -> dict[str, Any]:
        return self.decoder.decode(self.sample_bytes(i), i)
