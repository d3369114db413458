"""The 28 MDS column encodings: value <-> bytes, with fixed sizes where the format has them.

Theory of operation. An encoding string (``"int"``, ``"ndarray:int32:512"``, ``"jpeg"``) is
parsed once into a :class:`Coder`: a small object with ``size`` (fixed byte size or None),
``encode(value) -> bytes`` and ``decode(memoryview) -> value``. Decoders take a memoryview so
that a sample can be sliced out of a shard buffer without copying; numeric arrays are built
with ``np.frombuffer`` over that view (read-only, zero-copy). Coders are cached by string, so
the per-sample path never parses anything.

Encoding mirrors the reference writer byte for byte, including its quirks: a value that is
already ``bytes`` is stored verbatim whatever the encoding; ``int`` is int64 little-endian;
numeric scalars are numpy scalars of the column dtype; ``ndarray`` headers are
``[dtype code][ndim<<2 | shape width][shape][values]`` with parts omitted when the encoding
string fixes dtype / shape. Bad values raise ConfigError naming the encoding (the writer adds
the column); bad bytes raise FormatError (the shard reader adds the file and column).

PIL is imported only by the image encodings, on first use.
"""

from __future__ import annotations

import json
import math
import pickle
import struct
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from functools import cache, lru_cache
from io import BytesIO
from typing import Any

import numpy as np

from astream.errors import ConfigError, FormatError, SampleTypeError

__all__ = [
    "Coder",
    "ENCODING_NAMES",
    "UNSAFE_ENCODINGS",
    "NDARRAY_DTYPE_CODES",
    "decode",
    "encode",
    "encoded_size",
    "get_coder",
    "is_encoding",
]

NDARRAY_DTYPE_CODES: dict[str, int] = {
    "uint8": 8, "int8": 9, "uint16": 16, "int16": 17, "float16": 18, "uint32": 32,
    "int32": 33, "float32": 34, "uint64": 64, "int64": 65, "float64": 66,
}  # fmt: skip
_CODE_DTYPES = {code: np.dtype(name) for name, code in NDARRAY_DTYPE_CODES.items()}
_SHAPE_DTYPES = (np.dtype("<u1"), np.dtype("<u2"), np.dtype("<u4"), np.dtype("<u8"))


_U8_AT = struct.Struct("<B").unpack_from
_U16_AT = struct.Struct("<H").unpack_from
_U32_AT = struct.Struct("<I").unpack_from
_U64_AT = struct.Struct("<Q").unpack_from


@cache
def _shape_struct(ndim: int, width: int) -> struct.Struct:
    """Unpacks ``ndim`` shape entries of 1/2/4/8 bytes (``width`` 0..3), little-endian."""
    return struct.Struct("<" + "BHIQ"[width] * ndim)


_SCALARS = ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64",
            "float16", "float32", "float64")  # fmt: skip
ENCODING_NAMES: tuple[str, ...] = (
    "bytes", "str", "int", "ndarray", *_SCALARS, "str_int", "str_float", "str_decimal",
    "pil", "jpeg", "jpeg_array", "jpegarray", "png", "list[pil]", "list[jpeg]", "list[png]",
    "pkl", "json",
)  # fmt: skip
UNSAFE_ENCODINGS = frozenset({"pkl"})
_U32 = struct.Struct("<I")


class EncodeError(ConfigError):
    """A value that the column's encoding cannot store."""


class Coder:
    """One parsed encoding: ``size`` (None = variable), ``encode``, ``decode``."""

    __slots__ = ("decode", "encode", "name", "size")

    def __init__(
        self,
        name: str,
        size: int | None,
        encode: Callable[[Any], bytes],
        decode: Callable[[memoryview], Any],
    ) -> None:
        self.name = name
        self.size = size
        self.encode = encode
        self.decode = decode


def _need(value: Any, kind: type | tuple[type, ...], enc: str) -> None:
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SampleTypeError(f"encoding {enc!r} needs a {names}, got {type(value).__name__}")


# -- simple types -------------------------------------------------------------------------------


def _enc_bytes(v: Any) -> bytes:
    _need(v, (bytes, bytearray, memoryview), "bytes")
    return bytes(v)


def _enc_str(v: Any) -> bytes:
    _need(v, str, "str")
    return v.encode("utf-8")  # type: ignore[no-any-return]


def _dec_str(mv: memoryview) -> str:
    return str(mv, "utf-8")


def _enc_int(v: Any) -> bytes:
    _need(v, int, "int")
    if not -(1 << 63) <= v < (1 << 63):
        raise EncodeError(f"encoding 'int' stores int64; {v} is out of range")
    return v.to_bytes(8, "little", signed=True)  # type: ignore[no-any-return]


