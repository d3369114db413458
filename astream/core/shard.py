"""MDS shard files: header math, offset validation, zero-copy sample slicing, sample codecs.

Theory of operation. An uncompressed shard is ``u32 N | u32 offsets[N+1] | config JSON |
samples``; offsets are absolute and ``offsets[N]`` is the file size. A reader that has the
first ``header_size(N)`` bytes knows the exact byte range of every sample, which is what makes
range reads possible. ``parse_offsets`` trusts nothing: it checks N against the buffer before
looking at any offset (so a hostile count cannot make us allocate), then monotonicity, the
first offset against the header and the last against the file size.

``ShardView`` wraps a whole shard buffer (bytes, mmap or memoryview) and hands out samples as
memoryview slices, never copies. ``SampleDecoder`` turns one sample's bytes into a dict. It
precomputes the column layout once per shard (fixed sizes, which columns carry a u32 length,
the decoder function of each column), so the per-sample cost is one ``struct.unpack_from`` for
the lengths and one call per column. ``SampleEncoder`` is the writer's inverse.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from astream.core.encodings import UNSAFE_ENCODINGS, encode, get_coder
from astream.core.index import ShardEntry
from astream.errors import ConfigError, FormatError, UnsafeEncodingError

__all__ = [
    "SampleDecoder",
    "SampleEncoder",
    "ShardView",
    "build_shard",
    "header_size",
    "parse_offsets",
]

_U32 = struct.Struct("<I")


def header_size(n: int) -> int:
    """Bytes of ``N`` plus the ``N+1`` offsets: what a range reader fetches first."""
    return 4 + 4 * (n + 1)


def parse_offsets(
    buf: Any,
    source: str,
    expect_n: int | None = None,
    file_size: int | None = None,
    *,
    min_first: int | None = None,
) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Validate and return the ``N+1`` offsets of a shard (or split meta) header as int64.

    ``buf`` must hold at least the header. ``min_first`` is the smallest allowed first offset
    (default: the header size, right for MDS shards; split meta files index another file).
    """
    mv = memoryview(buf)
    if len(mv) < 4:
        raise FormatError(f"truncated shard header: {len(mv)} bytes, need at least 4", source)
    (n,) = _U32.unpack_from(mv, 0)
    if expect_n is not None and n != expect_n:
        raise FormatError(f"shard header says {n} samples, index says {expect_n}", source)
    need = header_size(n)
    if len(mv) < need:
        raise FormatError(
            f"truncated shard header: {n} samples need {need} header bytes, have {len(mv)}", source
        )
    offsets = np.frombuffer(mv, "<u4", count=n + 1, offset=4).astype(np.int64)
    first = need if min_first is None else min_first
    if offsets[0] < first:
        raise FormatError(f"first sample offset {offsets[0]} lies inside the header", source)
    if n and bool((offsets[1:] < offsets[:-1]).any()):
        bad = int(np.argmax(offsets[1:] < offsets[:-1]))
        raise FormatError(
            f"sample offsets out of order at sample {bad}: {offsets[bad]} > {offsets[bad + 1]}",
            source,
        )
    if file_size is not None and offsets[-1] != file_size:
        raise FormatError(
            f"last sample offset {offsets[-1]} does not match file size {file_size}"
            + (" (truncated?)" if offsets[-1] > file_size else ""),
            source,
        )
    return offsets


def build_shard(samples: list[bytes], config_json: bytes) -> bytes:
    """An uncompressed shard file from encoded samples and its config JSON bytes."""
    n = len(samples)
    start = header_size(n) + len(config_json)
    sizes = np.fromiter((len(s) for s in samples), np.int64, n)
    offsets = np.empty(n + 1, np.int64)
    offsets[0] = start
    np.cumsum(sizes, out=offsets[1:])
    offsets[1:] += start
    if offsets[-1] >= 1 << 32:
        raise ConfigError(f"shard would be {offsets[-1]} bytes; offsets are u32 (< 4 GiB)")
    head = _U32.pack(n) + offsets.astype("<u4").tobytes()
    return b"".join([head, config_json, *samples])


class ShardView:
    """Random access to the samples of one whole, uncompressed MDS shard buffer."""

    __slots__ = ("_mv", "_offsets", "entry", "source")

    def __init__(self, buf: Any, entry: ShardEntry, source: str) -> None:
        mv = memoryview(buf).cast("B")
        if len(mv) != entry.raw_data.bytes:
            raise FormatError(
                f"shard is {len(mv)} bytes, index says {entry.raw_data.bytes}"
                + (" (truncated)" if len(mv) < entry.raw_data.bytes else ""),
                source,
            )
        offsets = parse_offsets(mv, source, entry.samples, len(mv))
        config_end = int(offsets[0])
        _check_config(mv[header_size(entry.samples) : config_end], entry, source)
        self._mv = mv
        self._offsets: list[int] = offsets.tolist()
        self.entry = entry
        self.source = source

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def sample_bytes(self, i: int) -> memoryview:
        """The bytes of sample ``i`` (0 <= i < len), as a zero-copy memoryview."""
        off = self._offsets
        if not 0 <= i < len(off) - 1:
            raise IndexError(f"{self.source}: sample {i} out of range 0..{len(off) - 2}")
        return self._mv[off[i] : off[i + 1]]

    def release(self) -> None:
        self._mv.release()


