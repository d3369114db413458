"""index.json and shard parsing: exact layouts, and every kind of bad input gets a typed error."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest

from astream.core.index import FileInfo, Index, ShardEntry, dump_index, parse_index
from astream.core.paths import safe_relpath
from astream.core.shard import (
    SampleDecoder,
    SampleEncoder,
    ShardView,
    build_shard,
    header_size,
    parse_offsets,
)
from astream.errors import FormatError, UnsafeEncodingError

COLS = {"f32": "float32", "id": "int", "text": "str", "u8": "uint8"}


def _entry(raw: bytes, samples: int, **kw: Any) -> ShardEntry:
    enc = SampleEncoder(COLS)
    base: dict[str, Any] = dict(
        format="mds", column_encodings=enc.encodings, column_names=enc.names,
        column_sizes=enc.sizes, compression=None, hashes=["sha1", "xxh64"],
        raw_data=FileInfo("shard.00000.mds", len(raw), {}), zip_data=None,
        samples=samples, size_limit=1 << 26,
    )  # fmt: skip
    base.update(kw)
    return ShardEntry(**base)


def _config(entry: ShardEntry) -> bytes:
    return json.dumps(entry.config(), sort_keys=True).encode()


def _worked_example() -> tuple[bytes, ShardEntry]:
    enc = SampleEncoder(COLS)
    rows = [
        {"f32": np.float32(1.5), "id": 1, "text": "hi", "u8": np.uint8(7)},
        {"f32": np.float32(-0.25), "id": -2, "text": "abc", "u8": np.uint8(255)},
    ]
    probe = _entry(b"", 2)
    shard = build_shard([enc.encode(r) for r in rows], _config(probe))
    return shard, _entry(shard, 2)


def test_worked_example_bytes_from_the_format_doc() -> None:
    shard, entry = _worked_example()
    assert shard[:16] == bytes.fromhex("02000000ff000000120100002601 0000".replace(" ", ""))
    assert shard[0xFF:] == bytes.fromhex(
        "020000000000c03f010000000000000068690703000000000080befeffffffffffffff616263ff"
    )
    view = ShardView(shard, entry, "s")
    dec = SampleDecoder(entry, False, "s")
    got = [dec.decode(view.sample_bytes(i)) for i in range(len(view))]
    assert got == [
        {"f32": 1.5, "id": 1, "text": "hi", "u8": 7},
        {"f32": -0.25, "id": -2, "text": "abc", "u8": 255},
    ]
    assert type(got[0]["f32"]) is np.float32 and type(got[0]["id"]) is int


def test_index_dump_layout_and_roundtrip() -> None:
    _shard, entry = _worked_example()
    data = dump_index(Index([entry], {"extra_key": 1}))
    assert data.startswith(b'{"extra_key": 1, "shards": [{"column_encodings": ["float32", ')
    assert data.endswith(b'"zip_data": null}], "version": 2}')
    index = parse_index(data, "idx")
    assert index.shards == [entry] and index.extra == {"extra_key": 1}
    assert index.sample_counts().tolist() == [2] and index.sample_counts().dtype == np.int64
    merged = dump_index(index, merge_layout=True)
    assert merged.startswith(b'{"version": 2, "shards": [{"column_encodings"')


def _index_with(**changes: Any) -> bytes:
    _shard, entry = _worked_example()
    obj = json.loads(dump_index(Index([entry])))
    for key, value in changes.items():
        target = obj if key in ("version", "shards") else obj["shards"][0]
        if "." in key:
            outer, inner = key.split(".")
            obj["shards"][0][outer][inner] = value
        elif value is KeyError:
            del target[key]
        else:
            target[key] = value
    return json.dumps(obj).encode()


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"version": 3}, "idx: version: unsupported index version 3, expected 2"),
        ({"shards": {}}, "idx: shards: missing or not a list"),
        ({"format": "parquet"}, "idx: shards[0].format: unknown shard format 'parquet'"),
        ({"extra": 1}, "idx: shards[0]: mds shard keys: missing [], unknown ['extra']"),
        ({"samples": KeyError}, "idx: shards[0]: mds shard keys: missing ['samples'], unknown []"),
        ({"samples": True}, "idx: shards[0].samples: expected an integer >= 0, got True"),
        ({"samples": -1}, "idx: shards[0].samples: expected an integer >= 0, got -1"),
        ({"compression": "lz4"}, "idx: shards[0].compression: compression: unknown algorithm"),
        ({"compression": "zstd"}, "idx: shards[0].zip_data: must be set exactly when compre"),
        ({"column_encodings": ["float32", "int", "str", "uint9"]},
         "idx: shards[0].column_encodings[3]: unknown encoding 'uint9'"),
        ({"column_sizes": [4, 8, None, 2]},
         "idx: shards[0].column_sizes[3]: 2 != 'uint8' size 1"),
        ({"raw_data.basename": "../evil.mds"},
         "idx: shards[0].raw_data.basename: basename '../evil.mds' escapes"),
        ({"raw_data.basename": "/etc/passwd"},
         "idx: shards[0].raw_data.basename: basename '/etc/passwd' is an absolute path"),
        ({"raw_data.bytes": "12"}, "idx: shards[0].raw_data.bytes: expected an integer >= 0"),
    ],
)  # fmt: skip
def test_bad_index(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(FormatError) as info:
        parse_index(_index_with(**changes), "idx")
    assert str(info.value).startswith(message)
    assert info.value.path == "idx"


def test_index_not_json() -> None:
    with pytest.raises(FormatError, match=r"^idx: not valid JSON"):
        parse_index(b'{"shards": [', "idx")


@pytest.mark.parametrize(
    "name", ["", "a/../b", "..", "a\\b", "C:/x", "a//b", "a/", "./a", "x\x00y", "/abs"]
)
def test_safe_relpath_rejects(name: str) -> None:
    with pytest.raises(FormatError):
        safe_relpath(name, "idx")


def test_safe_relpath_accepts() -> None:
    assert safe_relpath("part0/shard.00000.mds", "i") == "part0/shard.00000.mds"


def test_parse_offsets_bad_input() -> None:
    shard = _worked_example()[0]
    assert parse_offsets(shard, "s", 2, len(shard)).tolist() == [255, 274, 294]
    cases = [
        (shard[:3], None, None, "s: truncated shard header: 3 bytes, need at least 4"),
        (shard[:10], None, None, "s: truncated shard header: 2 samples need 16 header bytes"),
        (shard, 3, None, "s: shard header says 2 samples, index says 3"),
        (shard, None, len(shard) - 1, "s: last sample offset 294 does not match file size 293"),
        (struct.pack("<I", 1 << 30) + bytes(8), None, None, "s: truncated shard header: 10737"),
        (struct.pack("<4I", 2, 20, 15, 30), None, None, "s: sample offsets out of order at sample"),
        (struct.pack("<4I", 2, 8, 15, 30), None, None, "s: first sample offset 8 lies inside"),
    ]  # fmt: skip
    for buf, n, size, message in cases:
        with pytest.raises(FormatError) as info:
            parse_offsets(buf, "s", n, size)
        assert str(info.value).startswith(message), message
    assert header_size(2) == 16


def test_truncated_and_corrupt_shards() -> None:
    shard, entry = _worked_example()
    with pytest.raises(FormatError, match=r"^s: shard is 200 bytes, index says 294 \(truncated\)"):
        ShardView(shard[:200], entry, "s")
    short = _entry(shard[:-1], 2)
    with pytest.raises(FormatError, match=r"^s: last sample offset 294 does not match file size"):
        ShardView(shard[:-1], short, "s")
    bad_config = shard[:16] + b"X" + shard[17:]
    with pytest.raises(FormatError, match=r"^s: shard config JSON is corrupt"):
        ShardView(bad_config, entry, "s")
    view = ShardView(shard, entry, "s")
    dec = SampleDecoder(entry, False, "s")
    with pytest.raises(FormatError, match=r"^s: sample is 18 bytes but its column lengths add up"):
        dec.decode(view.sample_bytes(0)[:-1])
    bad_utf8 = bytes(view.sample_bytes(0)).replace(b"hi", b"\xff\xfe")
    with pytest.raises(FormatError, match=r"^s: column 'text': cannot decode value"):
        dec.decode(memoryview(bad_utf8))
    with pytest.raises(IndexError):
        view.sample_bytes(2)


def test_pkl_needs_allow_unsafe_types() -> None:
    entry = _entry(b"", 0, column_encodings=["pkl"], column_names=["obj"], column_sizes=[None])
    with pytest.raises(UnsafeEncodingError) as info:
        SampleDecoder(entry, False, "d/shard.00000.mds")
    assert str(info.value) == (
        "d/shard.00000.mds: column 'obj' contains an unsafe type: encoding 'pkl' (pickle can "
        "run code); pass allow_unsafe_types=True to read it"
    )
    SampleDecoder(entry, True, "d/shard.00000.mds")


def test_empty_shard_reads_as_zero_samples() -> None:
    probe = _entry(b"", 0)
    shard = build_shard([], _config(probe))
    view = ShardView(shard, _entry(shard, 0), "s")
    assert len(view) == 0
