"""Compression (bounded, byte-identical libraries), hashes and size strings."""

from __future__ import annotations

import bz2
import hashlib

import pytest
import xxhash

from astream.core.compression import (
    compress,
    compression_names,
    decompress,
    extension,
    validate_compression,
)
from astream.core.hashing import hash_names, hexdigest, new_hasher, validate_hash
from astream.core.sizes import parse_size
from astream.errors import ConfigError, FormatError

DATA = bytes(range(256)) * 300 + b"tail"


@pytest.mark.parametrize("spec", compression_names())
def test_roundtrip_every_spec(spec: str) -> None:
    z = compress(spec, DATA)
    assert decompress(spec, z, len(DATA)) == DATA
    assert extension(spec) == spec.split(":")[0]


def test_same_libraries_as_the_reference() -> None:
    import brotli
    import snappy
    import zstd

    assert compress("zstd:7", DATA) == zstd.compress(DATA, 7)
    assert compress("zstd", DATA) == zstd.compress(DATA, 3)
    assert compress("br:5", DATA) == brotli.compress(DATA, quality=5)
    assert compress("bz2", DATA) == bz2.compress(DATA, 9)
    assert compress("snappy", DATA) == snappy.compress(DATA)
    assert snappy.uncompress(compress("snappy", DATA)) == DATA  # raw block, not framed


@pytest.mark.parametrize("spec", ["zstd", "gz:1", "bz2", "br", "snappy"])
def test_decompression_is_bounded_and_checked(spec: str) -> None:
    z = compress(spec, DATA)
    with pytest.raises(FormatError, match=r"^shard.z: "):
        decompress(spec, z, len(DATA) - 10, "shard.z")
    with pytest.raises(FormatError, match=r"^shard.z: "):
        decompress(spec, z[: len(z) // 2], len(DATA), "shard.z")
    with pytest.raises(FormatError, match=r"^shard.z: "):
        decompress(spec, b"garbage" * 3, len(DATA), "shard.z")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("lz4", "compression: unknown algorithm 'lz4'"),
        ("zstd:0", "compression: level 0 out of range for zstd (1..22) in 'zstd:0'"),
        ("gz:10", "compression: level 10 out of range for gz (0..9) in 'gz:10'"),
        ("snappy:1", "compression: snappy takes no level, got 'snappy:1'"),
        ("zstd:03", "compression: bad level in 'zstd:03'"),
    ],
)
def test_bad_compression(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        validate_compression(spec)
    assert str(info.value).startswith(message)
    assert validate_compression("") is None and validate_compression(None) is None


def test_hashes() -> None:
    assert hexdigest("sha256", DATA) == hashlib.sha256(DATA).hexdigest()
    assert hexdigest("xxh3_128", memoryview(DATA)) == xxhash.xxh3_128(DATA).hexdigest()
    h = new_hasher("xxh64")
    h.update(DATA[:100])
    h.update(DATA[100:])
    assert h.hexdigest() == xxhash.xxh64(DATA).hexdigest()
    names = hash_names()
    assert {"md5", "sha1", "blake2b", "sha3_256", "xxh32", "xxh128"} <= set(names)
    assert not any(n.startswith("shake_") for n in names)
    with pytest.raises(ConfigError, match=r"^hashes: unsupported hash algorithm 'shake_128'"):
        validate_hash("shake_128")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(100, 100), ("100kb", 102400), ("64MB", 1 << 26), (" 1.5kb ", 1536), ("12b", 12),
     ("12", 12), ("1gb", 1 << 30)],
)  # fmt: skip
def test_parse_size(value: int | str, expected: int) -> None:
    assert parse_size(value, "size_limit") == expected


@pytest.mark.parametrize("value", ["", "kb", "12 parsecs", "1.5", "nankb", True])
def test_parse_size_bad(value: object) -> None:
    with pytest.raises(ConfigError, match=r"^size_limit"):
        parse_size(value, "size_limit")  # type: ignore[arg-type]