def _dec_int(mv: memoryview) -> int:
    return int.from_bytes(mv, "little", signed=True)


def _scalar(name: str) -> Coder:
    dtype = np.dtype(name)
    dt = dtype.type

    def enc(v: Any) -> bytes:
        try:
            return dt(v).tobytes()  # type: ignore[no-any-return]
        except (OverflowError, ValueError, TypeError) as exc:
            raise EncodeError(f"encoding {name!r} cannot store {v!r}: {exc}") from None

    def dec(mv: memoryview) -> Any:
        return np.frombuffer(mv, dtype)[0]

    return Coder(name, dtype.itemsize, enc, dec)


def _str_coder(name: str, kind: type, parse: Callable[[str], Any]) -> Coder:
    def enc(v: Any) -> bytes:
        _need(v, kind, name)
        return str(v).encode("utf-8")

    def dec(mv: memoryview) -> Any:
        try:
            return parse(str(mv, "utf-8"))
        except (ValueError, InvalidOperation) as exc:
            raise ValueError(f"not a {name} value: {bytes(mv)[:40]!r}") from exc

    return Coder(name, None, enc, dec)


# -- ndarray ------------------------------------------------------------------------------------


def _ndarray(config: str, text: str) -> Coder:
    """``ndarray[:dtype[:d1,d2,...]]``: what the config fixes (dtype, shape) is left out of the
    bytes; what it leaves open is written in front of the values."""
    dtype, shape = _ndarray_spec(config, text)
    size = None if dtype is None or shape is None else int(np.prod(shape)) * dtype.itemsize
    enc = _ndarray_encoder(dtype, shape, text)
    if dtype is not None and shape is not None:
        fixed_dtype, fixed_shape = dtype, shape

        def dec_fixed(mv: memoryview) -> Any:
            return np.frombuffer(mv, fixed_dtype).reshape(fixed_shape)

        return Coder(text, size, enc, dec_fixed)
    dec = _ndarray_decoder(dtype, shape)
    if dtype is not None:
        return Coder(text, size, enc, _ndarray_1d_decoder(dtype, dec))
    return Coder(text, size, enc, dec)


def _ndarray_spec(config: str, text: str) -> tuple[np.dtype[Any] | None, tuple[int, ...] | None]:
    """The (dtype, shape) an ndarray encoding's config fixes; None for each it leaves open."""
    args = config.split(":") if config else []
    if len(args) > 2:
        raise ConfigError(f"bad encoding {text!r}: expected ndarray[:dtype[:d1,d2,...]]")
    dtype = None
    shape: tuple[int, ...] | None = None
    if args:
        if args[0] not in NDARRAY_DTYPE_CODES:
            raise ConfigError(
                f"bad encoding {text!r}: dtype {args[0]!r} not in {', '.join(NDARRAY_DTYPE_CODES)}"
            )
        dtype = np.dtype(args[0])
    if len(args) == 2:
        dims = args[1].split(",")
        if not all(d.isdigit() and int(d) >= 1 for d in dims) or not 1 <= len(dims) <= 63:
            raise ConfigError(f"bad encoding {text!r}: shape must be positive ints 'd1,d2,...'")
        shape = tuple(int(d) for d in dims)
    return dtype, shape


def _ndarray_encoder(
    dtype: np.dtype[Any] | None, shape: tuple[int, ...] | None, text: str
) -> Callable[[Any], bytes]:
    """Bytes of an array: a dtype code byte unless the dtype is fixed, a shape header (ndim and
    width in one byte, then the dims) unless the shape is fixed, then the values."""

    def enc(arr: Any) -> bytes:
        _need(arr, np.ndarray, text)
        code = NDARRAY_DTYPE_CODES.get(arr.dtype.name)
        if code is None:
            raise EncodeError(f"encoding {text!r}: unsupported dtype {arr.dtype.name}")
        parts = []
        if dtype is None:
            parts.append(bytes((code,)))
        elif arr.dtype != dtype:
            raise EncodeError(f"encoding {text!r}: wrong dtype {arr.dtype.name}")
        if arr.size == 0:
            raise EncodeError(
                f"encoding {text!r}: Attempting to encode a numpy array with 0 elements; "
                "such an array is not storable"
            )
        if shape is None:
            ndim = arr.ndim
            if ndim == 0:
                raise EncodeError(
                    f"encoding {text!r}: Attempting to encode a scalar with NDArray encoding "
                    "(ndim 0); use a scalar encoding such as 'float64' or 'int'"
                )
            if ndim > 63:
                raise EncodeError(f"encoding {text!r}: ndim must be 1..63, got {ndim}")
            big = max(arr.shape)
            width = 0 if big < 1 << 8 else 1 if big < 1 << 16 else 2 if big < 1 << 32 else 3
            parts.append(bytes(((ndim << 2) | width,)))
            parts.append(np.asarray(arr.shape, _SHAPE_DTYPES[width]).tobytes())
        elif arr.shape != shape:
            raise EncodeError(f"encoding {text!r}: wrong shape {arr.shape}")
        parts.append(arr.tobytes())
        return b"".join(parts)

    return enc


