"""Reading a row-group virtual shard: what to fetch, and decoding the fetched chunks.

Theory of operation
-------------------
A row group's cache file holds the byte ranges of its projected column chunks, concatenated in
object order (:meth:`astream.core.parquet.RowGroupShard.ranges`; the fetcher copies them there
with one ranged GET per range, split into parts when large). To decode, pyarrow reads the row
group through :class:`_ChunkFile`, a read-only file object that presents the whole object's
size and serves every read from the cache file at the range's place in it; a read outside the
fetched ranges is a :class:`FormatError` (never bytes we did not fetch). The footer is never
read again: its ``FileMetaData`` comes from the index (parsed once per file per process).

For data read in place (a local table, no remote), the "cache file" is the Parquet file itself
and pyarrow reads it directly, still only the projected chunks.

Decoded values follow MDS samples: binary stays ``bytes``, strings ``str``, numbers Python
scalars, nulls ``None``, a list of numbers a NumPy array (a view into the row group's values),
deeper nesting Python lists/dicts. A row group is decoded once into per-column lists; a
:class:`RowGroupHandle` serves samples from them, and the decoded columns of recent row groups
(up to ``DECODED_BYTES`` of them, at least the last ``KEEP_DECODED``) are kept per process, so
re-opening one -- a shuffle moves between many row groups, a pinning consumer re-opens -- decodes
nothing.
"""

from __future__ import annotations

import io
import mmap
from bisect import bisect_right
from collections import OrderedDict
from typing import Any

from astream.core.parquet import ParquetFile, RowGroupShard
from astream.errors import FormatError
from astream.runtime.cache import ShardFiles
from astream.runtime.fetch import RemoteShard

__all__ = ["RowGroupHandle", "decode_row_group", "row_group_remote_shard"]

KEEP_DECODED = 2  # decoded row groups always kept per process, whatever their size
DECODED_BYTES = 512 << 20  # more are kept while their fetched bytes stay under this


def row_group_remote_shard(
    remote: str | None, local: str, entry: RowGroupShard, validate_hash: str | None,
    keep_zip: bool | None,
) -> RemoteShard:  # fmt: skip
    src = entry.source
    assert src is not None
    if remote is None:  # read in place: the object itself is the shard file, never evicted
        files = ShardFiles(root=local, raw=src.key, raw_size=src.size, evictable=False)
        ranges = None
    else:
        files = ShardFiles(root=local, raw=entry.raw_data.basename, raw_size=entry.raw_data.bytes)
        ranges = entry.ranges()
    return RemoteShard(
        files=files,
        remote=remote,
        raw_key=src.key,
        zip_key=None,
        compression=None,
        raw_hashes={},
        zip_hashes={},
        validate_hash=validate_hash,
        keep_zip=keep_zip,
        ranges=ranges,
        etag=src.etag,
    )


class _ChunkFile(io.RawIOBase):
    """The object as pyarrow sees it: ``size`` bytes, of which only ``ranges`` exist (their
    bytes concatenated in ``data``)."""

    def __init__(self, data: Any, ranges: tuple[tuple[int, int], ...], size: int, name: str):
        super().__init__()
        self._data = data
        self._starts = [s for s, _ in ranges]
        self._ranges = ranges
        self._base: list[int] = []
        at = 0
        for s, e in ranges:
            self._base.append(at)
            at += e - s
        self._size = size
        self._pos = 0
        self.name = name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self._pos, self._size)[whence]
        self._pos = base + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        start = self._pos
        end = self._size if n is None or n < 0 else min(self._size, start + n)
        if end <= start:
            return b""
        k = bisect_right(self._starts, start) - 1
        if k < 0 or end > self._ranges[k][1]:
            raise OSError(f"read of bytes {start}-{end} outside the fetched column chunks")
        off = self._base[k] + start - self._ranges[k][0]
        self._pos = end
        return bytes(self._data[off : off + end - start])

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)


