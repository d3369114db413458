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

import array
import json
import struct
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from astream.core.encodings import NDARRAY_DTYPE_CODES, UNSAFE_ENCODINGS, encode, get_coder
from astream.core.index import ShardEntry
from astream.errors import (
    ConfigError,
    FormatError,
    MissingColumnError,
    UnsafeEncodingError,
    UnsupportedEncodingError,
)

__all__ = [
    "SampleDecoder",
    "SampleEncoder",
    "ShardView",
    "build_shard",
    "check_config",
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


_U32_CODE = next(c for c in "IL" if array.array(c).itemsize == 4)


def compact_offsets(offsets: np.ndarray[Any, Any]) -> array.array[int]:
    """A shard's offsets kept for per-sample indexing: a ``u32`` ``array.array``.

    Indexing it is as fast as a tuple's and yields plain ints, but it holds 4 bytes a sample,
    not a Python int each (~36 bytes), has nothing for the garbage collector to scan, and is
    freed at once: a tuple of ten million offsets took ~90 ms to free, on the caller's event
    loop at the end of an epoch. ``np.asarray(..., np.int64)`` reads it through its buffer."""
    return array.array(_U32_CODE, np.asarray(offsets, np.uint32).tobytes())


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
        check_config(mv[header_size(entry.samples) : config_end], entry, source)
        self._mv = mv
        self._offsets = compact_offsets(offsets)
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


def check_config(raw: memoryview, entry: ShardEntry, source: str) -> None:
    """The shard's own config JSON (between its offsets and its first sample) agrees with its
    entry in the index: the same columns, encodings, sizes and format (FormatError if not)."""
    try:
        config = json.loads(bytes(raw))
    except ValueError:
        raise FormatError("shard config JSON is corrupt", source) from None
    if not isinstance(config, dict):
        raise FormatError("shard config JSON is not an object", source)
    for key in ("column_encodings", "column_names", "column_sizes", "format"):
        if key in config and config[key] != getattr(entry, key):
            raise FormatError(f"shard config {key} {config[key]!r} differs from the index", source)


def _fixed_reader(enc: str, size: int) -> Callable[[memoryview, int], Any] | None:
    """A reader taking (sample view, offset) for fixed-size numeric columns, avoiding a slice."""
    name, _, config = enc.partition(":")
    if enc == "int":
        unpack = struct.Struct("<q").unpack_from
        return lambda mv, pos: unpack(mv, pos)[0]
    if name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        dtype = np.dtype(name)
        scalar = dtype.type
        code = {1: "b", 2: "h", 4: "i", 8: "q"}[dtype.itemsize]
        unpack = struct.Struct("<" + (code.upper() if name[0] == "u" else code)).unpack_from
        return lambda mv, pos: scalar(unpack(mv, pos)[0])
    if name == "ndarray" and config.count(":") == 1:
        coder = get_coder(enc)
        dtype = np.dtype(config.split(":")[0])
        shape = tuple(int(d) for d in config.split(":")[1].split(","))
        if coder.size != size:
            return None
        if len(shape) == 1:
            count = shape[0]
            return lambda mv, pos: np.frombuffer(mv, dtype, count, pos)
        count = int(np.prod(shape))
        # frombuffer keeps the view (and so the map's export) alive; np.ndarray(buffer=mv)
        # would keep only the mmap object, which the reader may then close under the array
        return lambda mv, pos: np.frombuffer(mv, dtype, count, pos).reshape(shape)
    return None


_AT16 = struct.Struct("<H").unpack_from
_AT32 = struct.Struct("<I").unpack_from


def _one_dim(enc: str) -> np.dtype[Any] | None:
    """The dtype of a dynamic-shape ``ndarray:DTYPE`` encoding (None for any other): the
    generated decoder reads its 1-D values in place."""
    name, _, config = enc.partition(":")
    if name != "ndarray" or not config or ":" in config or config not in NDARRAY_DTYPE_CODES:
        return None
    return np.dtype(config)


# encoding -> (struct code, numpy scalar type or None for a plain Python int)
_INT_CODES: dict[str, tuple[str, Any]] = {
    "int": ("q", None),
    **{
        f"{'u' if u else ''}int{8 * n}": (
            c.upper() if u else c,
            np.dtype(f"{'u' if u else 'i'}{n}").type,
        )
        for n, c in ((1, "b"), (2, "h"), (4, "i"), (8, "q"))
        for u in (False, True)
    },
}


def _preamble(
    cols: list[tuple[str, str, int | None]], nvar: int, ns: dict[str, Any], short: Any
) -> tuple[list[str], int, str]:
    """The generated decoder up to its ``try:``: one struct unpack of the u32 lengths and the
    leading integer columns (they sit at constant offsets right after the lengths), then the
    check that the lengths add up to the sample. Returns (lines, how many leading integer
    columns were read, the offset expression of the first column after them)."""
    fixed = 4 * nvar + sum(c[2] for c in cols if c[2] is not None)
    lines = ["def decode(mv):"]
    lv = [f"l{i}" for i in range(nvar)]
    head = 0
    while head < len(cols) and cols[head][1] in _INT_CODES:
        head += 1
    fmt = "<" + "I" * nvar + "".join(_INT_CODES[cols[i][1]][0] for i in range(head))
    ns["_head"] = struct.Struct(fmt).unpack_from
    got = [*lv, *(f"h{i}" for i in range(head))]
    if got:
        # a sample shorter than the part read at once is refused before that read
        ns["_short"] = short
        lines.append(f"    if len(mv) < {struct.calcsize(fmt)}:")
        lines.append(f"        _short(mv, {struct.calcsize(fmt)})")
        lines.append(f"    {', '.join(got)}, = _head(mv, 0)")
    total = " + ".join([str(fixed), *lv])
    lines.append(f"    if len(mv) != {total}:")
    lines.append(f"        _fail(mv, {total}, None, None)")
    lines.append("    try:")
    return lines, head, str(struct.calcsize(fmt))


def _head_value(i: int, enc: str, ns: dict[str, Any]) -> str:
    """The line giving leading integer column ``i`` its value from the preamble's unpack."""
    scalar = _INT_CODES[enc][1]
    if scalar is None:
        return f"        v{i} = h{i}"
    ns[f"t{i}"] = scalar
    return f"        v{i} = t{i}(h{i})"


def _column_lines(
    i: int, enc: str, size: int | None, pos: str, n: str, ns: dict[str, Any], lines: list[str]
) -> str:
    """Append the lines decoding column ``i`` (at offset expression ``pos``, ``n`` bytes long)
    and return the offset expression of the next column."""
    at = _fixed_reader(enc, size) if size is not None else None
    if at is not None:
        ns[f"f{i}"] = at
        lines.append(f"        v{i} = f{i}(mv, {pos})")
        return f"({pos} + {size})"
    ns[f"f{i}"] = get_coder(enc).decode
    lines.append(f"        p = {pos}")
    dt = _one_dim(enc) if size is None else None
    if dt is None:
        lines.append(f"        v{i} = f{i}(mv[p : p + {n}])")
    else:
        lines += _in_place_1d(i, n, dt, ns)
    return f"(p + {n})"


def _in_place_1d(i: int, n: str, dt: np.dtype[Any], ns: dict[str, Any]) -> list[str]:
    """Lines reading a 1-D ``ndarray:DTYPE`` value in place: its shape byte says ndim 1 and a
    u8/u16/u32 count that fills the value; anything else (and every error) goes through the
    coder, which raises what it always raised."""
    ns[f"d{i}"] = dt
    ns["_fb"], ns["_u16"], ns["_u32"] = np.frombuffer, _AT16, _AT32
    return [
        f"        b = mv[p] if {n} >= 6 else 0",  # reads stay inside the value
        "        if b == 5:",
        "            (k,) = _u16(mv, p + 1)",
        "            q = p + 3",
        "        elif b == 4:",
        "            k = mv[p + 1]",
        "            q = p + 2",
        "        elif b == 6:",
        "            (k,) = _u32(mv, p + 1)",
        "            q = p + 5",
        "        else:",
        "            k = q = 0",
        f"        if k and k * {dt.itemsize} == {n} - (q - p):",
        f"            v{i} = _fb(mv, d{i}, k, q)",
        "        else:",
        f"            v{i} = f{i}(mv[p : p + {n}])",
    ]


class SampleDecoder:
    """Decode MDS samples of one shard layout into dicts; cache one per shard entry.

    The decode function is generated once per layout: fixed column positions become constants,
    fixed-size numerics are read in place (no slice), the dict is built by one literal.
    """

    __slots__ = ("_names", "decode", "source")

    def __init__(self, entry: ShardEntry, allow_unsafe_types: bool, source: str) -> None:
        if not allow_unsafe_types:
            for name, enc in zip(entry.column_names, entry.column_encodings):
                if enc in UNSAFE_ENCODINGS:
                    raise UnsafeEncodingError(
                        f"column {name!r} contains an unsafe type: encoding {enc!r} (pickle can "
                        "run code); pass allow_unsafe_types=True to read it",
                        source,
                    )
        self.source = source
        self._names = list(entry.column_names)
        self.decode: Callable[[bytes | memoryview], dict[str, Any]] = self._generate(entry)

    def _generate(self, entry: ShardEntry) -> Callable[[bytes | memoryview], dict[str, Any]]:
        cols = list(zip(entry.column_names, entry.column_encodings, entry.column_sizes))
        nvar = sum(1 for c in cols if c[2] is None)
        ns: dict[str, Any] = {"_fail": self._fail, "_lens": struct.Struct(f"<{nvar}I").unpack_from}
        lines, head, pos = _preamble(cols, nvar, ns, self._short)
        lv = [f"l{i}" for i in range(nvar)]
        vi = 0
        for i, (name, enc, size) in enumerate(cols):
            ns[f"k{i}"] = name
            lines.append(f"        c = {i}")
            if i < head:
                lines.append(_head_value(i, enc, ns))
                continue
            n = str(size) if size is not None else lv[vi]
            vi += size is None
            pos = _column_lines(i, enc, size, pos, n, ns, lines)
        lines.append("    except Exception as exc:")
        lines.append("        _fail(mv, None, c, exc)")
        items = ", ".join(f"k{i}: v{i}" for i in range(len(cols)))
        lines.append(f"    return {{{items}}}")
        # generated from a fixed template; column names and coders only enter through ``ns``
        exec("\n".join(lines), ns)
        fn: Callable[[bytes | memoryview], dict[str, Any]] = ns["decode"]
        return fn

    def _short(self, mv: memoryview, need: int) -> None:
        raise FormatError(
            f"sample is {len(mv)} bytes, shorter than the {need} bytes of its column lengths "
            "and leading integers",
            self.source,
        )

    def _fail(self, mv: memoryview, total: int | None, col: int | None, exc: Any) -> None:
        if col is None:
            raise FormatError(
                f"sample is {len(mv)} bytes but its column lengths add up to {total}", self.source
            )
        raise FormatError(
            f"column {self._names[col]!r}: cannot decode value ({exc})", self.source
        ) from None


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
                raise UnsupportedEncodingError(f"columns[{name!r}]: {exc}") from None
        self._cols = list(zip(self.names, self.encodings, self.sizes))

    def encode(self, sample: Mapping[str, Any]) -> bytes:
        lens: list[int] = []
        parts: list[bytes] = []
        for name, enc, size in self._cols:
            try:
                value = sample[name]
            except KeyError:
                raise MissingColumnError(f"sample is missing column {name!r}") from None
            except TypeError:
                raise ConfigError(f"sample must be a dict, got {type(sample).__name__}") from None
            try:
                data = encode(enc, value)
            except ConfigError as exc:  # keeps its type (SampleTypeError: an AttributeError)
                raise type(exc)(f"column {name!r}: {exc}") from None
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
