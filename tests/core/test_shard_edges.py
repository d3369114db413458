"""The MDS shard layer at its edges (``astream.core.shard``): the generated sample decoder
against the plain per-column coders over generated column layouts, and every refusal of the
header, the config and the encoder with its exact message.

The oracle for decoding is the format itself (MDS_FORMAT.md): a sample is the u32 lengths of
its variable-size columns, then each column's bytes in column order; each column's value is
``get_coder(encoding).decode`` of its bytes. The generated decoder reads the same bytes faster
(constant offsets, in-place reads of fixed-size numbers and 1-D arrays); it must agree value
for value, dtype for dtype.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from astream.core.encodings import get_coder
from astream.core.index import FileInfo, ShardEntry
from astream.core.shard import (
    SampleDecoder,
    SampleEncoder,
    ShardView,
    build_shard,
    header_size,
    parse_offsets,
)
from astream.errors import ConfigError, FormatError

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]


def _value(draw: st.DrawFn, enc: str) -> Any:
    name, _, config = enc.partition(":")
    if enc == "int":
        return draw(st.integers(-(2**63), 2**63 - 1))
    if name in INTS:
        info = np.iinfo(name)
        return np.dtype(name).type(draw(st.integers(int(info.min), int(info.max))))
    if name in FLOATS:
        return np.dtype(name).type(draw(st.floats(-1e4, 1e4, width=16)))
    if name == "str":
        return draw(st.text(max_size=12))
    if name == "bytes":
        return draw(st.binary(max_size=12))
    if name == "json":
        return draw(st.dictionaries(st.text(max_size=3), st.integers(-5, 5), max_size=3))
    if name == "ndarray":
        parts = config.split(":") if config else []
        dtype = parts[0] if parts else draw(st.sampled_from(["uint8", "int32", "float64"]))
        if len(parts) == 2:
            shape = tuple(int(d) for d in parts[1].split(","))
        else:
            shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        if draw(st.booleans()) and len(parts) < 2:
            shape = (draw(st.integers(1, 300)),)  # long 1-D: u16 counts in the shape header
        n = int(np.prod(shape))
        raw = draw(st.binary(min_size=n * np.dtype(dtype).itemsize,
                             max_size=n * np.dtype(dtype).itemsize))  # fmt: skip
        return np.frombuffer(raw, dtype).reshape(shape).copy()
    raise AssertionError(enc)


ENCODINGS = [
    "int", *INTS, *FLOATS, "str", "bytes", "json", "ndarray", "ndarray:uint16", "ndarray:int64",
    "ndarray:float32", "ndarray:int32:3", "ndarray:uint8:2,3", "ndarray:float64:2,2,1",
]  # fmt: skip


@st.composite
def layouts(draw: st.DrawFn) -> tuple[dict[str, str], list[dict[str, Any]]]:
    k = draw(st.integers(1, 6))
    names = draw(st.lists(st.text("abcxyz", min_size=1, max_size=3), min_size=k, max_size=k,
                          unique=True))  # fmt: skip
    cols = {n: draw(st.sampled_from(ENCODINGS)) for n in names}
    rows = [{n: _value(draw, e) for n, e in cols.items()} for _ in range(draw(st.integers(1, 4)))]
    return cols, rows


def _entry(cols: dict[str, str], n: int = 1, nbytes: int = 1) -> ShardEntry:
    enc = SampleEncoder(cols)
    return ShardEntry(
        format="mds", column_encodings=enc.encodings, column_names=enc.names,
        column_sizes=enc.sizes, compression=None, hashes=[],
        raw_data=FileInfo("shard.00000.mds", nbytes, {}), zip_data=None, samples=n,
        size_limit=1 << 26,
    )  # fmt: skip


def _plain_decode(entry: ShardEntry, raw: bytes) -> dict[str, Any]:
    """The format, read the slow way: lengths, then each column through its coder."""
    nvar = sum(s is None for s in entry.column_sizes)
    lens = list(struct.unpack_from(f"<{nvar}I", raw, 0))
    pos, out = 4 * nvar, {}
    for name, enc, size in zip(entry.column_names, entry.column_encodings, entry.column_sizes):
        n = size if size is not None else lens.pop(0)
        out[name] = get_coder(enc).decode(memoryview(raw)[pos : pos + n])
        pos += n
    assert pos == len(raw)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
            and a.shape == b.shape and a.tobytes() == b.tobytes()
        )  # fmt: skip
    if isinstance(a, np.generic) or isinstance(b, np.generic):
        return type(a) is type(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    return type(a) is type(b) and a == b


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_generated_decoder_equals_the_plain_reading(
    layout: tuple[dict[str, str], list[dict[str, Any]]],
) -> None:
    cols, rows = layout
    entry = _entry(cols)
    enc = SampleEncoder(cols)
    dec = SampleDecoder(entry, False, "t.mds").decode
    for row in rows:
        raw = enc.encode(row)
        got, want = dec(memoryview(raw)), _plain_decode(entry, raw)
        assert list(got) == entry.column_names  # every column, in column order
        for name in entry.column_names:
            assert _same(got[name], want[name]), (name, cols[name], got[name], want[name])
            assert _same(got[name], row[name] if not isinstance(row[name], int)
                         or cols[name] != "int" else int(row[name])), name  # fmt: skip
        # one byte more or less is a FormatError naming the lengths, never a wrong value
        for bad in {raw + b"\0", raw[:-1], raw[: len(raw) // 2]} - {raw}:
            with pytest.raises(FormatError, match=r"^t\.mds: sample is \d+ bytes(,| but)"):
                dec(memoryview(bad))


def test_fixed_columns_after_a_variable_one_are_read_at_their_offsets() -> None:
    # "a" (str) sorts first, so every fixed column is read after a variable-length one
    cols = {"a": "str", "b": "uint16", "c": "int", "d": "ndarray:int32:2,2", "e": "float32",
            "f": "int64", "g": "ndarray:uint8:3"}  # fmt: skip
    row = {"a": "héllo", "b": np.uint16(65535), "c": -(2**63), "d": np.arange(4, dtype=np.int32)
           .reshape(2, 2), "e": np.float32(-1.5), "f": np.int64(2**63 - 1),
           "g": np.array([1, 2, 3], np.uint8)}  # fmt: skip
    entry = _entry(cols)
    got = SampleDecoder(entry, False, "t.mds").decode(memoryview(SampleEncoder(cols).encode(row)))
    assert got["a"] == "héllo" and got["c"] == -(2**63) and type(got["c"]) is int
    assert type(got["b"]) is np.uint16 and got["b"] == 65535
    assert type(got["f"]) is np.int64 and got["f"] == 2**63 - 1
    assert type(got["e"]) is np.float32 and got["e"] == -1.5
    assert got["d"].shape == (2, 2) and got["d"].tolist() == [[0, 1], [2, 3]]
    assert got["g"].dtype == np.uint8 and got["g"].tolist() == [1, 2, 3]


def test_a_value_that_cannot_decode_names_its_column() -> None:
    cols = {"j": "json", "n": "int"}
    raw = SampleEncoder(cols).encode({"j": {"x": 1}, "n": 3})
    bad = raw[:4] + b"{" * (len(raw) - 12) + raw[-8:]
    with pytest.raises(FormatError, match=r"^t\.mds: column 'j': cannot decode value") as ei:
        SampleDecoder(_entry(cols), False, "t.mds").decode(memoryview(bad))
    assert ei.value.path == "t.mds"


# -- the header ------------------------------------------------------------------------------


def _shard(samples: list[bytes], config: dict[str, Any] | None = None) -> bytes:
    return build_shard(samples, json.dumps(config or {"format": "mds"}).encode())


def test_build_shard_layout() -> None:
    cfg = b'{"format": "mds"}'
    raw = build_shard([b"ab", b"", b"cde"], cfg)
    n, *offs = struct.unpack_from("<5I", raw, 0)
    start = header_size(3) + len(cfg)
    assert (n, offs) == (3, [start, start + 2, start + 2, start + 5])
    assert raw[header_size(3) : start] == cfg and raw[start:] == b"abcde"
    assert parse_offsets(raw, "s", 3, len(raw)).tolist() == offs
    assert parse_offsets(raw, "s").dtype == np.int64
    assert build_shard([], b"") == struct.pack("<II", 0, 8)


class _Sized(bytes):
    """An empty bytes object that reports another length: build_shard's arithmetic on a
    sample of that size, without the memory."""

    n = 0

    def __len__(self) -> int:
        return self.n


def _sized(n: int) -> bytes:
    s = _Sized(b"")
    s.n = n
    return s


def test_a_shard_of_4_gib_is_refused_and_one_byte_less_is_not() -> None:
    fits = (1 << 32) - 1 - header_size(1) - 2  # the last offset is then 2**32 - 1
    with pytest.raises(ConfigError, match=r"^shard would be 4294967296 bytes; offsets are u32"):
        build_shard([_sized(fits + 1)], b"ab")
    raw = build_shard([_sized(fits)], b"ab")
    assert struct.unpack_from("<III", raw, 0) == (1, header_size(1) + 2, (1 << 32) - 1)


_P = struct.pack
HEADER_CASES = [
    (b"\1\0\0", {}, "truncated shard header: 3 bytes, need at least 4"),
    (_P("<I", 0), {}, "truncated shard header: 0 samples need 8 header bytes, have 4"),
    (_P("<II", 2, 16), {}, "truncated shard header: 2 samples need 16 header bytes, have 8"),
    (_P("<III", 1, 11, 12), {}, "first sample offset 11 lies inside the header"),
    (_P("<III", 1, 12, 12), {"min_first": 13}, "first sample offset 12 lies inside the header"),
    (_P("<5I", 3, 20, 24, 23, 30), {}, "sample offsets out of order at sample 1: 24 > 23"),
    (_P("<4I", 2, 16, 16, 15), {}, "sample offsets out of order at sample 1: 16 > 15"),
    (
        _P("<III", 1, 12, 20),
        {"file_size": 19},
        "last sample offset 20 does not match file size 19 (truncated?)",
    ),
    (
        _P("<III", 1, 12, 20),
        {"file_size": 21},
        "last sample offset 20 does not match file size 21$",
    ),
    (
        _P("<III", 1, 12, 20),
        {"file_size": 20, "expect_n": 2},
        "shard header says 1 samples, index says 2",
    ),
]


@pytest.mark.parametrize(("raw", "kw", "msg"), HEADER_CASES)
def test_header_refusals(raw: bytes, kw: dict[str, Any], msg: str) -> None:
    pattern = "^src\\.mds: " + msg.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")
    with pytest.raises(FormatError, match=pattern) as ei:
        parse_offsets(raw, "src.mds", **kw)
    assert ei.value.path == "src.mds"


def test_header_boundaries_that_are_valid() -> None:
    assert parse_offsets(struct.pack("<II", 0, 8), "s").tolist() == [8]
    assert parse_offsets(struct.pack("<III", 1, 12, 12), "s", 1, 12).tolist() == [12, 12]
    assert parse_offsets(struct.pack("<III", 1, 5, 9), "s", min_first=5).tolist() == [5, 9]
    assert parse_offsets(struct.pack("<IIII", 2, 16, 16, 16), "s").tolist() == [16, 16, 16]


# -- a whole shard ---------------------------------------------------------------------------


def test_shard_view_checks_size_count_and_config() -> None:
    cols = {"a": "int"}
    entry0 = _entry(cols)
    cfg = {"column_encodings": entry0.column_encodings, "column_names": entry0.column_names,
           "column_sizes": entry0.column_sizes, "format": "mds", "other": 1}  # fmt: skip
    samples = [struct.pack("<q", i) for i in range(3)]
    raw = _shard(samples, cfg)

    def entry(**kw: Any) -> ShardEntry:
        e = _entry(cols, n=kw.pop("n", 3), nbytes=kw.pop("nbytes", len(raw)))
        for k, v in kw.items():
            object.__setattr__(e, k, v)
        return e

    view = ShardView(bytearray(raw), entry(), "s.mds")
    assert len(view) == 3 and view.entry.samples == 3 and view.source == "s.mds"
    assert [bytes(view.sample_bytes(i)) for i in range(3)] == samples
    for i in (-1, 3):
        with pytest.raises(IndexError, match=rf"^s\.mds: sample {i} out of range 0\.\.2$"):
            view.sample_bytes(i)
    cases = [
        (raw[:-1], entry(), rf"shard is {len(raw) - 1} bytes, index says {len(raw)} \(truncated"),
        (raw + b"x", entry(), rf"shard is {len(raw) + 1} bytes, index says {len(raw)}$"),
        (raw, entry(n=2), r"shard header says 3 samples, index says 2$"),
        (raw, entry(column_names=["b"]), r"shard config column_names \['a'\] differs from the"),
        (raw, entry(column_encodings=["str"]), r"shard config column_encodings \['int'\] differs"),
        (raw, entry(column_sizes=[None]), r"shard config column_sizes \[8\] differs"),
        (raw, entry(format="json"), r"shard config format 'mds' differs from the index$"),
    ]  # fmt: skip
    for buf, e, msg in cases:
        with pytest.raises(FormatError, match=r"^s\.mds: " + msg) as ei:
            ShardView(buf, e, "s.mds")
        assert ei.value.path == "s.mds"
    # keys the config does not have are not compared
    ShardView(_shard(samples, {"format": "mds"}), entry(nbytes=len(_shard(samples))), "s.mds")
    for cfg_bytes, msg in ((b"[1]", r"^s\.mds: shard config JSON is not an object$"),
                           (b"{x", r"^s\.mds: shard config JSON is corrupt$")):  # fmt: skip
        bad = build_shard(samples, cfg_bytes)
        with pytest.raises(FormatError, match=msg) as ei:
            ShardView(bad, entry(nbytes=len(bad)), "s.mds")
        assert ei.value.path == "s.mds"


def test_encoder_refusals_are_exact() -> None:
    with pytest.raises(ConfigError, match=r"^columns: column name 3 is not a string$"):
        SampleEncoder({3: "int"})  # type: ignore[dict-item]
    enc = SampleEncoder({"a": "int"})
    with pytest.raises(ConfigError, match=r"^sample must be a dict, got list$"):
        enc.encode([1])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^sample is missing column 'a'$"):
        enc.encode({})
    fixed = SampleEncoder({"v": "ndarray:uint8:3"})
    with pytest.raises(ConfigError, match=r"^column 'v': "):
        fixed.encode({"v": np.zeros(4, np.uint8)})
