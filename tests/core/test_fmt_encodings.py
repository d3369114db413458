"""Every MDS encoding round-trips (hypothesis), exact header bytes, and bad values are refused."""

from __future__ import annotations

import struct
from decimal import Decimal
from io import BytesIO

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from PIL import Image

from astream.core.encodings import (
    ENCODING_NAMES,
    NDARRAY_DTYPE_CODES,
    decode,
    encode,
    encoded_size,
    get_coder,
)
from astream.errors import ConfigError, FormatError

FAST = settings(max_examples=60, deadline=None)
_DTYPES = list(NDARRAY_DTYPE_CODES)


def test_there_are_28_encoding_names() -> None:
    assert len(ENCODING_NAMES) == 28 and len(set(ENCODING_NAMES)) == 28
    for name in ENCODING_NAMES:
        assert get_coder(name).name == name


def test_ndarray_header_example_from_the_spec() -> None:
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    assert encode("ndarray", arr) == bytes([0x11, 0x08, 0x02, 0x03]) + arr.tobytes()
    assert encode("ndarray:int16", arr) == bytes([0x08, 0x02, 0x03]) + arr.tobytes()
    assert encode("ndarray:int16:2,3", arr) == arr.tobytes()
    assert encoded_size("ndarray:int16:2,3") == 12 and encoded_size("ndarray:int16") is None
    wide = np.zeros((1, 300), np.uint8)
    assert encode("ndarray", wide)[:6] == bytes([8, (2 << 2) | 1]) + struct.pack("<HH", 1, 300)


def _roundtrip(enc: str, value: object) -> object:
    data = encode(enc, value)
    size = encoded_size(enc)
    assert size is None or len(data) == size
    return decode(enc, data)


@FAST
@given(st.data())
def test_ndarray_roundtrip(data: st.DataObject) -> None:
    dtype = data.draw(st.sampled_from(_DTYPES))
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=20))
    arr = data.draw(hnp.arrays(dtype, shape))
    for enc in ("ndarray", f"ndarray:{dtype}", f"ndarray:{dtype}:{','.join(map(str, shape))}"):
        out = _roundtrip(enc, arr)
        assert isinstance(out, np.ndarray) and out.dtype == arr.dtype and out.shape == arr.shape
        assert out.tobytes() == arr.tobytes() and not out.flags.writeable


@FAST
@given(st.sampled_from(_DTYPES), st.data())
def test_scalar_roundtrip(dtype: str, data: st.DataObject) -> None:
    value = data.draw(hnp.from_dtype(np.dtype(dtype)))
    out = _roundtrip(dtype, value)
    assert type(out) is np.dtype(dtype).type
    assert np.array(out).tobytes() == np.array(value, dtype).tobytes()


@FAST
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.text(), st.binary(), st.integers())
def test_simple_roundtrips(i: int, text: str, blob: bytes, big: int) -> None:
    assert _roundtrip("int", i) == i and type(_roundtrip("int", i)) is int
    assert _roundtrip("str", text) == text
    assert _roundtrip("bytes", blob) == blob
    assert _roundtrip("str_int", big) == big


@FAST
@given(st.floats(allow_nan=False), st.decimals(allow_nan=False, allow_infinity=False))
def test_str_number_roundtrips(f: float, d: Decimal) -> None:
    assert _roundtrip("str_float", f) == f
    assert _roundtrip("str_decimal", d) == d


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4),
    max_leaves=10,
)


@FAST
@given(json_values)
def test_json_and_pkl_roundtrip(value: object) -> None:
    assert _roundtrip("json", value) == value
    assert _roundtrip("pkl", value) == value


@settings(max_examples=15, deadline=None)
@given(st.lists(hnp.arrays(np.uint8, st.tuples(st.integers(1, 6), st.integers(1, 6), st.just(3))),
                max_size=3))  # fmt: skip
