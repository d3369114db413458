"""Reading the split-file shard formats: json, csv, tsv, xsv.

Theory of operation. A split shard is two files: the data file (text lines) and a meta file
``u32 N | u32 offsets[N+1] | config JSON`` whose offsets index the data file. For xsv-family
formats the data file starts with a header line of column names, so ``offsets[0]`` is its
length; for json it is 0. A sample is ``data[offsets[i]:offsets[i+1]]`` minus the trailing
newline: json lines decode with ``json.loads``; xsv lines split on the separator (no quoting,
as the reference writes them) and each field is parsed as str, int or float.
"""

from __future__ import annotations

import json
from typing import Any

from astream.core.index import ShardEntry
from astream.core.shard import parse_offsets
from astream.errors import FormatError

__all__ = ["SplitShardView"]

_PARSE = {"str": str, "int": int, "float": float}


class SplitShardView:
    """Random access to the samples of one uncompressed split shard (data + meta buffers)."""

    def __init__(self, data: Any, meta: Any, entry: ShardEntry, source: str) -> None:
        if entry.format == "mds" or entry.raw_meta is None:
            raise FormatError(f"not a split-format shard: {entry.format!r}", source)
        data_mv = memoryview(data).cast("B")
        meta_mv = memoryview(meta).cast("B")
        for label, mv, info in (
            ("data", data_mv, entry.raw_data),
            ("meta", meta_mv, entry.raw_meta),
        ):
            if len(mv) != info.bytes:
                raise FormatError(
                    f"{label} file is {len(mv)} bytes, index says {info.bytes}", source
                )
        offsets = parse_offsets(meta_mv, source, entry.samples, len(data_mv), min_first=0)
        self._offsets: list[int] = offsets.tolist()
        self._data = data_mv
        self.entry = entry
        self.source = source
        self._newline = (entry.newline or "").encode("utf-8")
        self._sep = entry.separator or {"csv": ",", "tsv": "\t"}.get(entry.format, "")
        self._cols = [
            (name, _PARSE[enc]) for name, enc in zip(entry.column_names, entry.column_encodings)
        ]

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def sample_bytes(self, i: int) -> memoryview:
        off = self._offsets
        if not 0 <= i < len(off) - 1:
            raise IndexError(f"{self.source}: sample {i} out of range 0..{len(off) - 2}")
        return self._data[off[i] : off[i + 1]]

    def sample(self, i: int) -> dict[str, Any]:
        raw = bytes(self.sample_bytes(i))
        nl = self._newline
        if nl and raw.endswith(nl):
            raw = raw[: -len(nl)]
        try:
            text = raw.decode("utf-8")
            if self.entry.format == "json":
                obj = json.loads(text)
                if not isinstance(obj, dict):
                    raise ValueError("a json sample must be an object")
                return obj
            parts = text.split(self._sep)
            if len(parts) != len(self._cols):
                raise ValueError(f"{len(parts)} fields, expected {len(self._cols)}")
            return {name: parse(p) for (name, parse), p in zip(self._cols, parts)}
        except ValueError as exc:
            raise FormatError(f"sample {i}: cannot decode ({exc})", self.source) from None