_metadata: OrderedDict[tuple[str, int, str | None], Any] = OrderedDict()


def _file_metadata(src: ParquetFile) -> Any:
    key = src.identity()
    md = _metadata.get(key)
    if md is None:
        import struct

        import pyarrow as pa
        import pyarrow.parquet as pq

        buf = b"PAR1" + src.footer + struct.pack("<I", len(src.footer)) + b"PAR1"
        md = pq.read_metadata(pa.BufferReader(buf))
        _metadata[key] = md
        while len(_metadata) > 64:
            _metadata.popitem(last=False)
    else:
        _metadata.move_to_end(key)
    return md


def _valid(arr: Any) -> list[bool] | None:
    """Per row, whether it is not null (None when no row is), from the validity bitmap."""
    import numpy as np

    if not arr.null_count:
        return None
    bits = np.frombuffer(arr.buffers()[0], dtype=np.uint8)
    flags = np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + len(arr)]
    return flags.astype(bool).tolist()  # type: ignore[no-any-return]


def _numeric(t: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_integer(t) or (pa.types.is_floating(t) and not pa.types.is_float16(t)))


def _flat(arr: Any) -> Any:
    """A numeric array without nulls as a NumPy view of its data buffer (no copy; pyarrow's
    ``to_numpy`` imports pandas, ~0.3-1 s in each fresh worker)."""
    import numpy as np

    dtype = np.dtype(arr.type.to_pandas_dtype())
    data = np.frombuffer(arr.buffers()[1], dtype=dtype)
    return data[arr.offset : arr.offset + len(arr)]


def _offsets(arr: Any) -> list[int]:
    """The ``len(arr) + 1`` value offsets of a list/binary/string array, as ints."""
    import numpy as np
    import pyarrow as pa

    t = arr.type
    wide = pa.types.is_large_list(t) or pa.types.is_large_binary(t) or pa.types.is_large_string(t)
    o = np.frombuffer(arr.buffers()[1], dtype=np.int64 if wide else np.int32)
    return o[arr.offset : arr.offset + len(arr) + 1].tolist()  # type: ignore[no-any-return]


class _ListColumn:
    """A ``list<number>`` column: row ``i`` is a NumPy view of the row group's flat values."""

    __slots__ = ("_offsets", "_valid", "_values")

    def __init__(self, values: Any, offsets: list[int], valid: list[bool] | None) -> None:
        self._values, self._offsets, self._valid = values, offsets, valid

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Any:
        if self._valid is not None and not self._valid[i]:
            return None
        return self._values[self._offsets[i] : self._offsets[i + 1]]


class _BytesColumn:
    """A binary (``bytes``) or string (``str``) column, sliced from the row group's data buffer
    when a row is read (a shuffle reads each row group's rows in several processes, each only
    its own)."""

    __slots__ = ("_data", "_offsets", "_text", "_valid")

    def __init__(self, data: Any, offsets: list[int], valid: list[bool] | None, text: bool):
        self._data, self._offsets, self._valid, self._text = data, offsets, valid, text

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> Any:
        if self._valid is not None and not self._valid[i]:
            return None
        v = self._data[self._offsets[i] : self._offsets[i + 1]]
        return str(v, "utf-8") if self._text else bytes(v)


def _column_values(col: Any) -> Any:
    """One column as per-row Python/NumPy values (see the module docstring): a sequence that
    ``[i]`` indexes. Numbers, ``list<number>`` and binary/string columns are read from the
    Arrow buffers directly; other types through ``to_pylist``."""
    import pyarrow as pa

    arr = col
    if isinstance(col, pa.ChunkedArray):  # one chunk per row group: no copy then
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    t = arr.type
    if pa.types.is_dictionary(t):
        arr = arr.dictionary_decode()
        t = arr.type
    if (pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type):
        # only the rows' extent of the values: a sliced list array's child is not sliced
        vals = arr.values
        if not vals.null_count:
            return _ListColumn(_flat(vals), _offsets(arr), _valid(arr))
        flat = vals.to_numpy(zero_copy_only=False)  # null elements: NaN, as before
        return _ListColumn(flat, _offsets(arr), _valid(arr))
    if _numeric(t):
        values: list[Any] = _flat(arr).tolist()
        valid = _valid(arr)
        if valid is not None:
            values = [x if ok else None for x, ok in zip(values, valid)]
        return values
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    if text or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        buf = arr.buffers()[2]
        data = memoryview(buf) if buf is not None else memoryview(b"")
        return _BytesColumn(data, _offsets(arr), _valid(arr), text)
    return list(arr.to_pylist())


