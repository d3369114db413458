"""The index.json model: parse and validate untrusted bytes, and write the reference layout.

Theory of operation. ``parse_index`` turns bytes into frozen dataclasses and checks every field
it will later trust: the version, the exact key set of each shard entry (the reference reader
fails on unknown keys, so we do too), types (``bool`` is not an int here), shard basenames
(``paths.safe_relpath``: no ``..``, no absolute paths), compression specs, encodings and their
fixed sizes. Any failure is a ``FormatError`` naming the source file and the field, such as
``shards[3].raw_data.basename``. ``dump_index`` writes what the reference writer writes:
``json.dumps(obj, sort_keys=True)``, one line, no trailing newline. ``merge_layout=True`` gives
what the reference ``merge_index`` writes instead (``version`` first, then ``shards``).

Per-format key sets (besides the common ones):
``mds``: column_encodings, column_names, column_sizes, raw_data, zip_data.
``json``: columns, newline, raw_data, raw_meta, zip_data, zip_meta.
``csv``/``tsv``: column_encodings, column_names, newline, raw_*/zip_* data and meta.
``xsv``: as csv plus separator.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from astream.core import compression as _compression
from astream.core.encodings import get_coder
from astream.core.index_fast import parse_mds_fast
from astream.core.paths import safe_relpath
from astream.core.shard_entry import FileInfo, ShardEntry
from astream.core.shard_table import ShardTable
from astream.errors import ConfigError, FormatError, IndexJSONError, IndexKeyError

__all__ = ["FileInfo", "Index", "ShardEntry", "dump_index", "parse_index", "INDEX_BASENAME"]

INDEX_BASENAME = "index.json"
_COMMON = {"compression", "format", "hashes", "raw_data", "samples", "size_limit", "version",
           "zip_data"}  # fmt: skip
_SPLIT = {"raw_meta", "zip_meta", "newline"}
_KEYS: dict[str, frozenset[str]] = {
    "mds": frozenset(_COMMON | {"column_encodings", "column_names", "column_sizes"}),
    "json": frozenset(_COMMON | _SPLIT | {"columns"}),
    "csv": frozenset(_COMMON | _SPLIT | {"column_encodings", "column_names"}),
    "tsv": frozenset(_COMMON | _SPLIT | {"column_encodings", "column_names"}),
    "xsv": frozenset(_COMMON | _SPLIT | {"column_encodings", "column_names", "separator"}),
}
SPLIT_ENCODINGS = frozenset({"str", "int", "float"})


@dataclass(frozen=True)
class Index:
    """A parsed index.json: shards in global sample order, plus unknown top-level keys.

    ``shards`` may be given as any sequence of entries; it is always kept as a
    :class:`ShardTable` (columns; ``table`` is the same object, typed)."""

    shards: Sequence[ShardEntry]
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.shards, ShardTable):
            object.__setattr__(self, "shards", ShardTable.from_entries(self.shards))

    @property
    def table(self) -> ShardTable:
        assert isinstance(self.shards, ShardTable)
        return self.shards

    def sample_counts(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        return self.table.samples.copy()

    @property
    def num_samples(self) -> int:
        return int(self.table.samples.sum())


def dump_index(index: Index, *, merge_layout: bool = False) -> bytes:
    """index.json bytes in the reference writer's layout (or its merge_index layout)."""
    for key in ("shards", "version"):
        if key in index.extra:
            raise ConfigError(f"Index.extra must not contain {key!r}")
    shards = [s.to_json() for s in index.shards]
    if merge_layout:
        obj: dict[str, Any] = {"version": 2, "shards": shards, **index.extra}
        return json.dumps(obj).encode("utf-8")
    obj = {"shards": shards, "version": 2, **index.extra}
    return json.dumps(obj, sort_keys=True).encode("utf-8")


