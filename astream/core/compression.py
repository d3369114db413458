"""Whole-file shard compression: zstd, gz, bz2, br (brotli), snappy.

A spec is ``name`` or ``name:level`` exactly as the reference library spells it; the spec string
itself is stored in the index and in the shard config, so ``"zstd"`` and ``"zstd:3"`` produce the
same compressed bytes but different raw shards.

| name   | levels | default | bytes                                   |
|--------|--------|---------|-----------------------------------------|
| zstd   | 1..22  | 3       | one zstd frame, content size, no checksum |
| gz     | 0..9   | 9       | gzip member (mtime in header: not reproducible) |
| bz2    | 1..9   | 9       | bz2 stream                              |
| br     | 0..11  | 11      | raw brotli stream                       |
| snappy | -      | -       | raw snappy block (not the framing format) |

Byte identity with the reference: it compresses zstd with the ``zstd`` module's one-shot API,
whose output differs from ``zstandard``'s on large inputs, so we use the same module when it is
installed and fall back to ``zstandard`` only when it is not.

Decompression of untrusted bytes is bounded: given ``expected_size`` (from the index), no codec
is allowed to produce more than that, so a decompression bomb costs at most that much memory.
Codec modules are imported lazily, on first use.
"""

from __future__ import annotations

import bz2
import gzip
import zlib
from typing import Any

from astream.errors import ConfigError, FormatError

__all__ = ["compress", "decompress", "extension", "validate_compression", "compression_names"]

_LEVELS: dict[str, tuple[range | None, int | None]] = {
    "br": (range(0, 12), 11),
    "bz2": (range(1, 10), 9),
    "gz": (range(0, 10), 9),
    "snappy": (None, None),
    "zstd": (range(1, 23), 3),
}


def compression_names() -> list[str]:
    """Every accepted spec string (names alone and with each level)."""
    out = []
    for name, (levels, _) in _LEVELS.items():
        out.append(name)
        out.extend(f"{name}:{lvl}" for lvl in levels or ())
    return out


def _split(spec: str) -> tuple[str, int]:
    name, sep, level_text = spec.partition(":")
    if name not in _LEVELS:
        raise ConfigError(
            f"compression: unknown algorithm {spec!r}; choose from {', '.join(sorted(_LEVELS))}"
            " optionally with ':level'"
        )
    levels, default = _LEVELS[name]
    if not sep:
        return name, default if default is not None else 0
    if levels is None:
        raise ConfigError(f"compression: {name} takes no level, got {spec!r}")
    if not level_text.isdigit() or str(int(level_text)) != level_text:
        raise ConfigError(f"compression: bad level in {spec!r}")
    level = int(level_text)
    if level not in levels:
        raise ConfigError(
            f"compression: level {level} out of range for {name} "
            f"({levels.start}..{levels.stop - 1}) in {spec!r}"
        )
    return name, level


def validate_compression(spec: str | None) -> str | None:
    """Return the spec (``None`` or ``""`` -> None) or raise ConfigError naming it."""
    if spec is None or spec == "":
        return None
    if not isinstance(spec, str):
        raise ConfigError(f"compression must be a string or None, got {spec!r}")
    _split(spec)
    return spec


def extension(spec: str) -> str:
    """File extension of compressed shards: the algorithm name (``zstd:7`` -> ``zstd``)."""
    return _split(spec)[0]


def compress(spec: str | None, data: bytes | memoryview) -> bytes:
    """Compress ``data`` exactly as the reference writer does for ``spec``."""
    if spec is None:
        return bytes(data)
    name, level = _split(spec)
    if name == "zstd":
        try:
            import zstd

            return zstd.compress(bytes(data), level)  # type: ignore[no-any-return]
        except ImportError:
            import zstandard

            return zstandard.ZstdCompressor(level=level).compress(data)  # type: ignore[no-any-return]
    if name == "gz":
        return gzip.compress(data, level)
    if name == "bz2":
        return bz2.compress(data, level)
    if name == "br":
        import brotli

        return brotli.compress(bytes(data), quality=level)  # type: ignore[no-any-return]
    import snappy

    return snappy.compress(bytes(data))  # type: ignore[no-any-return]


def _limit(expected_size: int | None) -> int:
    return -1 if expected_size is None else expected_size + 1


def _snappy_length(data: bytes, source: str) -> int:
    value = shift = 0
    for i in range(min(len(data), 10)):
        byte = data[i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value
        shift += 7
    raise FormatError("snappy: truncated length preamble", source)


def _run(name: str, data: bytes, limit: int, source: str) -> bytes:
    if name == "zstd":
        import zstandard

        reader: Any = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        with reader:
            return reader.read(limit) if limit >= 0 else reader.readall()  # type: ignore[no-any-return]
    if name == "gz":
        gz = zlib.decompressobj(wbits=31)
        out = gz.decompress(data, max(limit, 0))
        if not gz.eof and limit < 0:
            raise FormatError("gz: truncated stream", source)
        return out
    if name == "bz2":
        bz = bz2.BZ2Decompressor()
        out = bz.decompress(data, limit)
        if not bz.eof and len(out) < limit:
            raise FormatError("bz2: truncated stream", source)
        return out
    if name == "br":
        import brotli

        br: Any = brotli.Decompressor()
        if limit < 0:
            return br.process(data)  # type: ignore[no-any-return]
        return br.process(data, output_buffer_limit=limit)  # type: ignore[no-any-return]
    import snappy

    if limit >= 0 and _snappy_length(data, source) >= limit:
        raise FormatError("snappy: decompressed size exceeds expected size", source)
    return snappy.uncompress(data)  # type: ignore[no-any-return]


def decompress(
    spec: str | None,
    data: bytes | memoryview,
    expected_size: int | None = None,
    source: str = "<data>",
) -> bytes:
    """Decompress ``data``; with ``expected_size``, anything but exactly that size is a FormatError.

    Raises FormatError naming ``source`` for corrupt or truncated input.
    """
    if spec is None:
        return bytes(data)
    try:
        name, _ = _split(spec)
    except ConfigError as exc:
        raise FormatError(str(exc), source) from None
    raw = bytes(data)
    try:
        out = _run(name, raw, _limit(expected_size), source)
    except FormatError:
        raise
    except Exception as exc:  # each codec has its own error types
        raise FormatError(f"{name}: corrupt compressed data ({exc})", source) from None
    if expected_size is not None and len(out) != expected_size:
        raise FormatError(
            f"{name}: decompressed to {'more than ' if len(out) > expected_size else ''}"
            f"{len(out)} bytes, expected {expected_size}",
            source,
        )
    return out