def decode_row_group(path: str, shard: RemoteShard, entry: RowGroupShard) -> dict[str, Any]:
    """Per projected column, the row group's values (``path``: the cache file, or the object
    itself when read in place)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = entry.source
    assert src is not None
    md = _file_metadata(src)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if shard.files.raw_size else b""
    try:
        if shard.ranges is None:
            source: Any = pa.BufferReader(mm)  # the object itself
        else:
            source = _ChunkFile(memoryview(mm), shard.ranges, src.size, path)
        try:
            table = pq.ParquetFile(source, metadata=md, pre_buffer=False).read_row_group(
                entry.row_group, columns=list(entry.projection), use_threads=False
            )
        except (OSError, ValueError, pa.ArrowException) as exc:
            raise FormatError(
                f"row group {entry.row_group} of {src.key} cannot be decoded ({exc})", path
            ) from None
        if table.num_rows != entry.samples:
            raise FormatError(
                f"row group {entry.row_group} has {table.num_rows} rows, index says "
                f"{entry.samples}",
                path,
            )
        return {c: _column_values(table.column(c)) for c in entry.projection}
    finally:
        del source
        if isinstance(mm, mmap.mmap):
            try:
                mm.close()
            except BufferError:
                pass  # a zero-copy value still views it; unmapped when that goes


class RowGroupHandle:
    """An open row group: ``sample(i)``/``samples(indices)`` as ``reader.OpenShard``."""

    __slots__ = ("_cols", "_names", "_pin")

    def __init__(self, cols: dict[str, Any]) -> None:
        self._cols = [cols[n] for n in cols]
        self._names = list(cols)
        self._pin: Any = None

    def sample(self, i: int) -> dict[str, Any]:
        return {n: c[i] for n, c in zip(self._names, self._cols)}

    def samples(self, indices: list[int]) -> list[dict[str, Any]]:
        names, cols = self._names, self._cols
        return [{n: c[i] for n, c in zip(names, cols)} for i in indices]

    def close(self) -> None:
        if self._pin is not None:
            self._pin.release()
            self._pin = None


_decoded: OrderedDict[tuple[str, str], tuple[dict[str, Any], int]] = OrderedDict()
_decoded_bytes = 0


def open_row_group(path: str, shard: RemoteShard, entry: RowGroupShard) -> RowGroupHandle:
    """A handle on the row group, decoding it unless it is among the recently decoded ones:
    the last ``KEEP_DECODED``, and more while their fetched bytes (about their decoded size)
    stay under ``DECODED_BYTES``. A shuffle reads samples of many row groups in turn; without
    this, each group would be decoded again for nearly every sample."""
    global _decoded_bytes
    key = (path, entry.raw_data.basename)
    hit = _decoded.get(key)
    if hit is not None:
        _decoded.move_to_end(key)
        return RowGroupHandle(hit[0])
    cols = decode_row_group(path, shard, entry)
    size = max(1, shard.files.raw_size)
    _decoded[key] = (cols, size)
    _decoded_bytes += size
    while len(_decoded) > KEEP_DECODED and _decoded_bytes > DECODED_BYTES:
        _, (_, old) = _decoded.popitem(last=False)
        _decoded_bytes -= old
    return RowGroupHandle(cols)
