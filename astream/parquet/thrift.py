"""The Thrift compact protocol, as Parquet's footers and page headers use it, without a schema.

A struct decodes to a :class:`Struct`: per field id, its wire type and value. Encoding it again
gives the same bytes for every field kept (integers, strings, lists, nested structs, booleans),
so a footer can be read, a few fields changed, and written back (``parquet/pages.py``
builds one-page Parquet files that way) without a generated class per Parquet struct.

Values by wire type: booleans ``bool``; ``BYTE``/``I16``/``I32``/``I64`` ``int``; ``DOUBLE``
``float``; ``BINARY`` ``bytes``; ``LIST``/``SET`` ``(element type, [values])``; ``MAP``
``(key type, value type, [(key, value)])``; ``STRUCT`` :class:`Struct`.

The input is untrusted (a footer from object storage): every length is checked against the
bytes left, nesting is bounded, and any malformation is a ``ValueError`` naming the offset
(callers turn it into a ``FormatError`` naming the file).
"""

from __future__ import annotations

import struct
from typing import Any

__all__ = ["BINARY", "BOOL", "I16", "I32", "I64", "LIST", "STRUCT", "Struct", "decode", "encode"]

STOP, BOOL, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
_MAX_DEPTH = 64
_DOUBLE = struct.Struct("<d")


class Struct(dict[int, tuple[int, Any]]):
    """Field id -> (wire type, value); booleans are stored with type :data:`BOOL`."""

    def get_value(self, fid: int, default: Any = None) -> Any:
        got = self.get(fid)
        return default if got is None else got[1]

    def set(self, fid: int, wtype: int, value: Any) -> None:
        self[fid] = (wtype, value)


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def byte(self) -> int:
        if self.pos >= len(self.buf):
            raise ValueError(f"thrift data ends at byte {self.pos}")
        b = self.buf[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        out = shift = 0
        while True:
            b = self.byte()
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7
            if shift > 63:
                raise ValueError(f"thrift varint too long at byte {self.pos}")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"thrift field of {n} bytes runs past the end at byte {self.pos}")
        out = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return out

    def value(self, t: int, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            raise ValueError(f"thrift values nested deeper than {_MAX_DEPTH}")
        if t in (BOOL, FALSE):  # a boolean inside a list: one byte
            return self.byte() == BOOL
        if t == BYTE:
            b = self.byte()
            return b - 256 if b > 127 else b
        if t in (I16, I32, I64):
            return self.zigzag()
        if t == DOUBLE:
            return _DOUBLE.unpack(self.take(8))[0]
        if t == BINARY:
            return self.take(self.varint())
        if t in (LIST, SET):
            head = self.byte()
            n, et = head >> 4, head & 0x0F
            if n == 15:
                n = self.varint()
            if n > len(self.buf) - self.pos:  # every element takes at least one byte
                raise ValueError(f"thrift list of {n} elements at byte {self.pos} is too long")
            return (et, [self.value(et, depth + 1) for _ in range(n)])
        if t == MAP:
            n = self.varint()
            if n == 0:
                return (0, 0, [])
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            if 2 * n > len(self.buf) - self.pos:
                raise ValueError(f"thrift map of {n} entries at byte {self.pos} is too long")
            pairs = [(self.value(kt, depth + 1), self.value(vt, depth + 1)) for _ in range(n)]
            return (kt, vt, pairs)
        if t == STRUCT:
            return self.struct(depth + 1)
        raise ValueError(f"unknown thrift type {t} at byte {self.pos}")

    def struct(self, depth: int) -> Struct:
        if depth > _MAX_DEPTH:
            raise ValueError(f"thrift structs nested deeper than {_MAX_DEPTH}")
        out = Struct()
        last = 0
        while True:
            head = self.byte()
            if head == STOP:
                return out
            delta, t = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            if t in (BOOL, FALSE):
                out[fid] = (BOOL, t == BOOL)
            else:
                out[fid] = (t, self.value(t, depth))
            last = fid


def decode(buf: bytes | memoryview, pos: int = 0) -> tuple[Struct, int]:
    """The struct at ``buf[pos:]`` and the offset just past it."""
    r = _Reader(buf, pos)
    return r.struct(0), r.pos


def _varint(out: bytearray, n: int) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _zigzag(out: bytearray, n: int) -> None:
    _varint(out, (n << 1) ^ (n >> 63))


def _value(out: bytearray, t: int, v: Any) -> None:
    if t in (BOOL, FALSE):
        out.append(BOOL if v else FALSE)
    elif t == BYTE:
        out.append(v & 0xFF)
    elif t in (I16, I32, I64):
        _zigzag(out, v)
    elif t == DOUBLE:
        out += _DOUBLE.pack(v)
    elif t == BINARY:
        _varint(out, len(v))
        out += v
    elif t in (LIST, SET):
        et, items = v
        if len(items) < 15:
            out.append((len(items) << 4) | et)
        else:
            out.append(0xF0 | et)
            _varint(out, len(items))
        for item in items:
            _value(out, et, item)
    elif t == MAP:
        kt, vt, pairs = v
        _varint(out, len(pairs))
        if pairs:
            out.append((kt << 4) | vt)
            for k, item in pairs:
                _value(out, kt, k)
                _value(out, vt, item)
    elif t == STRUCT:
        _struct(out, v)
    else:
        raise ValueError(f"unknown thrift type {t}")


def _struct(out: bytearray, s: Struct) -> None:
    last = 0
    for fid in sorted(s):
        t, v = s[fid]
        wire = (BOOL if v else FALSE) if t in (BOOL, FALSE) else t
        delta = fid - last
        if 0 < delta <= 15:
            out.append((delta << 4) | wire)
        else:
            out.append(wire)
            _zigzag(out, fid)
        if t not in (BOOL, FALSE):
            _value(out, t, v)
        last = fid
    out.append(STOP)


def encode(s: Struct) -> bytes:
    """``s`` in the compact protocol."""
    out = bytearray()
    _struct(out, s)
    return bytes(out)