def _ndarray_decoder(
    dtype: np.dtype[Any] | None, shape: tuple[int, ...] | None
) -> Callable[[memoryview], Any]:
    """The general decoder: reads the dtype code and shape header where the config leaves them
    open, and raises ValueError unless the values fill the rest exactly."""

    def dec(mv: memoryview) -> Any:
        pos = 0
        dt = dtype
        if dt is None:
            dt = _CODE_DTYPES.get(mv[0])
            if dt is None:
                raise ValueError(f"unknown ndarray dtype code {mv[0]}")
            pos = 1
        shp = shape
        if shp is None:
            head = mv[pos]
            ndim = head >> 2
            unpack_shape = _shape_struct(ndim, head & 3)
            end = pos + 1 + unpack_shape.size
            if ndim == 0 or end > len(mv):
                raise ValueError("ndarray shape header truncated or empty")
            shp = unpack_shape.unpack_from(mv, pos + 1)
            pos = end
        count = shp[0] if len(shp) == 1 else math.prod(shp)
        if count * dt.itemsize != len(mv) - pos:
            raise ValueError(
                f"ndarray of shape {shp} {dt.name} does not fill {len(mv) - pos} bytes"
            )
        arr = np.frombuffer(mv, dt, count, pos)
        return arr if len(shp) == 1 else arr.reshape(shp)

    return dec


def _ndarray_1d_decoder(
    known: np.dtype[Any], dec: Callable[[memoryview], Any]
) -> Callable[[memoryview], Any]:
    """``ndarray:DTYPE`` (dtype fixed, shape open): a 1-D value is read with one unpack of its
    shape header; anything else goes to ``dec``, which decodes it or raises its precise error."""
    item = known.itemsize
    one_dim = {4: (2, _U8_AT), 5: (3, _U16_AT), 6: (5, _U32_AT), 7: (9, _U64_AT)}

    def dec_1d(mv: memoryview) -> Any:
        """``ndarray:DTYPE`` fast path: a 1-D shape header is read with one unpack."""
        fast = one_dim.get(mv[0])
        if fast is None:
            return dec(mv)
        pos, at = fast
        (count,) = at(mv, 1)
        if count == 0 or count * item != len(mv) - pos:
            return dec(mv)  # let the general path raise its precise error
        return np.frombuffer(mv, known, count, pos)

    return dec_1d


# -- images -------------------------------------------------------------------------------------


def _image_type() -> Any:
    from PIL import Image

    return Image.Image


def _enc_pil(img: Any) -> bytes:
    _need(img, _image_type(), "pil")
    mode: bytes = img.mode.encode("utf-8")
    w, h = img.size
    raw: bytes = img.tobytes()
    return bytes(struct.pack("<III", w, h, len(mode)) + mode + raw)


def _dec_pil(mv: memoryview) -> Any:
    from PIL import Image

    w, h, n = struct.unpack_from("<III", mv, 0)
    mode = str(mv[12 : 12 + n], "utf-8")
    return Image.frombytes(mode, (w, h), bytes(mv[12 + n :]))


def _enc_jpeg(img: Any) -> bytes:
    _need(img, _image_type(), "jpeg")
    from PIL.JpegImagePlugin import JpegImageFile

    filename = getattr(img, "filename", None)
    if isinstance(img, JpegImageFile) and filename:
        try:
            with open(filename, "rb") as f:
                return f.read()
        except FileNotFoundError:
            pass
    out = BytesIO()
    img.save(out, format="JPEG")
    return out.getvalue()


def _enc_png(img: Any) -> bytes:
    _need(img, _image_type(), "png")
    out = BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def _dec_image(mv: memoryview) -> Any:
    from PIL import Image

    return Image.open(BytesIO(bytes(mv)))


def _lengths(mv: memoryview, pos: int) -> tuple[int, list[int]]:
    (count,) = _U32.unpack_from(mv, pos)
    end = pos + 4 + 4 * count
    if end > len(mv):
        raise ValueError(f"element count {count} overruns the value ({len(mv)} bytes)")
    sizes = np.frombuffer(mv[pos + 4 : end], "<u4").tolist()
    if end + sum(sizes) != len(mv):
        raise ValueError("element lengths do not add up to the value size")
    return end, sizes