def _check_config(raw: memoryview, entry: ShardEntry, source: str) -> None:
    try:
        config = json.loads(bytes(raw))
    except ValueError:
        raise FormatError("shard config JSON is corrupt", source) from None
    if not isinstance(config, dict):
        raise FormatError("shard config JSON is not an object", source)
    for key in ("column_encodings", "column_names", "column_sizes", "format"):
        if key in config and config[key] != getattr(entry, key):
            raise FormatError(f"shard config {key} {config[key]!r} differs from the index", source)


class SampleDecoder:
    """Decode MDS samples of one shard layout into dicts; cache one per shard entry."""

    __slots__ = ("_cols", "_fixed", "_lens", "_nvar", "source")

    def __init__(self, entry: ShardEntry, allow_unsafe_types: bool, source: str) -> None:
        if not allow_unsafe_types:
            for name, enc in zip(entry.column_names, entry.column_encodings):
                if enc in UNSAFE_ENCODINGS:
                    raise UnsafeEncodingError(
                        f"column {name!r} has unsafe encoding {enc!r} (pickle can run code); "
                        "pass allow_unsafe_types=True to read it",
                        source,
                    )
        cols = []
        nvar = 0
        fixed = 0
        for name, enc, size in zip(entry.column_names, entry.column_encodings, entry.column_sizes):
            coder = get_coder(enc)
            if size is None:
                cols.append((name, coder.decode, -1, nvar))
                nvar += 1
            else:
                cols.append((name, coder.decode, size, 0))
                fixed += size
        self._cols = tuple(cols)
        self._nvar = nvar
        self._fixed = fixed + 4 * nvar
        self._lens = struct.Struct(f"<{nvar}I")
        self.source = source

    def decode(self, mv: memoryview) -> dict[str, Any]:
        lens = self._lens.unpack_from(mv, 0) if self._nvar else ()
        if self._fixed + sum(lens) != len(mv):
            raise FormatError(
                f"sample is {len(mv)} bytes but its column lengths add up to "
                f"{self._fixed + sum(lens)}",
                self.source,
            )
        out: dict[str, Any] = {}
        pos = 4 * self._nvar
        name = ""
        try:
            for name, dec, size, vi in self._cols:
                end = pos + (size if size >= 0 else lens[vi])
                out[name] = dec(mv[pos:end])
                pos = end
        except Exception as exc:
            raise FormatError(
                f"column {name!r}: cannot decode value ({exc})", self.source
            ) from None
        return out


class SampleEncoder:
    """Encode sample dicts for one column layout (column names sorted, as on disk)."""

    def __init__(self, columns: Mapping[str, str]) -> None:
        if not isinstance(columns, Mapping) or not columns:
            raise ConfigError("columns must be a non-empty dict of column name -> encoding")
        self.names = sorted(columns)
        self.encodings = [columns[n] for n in self.names]
        self.sizes: list[int | None] = []
        for name, enc in zip(self.names, self.encodings):
            if not isinstance(name, str):
                raise ConfigError(f"columns: column name {name!r} is not a string")
            try:
                self.sizes.append(get_coder(enc).size)
            except ConfigError as exc:
                raise ConfigError(f"columns[{name!r}]: {exc}") from None
        self._cols = list(zip(self.names, self.encodings, self.sizes))

    def encode(self, sample: Mapping[str, Any]) -> bytes:
        lens: list[int] = []
        parts: list[bytes] = []
        for name, enc, size in self._cols:
            try:
                value = sample[name]
            except KeyError:
                raise ConfigError(f"sample is missing column {name!r}") from None
            except TypeError:
                raise ConfigError(f"sample must be a dict, got {type(sample).__name__}") from None
            try:
                data = encode(enc, value)
            except ConfigError as exc:
                raise ConfigError(f"column {name!r}: {exc}") from None
            if size is None:
                lens.append(len(data))
            elif len(data) != size:
                raise ConfigError(
                    f"column {name!r}: encoded to {len(data)} bytes, encoding {enc!r} is {size}"
                )
            parts.append(data)
        if lens:
            parts.insert(0, struct.pack(f"<{len(lens)}I", *lens))
        return b"".join(parts)