class _Checker:
    """Field-by-field validation with error messages naming ``source`` and the field path."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, msg: str) -> FormatError:
        return FormatError(f"{where}: {msg}", self.source)

    def int_(self, obj: Any, where: str, *, minimum: int = 0, optional: bool = False) -> Any:
        if obj is None and optional:
            return None
        if isinstance(obj, bool) or not isinstance(obj, int) or obj < minimum:
            raise self.fail(where, f"expected an integer >= {minimum}, got {obj!r}")
        return obj

    def str_(self, obj: Any, where: str, *, optional: bool = False) -> Any:
        if obj is None and optional:
            return None
        if not isinstance(obj, str):
            raise self.fail(where, f"expected a string, got {obj!r}")
        return obj

    def str_list(self, obj: Any, where: str) -> list[str]:
        if not isinstance(obj, list):
            raise self.fail(where, f"expected a list, got {type(obj).__name__}")
        for i, x in enumerate(obj):
            self.str_(x, f"{where}[{i}]")
        return list(obj)

    def file_info(self, obj: Any, where: str, *, optional: bool = False) -> FileInfo | None:
        if obj is None and optional:
            return None
        if not isinstance(obj, dict) or set(obj) != {"basename", "bytes", "hashes"}:
            raise self.fail(where, "expected {basename, bytes, hashes}")
        try:
            basename = safe_relpath(obj["basename"], self.source)
        except FormatError as exc:
            raise self.fail(f"{where}.basename", str(exc).split(": ", 1)[-1]) from None
        size = self.int_(obj["bytes"], f"{where}.bytes")
        hashes = obj["hashes"]
        if not isinstance(hashes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in hashes.items()
        ):
            raise self.fail(f"{where}.hashes", "expected an object of string digests")
        return FileInfo(basename, size, dict(hashes))


def _parse_shard(c: _Checker, obj: Any, where: str) -> ShardEntry:
    """One validated shard entry: the common fields, then the columns of its format, then the
    bounds an MDS header puts on the sample count."""
    fmt, comp, raw, zip_ = _shard_files(c, obj, where)
    kw: dict[str, Any] = {}
    if fmt == "mds":
        names, encs, sizes = _mds_columns(c, obj, where)
    else:
        names, encs, sizes = _split_columns(c, obj, where, fmt, comp, kw)
    if len(set(names)) != len(names):
        raise c.fail(f"{where}.column_names", "duplicate column names")
    hashes = c.str_list(obj["hashes"], f"{where}.hashes")
    samples = c.int_(obj["samples"], f"{where}.samples")
    if fmt == "mds":
        _check_mds_bounds(c, where, raw, samples)
    return ShardEntry(
        format=fmt,
        column_encodings=encs,
        column_names=names,
        column_sizes=sizes,
        compression=comp,
        hashes=hashes,
        raw_data=raw,
        zip_data=zip_,
        samples=samples,
        size_limit=c.int_(obj["size_limit"], f"{where}.size_limit", optional=True),
        **kw,
    )


def _shard_files(
    c: _Checker, obj: Any, where: str
) -> tuple[str, str | None, FileInfo, FileInfo | None]:
    """(format, compression, raw_data, zip_data) of a shard entry, after checking its exact key
    set for the format and its version: what every format has in common."""
    if not isinstance(obj, dict):
        raise c.fail(where, "expected an object")
    fmt = obj.get("format")
    if not isinstance(fmt, str) or fmt not in _KEYS:
        raise IndexKeyError(f"{where}.format: unknown shard format {fmt!r}", c.source)
    keys = set(obj)
    if keys != _KEYS[fmt]:
        missing, unknown = sorted(_KEYS[fmt] - keys), sorted(keys - _KEYS[fmt])
        raise c.fail(where, f"{fmt} shard keys: missing {missing}, unknown {unknown}")
    if obj["version"] != 2 or isinstance(obj["version"], bool):
        raise c.fail(f"{where}.version", f"unsupported version {obj['version']!r}, expected 2")
    comp = c.str_(obj["compression"], f"{where}.compression", optional=True)
    try:
        comp = _compression.validate_compression(comp)
    except ConfigError as exc:
        raise c.fail(f"{where}.compression", str(exc)) from None
    raw = c.file_info(obj["raw_data"], f"{where}.raw_data")
    zip_ = c.file_info(obj["zip_data"], f"{where}.zip_data", optional=True)
    if (comp is None) != (zip_ is None):
        raise c.fail(f"{where}.zip_data", "must be set exactly when compression is set")
    assert raw is not None
    return fmt, comp, raw, zip_


def _mds_columns(
    c: _Checker, obj: dict[str, Any], where: str
) -> tuple[list[str], list[str], list[int | None]]:
    """(names, encodings, sizes) of an MDS shard: every encoding known, every size the one its
    encoding fixes (None for variable-size ones)."""
    names = c.str_list(obj["column_names"], f"{where}.column_names")
    encs = c.str_list(obj["column_encodings"], f"{where}.column_encodings")
    raw_sizes = obj["column_sizes"]
    if not isinstance(raw_sizes, list) or not len(names) == len(encs) == len(raw_sizes):
        raise c.fail(where, "column_names, column_encodings, column_sizes differ in length")
    sizes: list[int | None] = []
    for i, enc in enumerate(encs):
        try:
            coder = get_coder(enc)
        except ConfigError as exc:
            raise c.fail(f"{where}.column_encodings[{i}]", str(exc)) from None
        size = c.int_(raw_sizes[i], f"{where}.column_sizes[{i}]", optional=True)
        if size != coder.size:
            raise c.fail(f"{where}.column_sizes[{i}]", f"{size!r} != {enc!r} size {coder.size}")
        sizes.append(size)
    return names, encs, sizes


def _split_columns(
    c: _Checker, obj: dict[str, Any], where: str, fmt: str, comp: str | None, kw: dict[str, Any]
) -> tuple[list[str], list[str], list[int | None]]:
    """(names, encodings, sizes) of a split-format shard (json, csv, tsv, xsv); its meta files,
    newline, separator and JSON columns go into ``kw``, the extra ShardEntry fields."""
    kw["raw_meta"] = c.file_info(obj["raw_meta"], f"{where}.raw_meta")
    kw["zip_meta"] = c.file_info(obj["zip_meta"], f"{where}.zip_meta", optional=True)
    if (comp is None) != (kw["zip_meta"] is None):
        raise c.fail(f"{where}.zip_meta", "must be set exactly when compression is set")
    kw["newline"] = c.str_(obj["newline"], f"{where}.newline")
    if fmt == "json":
        cols = obj["columns"]
        if not isinstance(cols, dict):
            raise c.fail(f"{where}.columns", "expected an object")
        kw["columns"] = dict(cols)
        names = sorted(cols)
        encs = [cols[n] for n in names]
    else:
        names = c.str_list(obj["column_names"], f"{where}.column_names")
        encs = c.str_list(obj["column_encodings"], f"{where}.column_encodings")
        if len(names) != len(encs):
            raise c.fail(where, "column_names and column_encodings differ in length")
        sep = {"csv": ",", "tsv": "\t"}.get(fmt)
        sep = sep or c.str_(obj["separator"], f"{where}.separator")
        if not sep:
            raise c.fail(f"{where}.separator", "must not be empty")
        kw["separator"] = obj["separator"] if fmt == "xsv" else None
    for i, enc in enumerate(encs):
        if enc not in SPLIT_ENCODINGS:
            raise c.fail(f"{where}.column_encodings[{i}]", f"unknown {fmt} encoding {enc!r}")
    return names, encs, [None] * len(names)


def _check_mds_bounds(c: _Checker, where: str, raw: FileInfo, samples: int) -> None:
    """u32 offsets bound the file; the header bounds the sample count, so a hostile count cannot
    make a reader allocate a huge offset table."""
    if raw.bytes >= 1 << 32:
        raise c.fail(f"{where}.raw_data.bytes", f"{raw.bytes} is not below 2**32 (u32 offsets)")
    if 8 + 4 * samples > raw.bytes:
        raise c.fail(
            f"{where}.samples",
            f"{samples} samples need a {8 + 4 * samples}-byte header, raw_data.bytes is "
            f"{raw.bytes}",
        )


def parse_index(data: bytes, source: str) -> Index:
    """Parse and validate index.json bytes; FormatError names ``source`` and the bad field."""
    c = _Checker(source)
    with _gc_paused():
        fast = parse_mds_fast(data, lambda where, obj: _parse_shard(c, obj, where))
        if fast is not None:
            return Index(fast[0], fast[1])
        return parse_index_validating(data, source)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a parse allocates: the parse makes no cycles, and in a
    process holding many objects (torch imported: ~10^6) every full collection it would trigger
    walks them all -- 100k shards parse in 0.4 s with collection paused, 1.7-2.3 s without."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def parse_index_validating(data: bytes, source: str) -> Index:
    """:func:`parse_index` without the fast path: the definition of what is accepted, and the
    source of every error message (the fast path defers to it on anything unusual)."""
    c = _Checker(source)
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as exc:
        raise IndexJSONError(f"not valid JSON ({exc})", source, exc.doc, exc.pos) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise IndexJSONError(f"not valid JSON ({exc})", source) from None
    if not isinstance(obj, dict):
        raise FormatError("index must be a JSON object", source)
    if "version" not in obj:
        raise c.fail("version", "missing")
    if obj["version"] != 2 or isinstance(obj["version"], bool):
        raise c.fail("version", f"unsupported index version {obj['version']!r}, expected 2")
    shards = obj.get("shards")
    if not isinstance(shards, list):
        raise IndexKeyError("shards: missing or not a list", c.source)
    entries = [_parse_shard(c, s, f"shards[{i}]") for i, s in enumerate(shards)]
    seen: set[str] = set()
    for i, e in enumerate(entries):
        for info in (e.raw_data, e.zip_data, e.raw_meta, e.zip_meta):
            if info is not None and info.basename in seen:
                raise c.fail(f"shards[{i}]", f"basename {info.basename!r} used twice")
            if info is not None:
                seen.add(info.basename)
    extra = {k: v for k, v in obj.items() if k not in ("shards", "version")}
    return Index(entries, extra)