def _split_elems(mv: memoryview, pos: int) -> list[memoryview]:
    start, sizes = _lengths(mv, pos)
    out = []
    for n in sizes:
        out.append(mv[start : start + n])
        start += n
    return out


def _list_coder(name: str, elem_enc: Callable[[Any], bytes]) -> Coder:
    def enc(items: Any) -> bytes:
        _need(items, list, name)
        parts = [elem_enc(x) for x in items]
        head = struct.pack(f"<II{len(parts)}I", 0, len(parts), *map(len, parts))
        return head + b"".join(parts)

    elem_dec = _dec_pil if name == "list[pil]" else _dec_image

    def dec(mv: memoryview) -> Any:
        return [elem_dec(e) for e in _split_elems(mv, 4)]

    return Coder(name, None, enc, dec)


def _enc_jpeg_array(items: Any) -> bytes:
    items = list(items)
    head = struct.pack(f"<I{len(items)}I", len(items), *map(len, items))
    return head + b"".join(bytes(x) for x in items)


def _dec_jpeg_array(mv: memoryview) -> Any:
    return [_dec_image(e) for e in _split_elems(mv, 0)]


# -- opaque -------------------------------------------------------------------------------------


def _enc_json(v: Any) -> bytes:
    if isinstance(v, np.ndarray):
        v = v.tolist()
    try:
        return json.dumps(v).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise EncodeError(f"encoding 'json' cannot store {type(v).__name__}: {exc}") from None


def _dec_json(mv: memoryview) -> Any:
    return json.loads(str(mv, "utf-8"))


def _dec_pkl(mv: memoryview) -> Any:
    return pickle.loads(mv)


def _build(text: str) -> Coder:
    name, sep, config = text.partition(":")
    if name == "ndarray":
        return _ndarray(config, text)
    if sep:
        raise ConfigError(f"unknown encoding {text!r}: only ndarray takes ':' options")
    if name in _SCALARS:
        return _scalar(name)
    table: dict[str, tuple[int | None, Callable[[Any], bytes], Callable[[memoryview], Any]]] = {
        "bytes": (None, _enc_bytes, bytes),
        "str": (None, _enc_str, _dec_str),
        "int": (8, _enc_int, _dec_int),
        "pil": (None, _enc_pil, _dec_pil),
        "jpeg": (None, _enc_jpeg, _dec_image),
        "png": (None, _enc_png, _dec_image),
        "jpeg_array": (None, _enc_jpeg_array, _dec_jpeg_array),
        "jpegarray": (None, _enc_jpeg_array, _dec_jpeg_array),
        "pkl": (None, pickle.dumps, _dec_pkl),
        "json": (None, _enc_json, _dec_json),
    }
    if name in table:
        size, enc, dec = table[name]
        return Coder(name, size, enc, dec)
    if name == "str_int":
        return _str_coder(name, int, int)
    if name == "str_float":
        return _str_coder(name, float, float)
    if name == "str_decimal":
        return _str_coder(name, Decimal, Decimal)
    elems = {"list[pil]": _enc_pil, "list[jpeg]": _enc_jpeg, "list[png]": _enc_png}
    if name in elems:
        return _list_coder(name, elems[name])
    raise ConfigError(f"unknown encoding {text!r}; known: {', '.join(ENCODING_NAMES)}")


@lru_cache(maxsize=512)
def get_coder(encoding: str) -> Coder:
    """The coder for an encoding string; ConfigError if it is not one."""
    if not isinstance(encoding, str):
        raise ConfigError(f"encoding must be a string, got {encoding!r}")
    return _build(encoding)


def is_encoding(encoding: str) -> bool:
    try:
        get_coder(encoding)
    except ConfigError:
        return False
    return True


def encoded_size(encoding: str) -> int | None:
    """Fixed byte size of every value of ``encoding``, or None if variable."""
    return get_coder(encoding).size


def encode(encoding: str, value: Any) -> bytes:
    """Encode one value; ``bytes`` pass through unchanged, as in the reference writer."""
    if isinstance(value, bytes):
        return value
    return get_coder(encoding).encode(value)


def decode(encoding: str, data: bytes | memoryview, source: str = "<value>") -> Any:
    """Decode one value (FormatError naming ``source`` if the bytes are not valid)."""
    try:
        return get_coder(encoding).decode(memoryview(data))
    except FormatError:
        raise
    except Exception as exc:
        raise FormatError(f"cannot decode {encoding!r} value: {exc}", source) from None