def test_image_encodings_roundtrip(arrays: list[np.ndarray]) -> None:
    images = [Image.fromarray(a, "RGB") for a in arrays]
    for enc in ("list[pil]", "list[png]"):
        out = _roundtrip(enc, images)
        assert [o.tobytes() for o in out] == [i.tobytes() for i in images]  # type: ignore[attr-defined]
    for img in images:
        assert _roundtrip("pil", img).tobytes() == img.tobytes()  # type: ignore[attr-defined]
        assert _roundtrip("png", img).tobytes() == img.tobytes()  # type: ignore[attr-defined]
        jpg = encode("jpeg", img)
        assert np.asarray(decode("jpeg", jpg)).shape == (*img.size[::-1], 3)
    jpegs = [encode("jpeg", i) for i in images]
    for enc in ("jpeg_array", "jpegarray"):
        out = _roundtrip(enc, jpegs)
        assert [o.tobytes() for o in out] == [Image.open(BytesIO(j)).tobytes() for j in jpegs]  # type: ignore[attr-defined]


def test_jpeg_opened_from_file_is_copied_verbatim(tmp_path: object) -> None:
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "x.jpg"
    Image.new("RGB", (4, 4), (10, 20, 30)).save(path, quality=50)
    with Image.open(path) as img:
        assert encode("jpeg", img) == path.read_bytes()


@pytest.mark.parametrize(
    ("enc", "value", "message"),
    [
        ("int", 1 << 63, "encoding 'int' stores int64; 9223372036854775808 is out of range"),
        ("int", "3", "encoding 'int' needs a int, got str"),
        ("str", 3, "encoding 'str' needs a str, got int"),
        ("uint8", 300, "encoding 'uint8' cannot store 300"),
        (
            "ndarray",
            np.zeros(0),
            "encoding 'ndarray': Attempting to encode a numpy array with 0 elements; "
            "such an array is not storable",
        ),
        ("ndarray", np.zeros(3, bool), "encoding 'ndarray': unsupported dtype bool"),
        ("ndarray:int32", np.zeros(3, np.int64), "encoding 'ndarray:int32': wrong dtype int64"),
        ("ndarray:int32:4", np.zeros(3, np.int32), "encoding 'ndarray:int32:4': wrong shape (3,)"),
        (
            "ndarray",
            np.array(1, np.float32),
            "encoding 'ndarray': Attempting to encode a scalar with NDArray encoding (ndim 0); "
            "use a scalar encoding such as 'float64' or 'int'",
        ),
        ("str_float", 1, "encoding 'str_float' needs a float, got int"),
        ("json", {1j}, "encoding 'json' cannot store set"),
    ],
)
def test_bad_values(enc: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        encode(enc, value)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("enc", "message"),
    [
        ("float128", "unknown encoding 'float128'"),
        ("int:3", "unknown encoding 'int:3': only ndarray takes ':' options"),
        ("ndarray:bool", "bad encoding 'ndarray:bool': dtype 'bool' not in"),
        ("ndarray:int8:0", "bad encoding 'ndarray:int8:0': shape must be positive ints"),
        ("ndarray:int8:2:3", "bad encoding 'ndarray:int8:2:3': expected ndarray[:dtype"),
    ],
)
def test_unknown_encodings(enc: str, message: str) -> None:
    with pytest.raises(ConfigError, match=r"^" + message.replace("[", r"\[")):
        get_coder(enc)


def test_bytes_values_bypass_encoding_like_the_reference() -> None:
    assert encode("ndarray", b"\x01\x02") == b"\x01\x02"


@pytest.mark.parametrize(
    ("enc", "data", "message"),
    [
        ("ndarray", b"\x07\x04\x01", "unknown ndarray dtype code 7"),
        ("ndarray", b"\x08\x08\x02\x03\x00", "ndarray of shape (2, 3) uint8 does not fill 1 bytes"),
        ("ndarray:int32", b"\x04\x02\x00", "ndarray of shape (2,) int32 does not fill 1 bytes"),
        ("jpeg_array", b"\xff\xff\x00\x00", "element count 65535 overruns the value (4 bytes)"),
        ("str_int", b"12a", "not a str_int value: b'12a'"),
    ],
)
def test_corrupt_values(enc: str, data: bytes, message: str) -> None:
    with pytest.raises(FormatError) as info:
        decode(enc, data, "f.mds")
    assert str(info.value) == f"f.mds: cannot decode {enc!r} value: {message}"
