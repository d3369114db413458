"""The published Parquet index: the table as one binary file written next to the data.

Pure (stdlib): ``b"ASTPQIX1" | u64 json length | JSON | footer bytes``; the JSON gives each
footer's offset and length in the blob. ``astream index`` writes it (:func:`dump_table`) as
:data:`INDEX_NAME`; a reader parses it (:func:`parse_table`) from untrusted bytes, validated
field by field like ``index.json``: any malformation is a ``FormatError`` naming the source
and the field.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from astream.core.paths import safe_relpath
from astream.errors import FormatError
from astream.parquet.table import ParquetFile, ParquetTable, RowGroup

__all__ = ["INDEX_NAME", "dump_table", "parse_table"]

INDEX_NAME = "_astream_parquet_index.bin"  # written next to the data by `astream index`
_MAGIC = b"ASTPQIX1"
_VERSION = 1


def dump_table(table: ParquetTable) -> bytes:
    blob = bytearray()
    files = []
    for f in table.files:
        files.append(
            {
                "key": f.key,
                "size": f.size,
                "etag": f.etag,
                "columns": list(f.columns),
                "types": list(f.types),
                "footer": [len(blob), len(f.footer)],
                "row_groups": [
                    {"rows": g.rows, "chunks": [[list(r) for r in c] for c in g.chunks]}
                    for g in f.row_groups
                ],
            }
        )
        blob += f.footer
    head = json.dumps({"version": _VERSION, "files": files}, separators=(",", ":")).encode()
    return _MAGIC + struct.pack("<Q", len(head)) + head + bytes(blob)


def _fail(source: str, where: str, msg: str) -> FormatError:
    return FormatError(f"{where}: {msg}", source)


def _int(obj: Any, source: str, where: str) -> int:
    if isinstance(obj, bool) or not isinstance(obj, int) or obj < 0:
        raise _fail(source, where, f"expected an integer >= 0, got {obj!r}")
    return obj


def _strs(obj: Any, source: str, where: str) -> tuple[str, ...]:
    if not isinstance(obj, list) or not all(isinstance(x, str) for x in obj):
        raise _fail(source, where, "expected a list of strings")
    return tuple(obj)


def _file(obj: Any, blob: memoryview, source: str, where: str) -> ParquetFile:
    keys = {"key", "size", "etag", "columns", "types", "footer", "row_groups"}
    if not isinstance(obj, dict) or set(obj) != keys:
        raise _fail(source, where, f"expected the keys {sorted(keys)}")
    key = safe_relpath(obj["key"], source) if isinstance(obj["key"], str) else None
    if key is None:
        raise _fail(source, f"{where}.key", "expected a string")
    size = _int(obj["size"], source, f"{where}.size")
    etag = obj["etag"]
    if etag is not None and not isinstance(etag, str):
        raise _fail(source, f"{where}.etag", "expected a string or null")
    cols = _strs(obj["columns"], source, f"{where}.columns")
    types = _strs(obj["types"], source, f"{where}.types")
    if len(cols) != len(types):
        raise _fail(source, where, "columns and types differ in length")
    fo = obj["footer"]
    if not isinstance(fo, list) or len(fo) != 2:
        raise _fail(source, f"{where}.footer", "expected [offset, length]")
    off, n = (_int(x, source, f"{where}.footer") for x in fo)
    if off + n > len(blob):
        raise _fail(source, f"{where}.footer", "past the end of the footer blob")
    groups = []
    rgs = obj["row_groups"]
    if not isinstance(rgs, list):
        raise _fail(source, f"{where}.row_groups", "expected a list")
    for g, rg in enumerate(rgs):
        w = f"{where}.row_groups[{g}]"
        if not isinstance(rg, dict) or set(rg) != {"rows", "chunks"}:
            raise _fail(source, w, "expected {rows, chunks}")
        chunks = rg["chunks"]
        if not isinstance(chunks, list) or len(chunks) != len(cols):
            raise _fail(source, f"{w}.chunks", f"expected {len(cols)} columns")
        parsed = []
        for c, ranges in enumerate(chunks):
            if not isinstance(ranges, list):
                raise _fail(source, f"{w}.chunks[{c}]", "expected a list of ranges")
            rs = []
            for r in ranges:
                if not isinstance(r, list) or len(r) != 2:
                    raise _fail(source, f"{w}.chunks[{c}]", "expected [start, end] ranges")
                s, e = (_int(x, source, f"{w}.chunks[{c}]") for x in r)
                if not s < e <= size:
                    raise _fail(source, f"{w}.chunks[{c}]", f"range {s}-{e} outside 0-{size}")
                rs.append((s, e))
            parsed.append(tuple(rs))
        groups.append(RowGroup(_int(rg["rows"], source, f"{w}.rows"), tuple(parsed)))
    return ParquetFile(key, size, etag, cols, types, tuple(groups), bytes(blob[off : off + n]))


def parse_table(data: bytes, source: str) -> ParquetTable:
    """Parse and validate a serialised index; ``FormatError`` naming ``source`` and the field."""
    mv = memoryview(data)
    if len(mv) < 16 or bytes(mv[:8]) != _MAGIC:
        raise FormatError("not an astream Parquet index (bad magic)", source)
    (n,) = struct.unpack("<Q", mv[8:16])
    if 16 + n > len(mv):
        raise FormatError("truncated Parquet index", source)
    try:
        obj = json.loads(bytes(mv[16 : 16 + n]))
    except (ValueError, UnicodeDecodeError):
        raise FormatError("Parquet index JSON is corrupt", source) from None
    if not isinstance(obj, dict) or obj.get("version") != _VERSION:
        raise FormatError(f"unsupported Parquet index version (expected {_VERSION})", source)
    files = obj.get("files")
    if not isinstance(files, list):
        raise _fail(source, "files", "expected a list")
    blob = mv[16 + n :]
    return ParquetTable(tuple(_file(f, blob, source, f"files[{i}]") for i, f in enumerate(files)))
