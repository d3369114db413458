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

Decoded once per node: the first process that opens a cached row group decodes it (one chunk
per projected column, dictionaries decoded) and writes the table as an uncompressed Arrow IPC
file beside the cache file (``<cache file>.arrow``, ``ShardFiles.side``), holding the shard's
``side`` lock meanwhile; every other process -- the node's other DataLoader workers and ranks,
later epochs and jobs -- maps that file and reads the table zero-copy out of the map. The file
is reserved at full size under the cache lock in free room only (``CacheSpace.take_free``: it
never evicts or waits; no room means a private decode), written as a temporary file and renamed
under the cache lock, so usage never exceeds ``cache_limit`` and a crash leaves only a temporary
file; eviction deletes it with its row group (``cache.unlink_shard``). A file that does not read
back as the row group's projected columns is never trusted: it is decoded and written again.
Tables read in place (no remote) and row groups under ``SHARE_MIN_BYTES`` are decoded per
process, writing nothing.

Decoded values follow MDS samples: binary stays ``bytes``, strings ``str``, numbers Python
scalars, nulls ``None``, a list of numbers a NumPy array (a view into the row group's values;
a list holding a null element, a Python list), deeper nesting Python lists/dicts, each equal
to pyarrow's own ``to_pylist`` (``runtime/parquet_values.py``). A :class:`RowGroupHandle`
serves samples from per-column sequences built over the table's buffers, and recent row
groups (up to ``DECODED_BYTES`` of them, at least the last ``KEEP_DECODED``) are kept per
process, so re-opening one -- a shuffle moves between many row groups, a pinning consumer
re-opens -- decodes nothing. (Under a ``cache_limit`` a mapped decoded file is not kept past
its handle: no map outlives the pin.)

Columnar batches (``runtime/batch.py``) read the same table: every buffer of it lies in one IPC
image (the mapped file, or a private buffer serialised once), so :func:`row_group_table` gives
each value's start and length in that image, exactly what the MDS batch decoder gathers from.
"""

from __future__ import annotations

import io
import mmap
import os
from bisect import bisect_right
from collections import OrderedDict
from typing import Any

from astream.core.parquet import ParquetFile, RowGroupShard
from astream.errors import FormatError
from astream.runtime.cache import TMP_MARK, ShardFiles
from astream.runtime.fetch import RemoteShard
from astream.runtime.locks import FileLock
from astream.runtime.parquet_values import column_values as _column_values
from astream.runtime.parquet_values import flat_values, list_offsets, validity

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
        raw = entry.raw_data.basename
        files = ShardFiles(
            root=local, raw=raw, raw_size=entry.raw_data.bytes, side=raw + SIDE_SUFFIX
        )
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


_metadata: OrderedDict[tuple[Any, ...], Any] = OrderedDict()


def _file_metadata(src: ParquetFile) -> Any:
    # keyed by the footer too: two tables' files of one name and size on a store without
    # ETags (local, some HTTP servers) have the same identity
    key = (src.identity(), src.footer)
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


def _normalized(table: Any, names: tuple[str, ...]) -> Any:
    """``table``'s columns ``names``, one chunk each, dictionary columns decoded: what the
    shared decoded file holds and what samples and batches are read from."""
    import pyarrow as pa

    arrays = []
    for name in names:
        col = table.column(name)
        arr = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_decode()
        arrays.append(arr)
    return pa.Table.from_arrays(arrays, names=list(names))


def decode_row_group(path: str, shard: RemoteShard, entry: RowGroupShard) -> Any:
    """The row group's projected columns, decoded by pyarrow, as a ``pyarrow.Table`` of one
    chunk per column with dictionary columns decoded (``path``: the cache file, or the object
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
        return _normalized(table, entry.projection)
    finally:
        del source
        if isinstance(mm, mmap.mmap):
            try:
                mm.close()
            except BufferError:
                pass  # a zero-copy value still views it; unmapped when that goes


# -- the decoded file shared by a node's processes ----------------------------------------------

SIDE_SUFFIX = ".arrow"  # the decoded file: the row group's cache file name + this
# row groups whose fetched chunks are smaller are decoded by each process (microseconds): a
# decoded file would cost more disk (its IPC framing) and a lock than it saves
SHARE_MIN_BYTES = 64 << 10


def _ipc_bytes(table: Any) -> Any:
    """``table`` as an uncompressed Arrow IPC file, in memory (a ``pyarrow.Buffer``)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue()


def _read_ipc(buf: Any, entry: RowGroupShard) -> Any:
    """The table of an IPC file held in ``buf`` (zero copy: its buffers are slices of
    ``buf``), or None when it is not the row group's projected columns."""
    import pyarrow as pa

    try:
        table = pa.ipc.open_file(buf).read_all()
    except (OSError, ValueError, pa.ArrowException):
        return None
    if table.num_rows != entry.samples or tuple(table.column_names) != entry.projection:
        return None
    if any(table.column(c).num_chunks != 1 for c in entry.projection):
        return None
    return _normalized(table, entry.projection)  # one chunk each: no copy


class _Group:
    """A decoded row group: its table, and the IPC image that the table views when there is
    one (``ipc``: the mapped decoded file ``file``, or a private buffer)."""

    __slots__ = ("_cols", "file", "ipc", "table")

    def __init__(self, table: Any, ipc: Any = None, file: str | None = None) -> None:
        self.table, self.ipc, self.file = table, ipc, file
        self._cols: dict[str, Any] | None = None

    def cols(self) -> dict[str, Any]:
        """Per column, the per-row values that samples are made of."""
        if self._cols is None:
            t = self.table
            self._cols = {c: _column_values(t.column(c)) for c in t.column_names}
        return self._cols

    def columnar(self, entry: RowGroupShard) -> tuple[Any, Any]:
        """``(ipc, table)`` with every buffer of the table inside ``ipc``: what the columnar
        batch decoder gathers from (a private decode is serialised once, in memory)."""
        if self.ipc is None:
            buf = _ipc_bytes(self.table)
            table = _read_ipc(buf, entry)
            assert table is not None
            self.ipc, self.table = buf, table
        return self.ipc, self.table


def _map_side(side: str, entry: RowGroupShard) -> _Group | None:
    """The decoded file ``side`` mapped (None: absent, or not a complete decoded file)."""
    import pyarrow as pa

    try:
        mm = pa.memory_map(side, "r")
    except (FileNotFoundError, OSError):
        return None
    try:
        whole = mm.read_buffer(mm.size())  # zero copy: the mapped file
    except (OSError, pa.ArrowException):
        return None
    table = _read_ipc(whole, entry)
    if table is None:
        return None
    return _Group(table, whole, side)


def _write_side(table: Any, files: ShardFiles, space: Any) -> Any:
    """Write ``table`` as the decoded file beside the row group's cache file (temporary file
    reserved at full size under the cache lock, renamed into place under it: a crash leaves
    only a temporary file, which no reader trusts and any reservation may delete). Returns
    the IPC image (a private buffer); the file is skipped when the cache has no free room."""
    import uuid

    buf = _ipc_bytes(table)
    side = files.side_path
    assert side is not None
    tmp = f"{side}{TMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def make() -> None:
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        try:
            os.ftruncate(fd, buf.size)
        finally:
            os.close(fd)

    try:
        if not space.take_free(buf.size, make):
            return buf  # no free room: this process keeps its own decode
        with open(tmp, "r+b") as f:
            f.write(memoryview(buf))  # type: ignore[arg-type]
        space.commit_now(lambda: os.replace(tmp, side))
    except OSError:
        pass  # an optional file: a full or unwritable disk leaves the private decode
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    return buf


def _load(path: str, shard: RemoteShard, entry: RowGroupShard, space: Any) -> _Group:
    """The row group decoded: the node's shared decoded file mapped when there is one, else
    decoded here (once per node: under the shard's side lock, the first process to get here
    decodes and writes the file, the others wait for it and map it)."""
    files = shard.files
    side = files.side_path
    if side is None or space is None or files.raw_size < SHARE_MIN_BYTES:
        return _Group(decode_row_group(path, shard, entry))
    got = _map_side(side, entry)
    if got is not None:
        return got
    lk = FileLock(files.side_lock)
    lk.exclusive()
    try:
        got = _map_side(side, entry)  # written while we waited
        if got is not None:
            return got
        try:
            os.unlink(side)  # not a complete decoded file (should never be): replace it
        except FileNotFoundError:
            pass
        table = decode_row_group(path, shard, entry)
        buf = _write_side(table, files, space)
        got = _map_side(side, entry)
        if got is not None:
            return got
        mine = _read_ipc(buf, entry)
        return _Group(table) if mine is None else _Group(mine, buf)
    finally:
        lk.release()


class RowGroupHandle:
    """An open row group: ``sample(i)``/``samples(indices)`` as ``reader.OpenShard``; and what
    the columnar batch decoder reads (``runtime/batch.py``)."""

    __slots__ = ("_cols", "_fd", "_group", "_names", "_pin")

    def __init__(self, group: _Group) -> None:
        self._group = group
        self._cols: list[Any] | None = None
        self._names: list[str] = []
        self._pin: Any = None
        self._fd = -1

    def _columns(self) -> list[Any]:
        cols = self._group.cols()
        self._names = list(cols)
        self._cols = [cols[n] for n in self._names]
        return self._cols

    def sample(self, i: int) -> dict[str, Any]:
        cols = self._cols if self._cols is not None else self._columns()
        return {n: c[i] for n, c in zip(self._names, cols)}

    def samples(self, indices: list[int]) -> list[dict[str, Any]]:
        cols = self._cols if self._cols is not None else self._columns()
        names = self._names
        return [{n: c[i] for n, c in zip(names, cols)} for i in indices]

    # -- for the columnar batch decoder -------------------------------------------------------
    def columnar(self, entry: RowGroupShard) -> tuple[Any, Any]:
        return self._group.columnar(entry)

    def has_file(self) -> bool:
        return self._group.file is not None

    def fileno(self) -> int:
        """A descriptor of the mapped decoded file (values are read with ``preadv``)."""
        if self._fd < 0:
            assert self._group.file is not None
            self._fd = os.open(self._group.file, os.O_RDONLY | os.O_CLOEXEC)
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._pin is not None:
            self._pin.release()
            self._pin = None


_decoded: OrderedDict[tuple[str, str], tuple[_Group, int]] = OrderedDict()
_decoded_bytes = 0


def open_row_group(
    path: str, shard: RemoteShard, entry: RowGroupShard, space: Any = None, pinned: bool = False
) -> RowGroupHandle:
    """A handle on the row group, decoding it unless it is among the recently decoded ones:
    the last ``KEEP_DECODED``, and more while their fetched bytes (about their decoded size)
    stay under ``DECODED_BYTES``. A shuffle reads samples of many row groups in turn; without
    this, each group would be decoded again for nearly every sample.

    ``space``: the cache, to share the decode through a decoded file (None: decode here).
    ``pinned``: the reader pins what it reads (a ``cache_limit``): a mapped decoded file is then
    not kept past this handle, so that no map outlives the pin and holds an evicted file's
    disk blocks."""
    global _decoded_bytes
    key = (path, entry.raw_data.basename)
    hit = _decoded.get(key)
    if hit is not None:
        _decoded.move_to_end(key)
        return RowGroupHandle(hit[0])
    group = _load(path, shard, entry, space)
    if pinned and group.file is not None:
        return RowGroupHandle(group)
    size = max(1, shard.files.raw_size)
    _decoded[key] = (group, size)
    _decoded_bytes += size
    while len(_decoded) > KEEP_DECODED and _decoded_bytes > DECODED_BYTES:
        _, (_, old) = _decoded.popitem(last=False)
        _decoded_bytes -= old
    return RowGroupHandle(group)


# -- columnar batches (runtime/batch.py) -----------------------------------------------------

_SCALAR_NAMES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")


def _batch_encoding(t: Any) -> str | None:
    """The MDS encoding a column of Arrow type ``t`` batches as (None: it has no column form):
    numbers as themselves, ``bool`` as ``bool``, binary as ``bytes``, strings as ``str``,
    ``list<number>`` as a dynamic 1-D ``ndarray`` of the element type."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return str(np_dtype(t))
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "str"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        v = t.value_type
        if pa.types.is_integer(v) or pa.types.is_floating(v):
            return f"ndarray:{np_dtype(v)}"
    return None


def np_dtype(t: Any) -> Any:
    import numpy as np

    return np.dtype(t.to_pandas_dtype())


def batch_specs(entry: RowGroupShard, source: str) -> list[Any]:
    """The columnar decoder's column specs for a row group's projection (from the footer's
    Arrow schema); a column without a column form is a ``ConfigError`` naming it."""
    import numpy as np

    from astream.core.batchdecode import ColumnSpec
    from astream.errors import ConfigError

    assert entry.source is not None
    schema = _file_metadata(entry.source).schema.to_arrow_schema()
    specs: list[Any] = []
    nvar = 0
    for name in entry.projection:
        t = schema.field(name).type
        enc = _batch_encoding(t)
        if enc is None:
            raise ConfigError(
                f"batch output: column {name!r} of {source} is Arrow {t}, which has no column "
                "form (numbers, bool, binary, strings and lists of numbers do; project it out "
                "with columns=[...], or iterate samples)"
            )
        if enc == "bool":
            c = ColumnSpec(name, "uint8", 1, -1)
            c.dtype = np.dtype(np.bool_)
        elif enc in ("bytes", "str") or enc.startswith("ndarray:"):
            c = ColumnSpec(name, enc, None, nvar)
            nvar += 1
        else:
            c = ColumnSpec(name, enc, int(np.dtype(enc).itemsize), -1)
        specs.append(c)
    return specs


def _addr(buf: Any, base: int, size: int) -> int:
    """Offset of Arrow buffer ``buf`` in the IPC image at address ``base`` of ``size`` bytes."""
    if not buf.size:
        return 0  # no value has a byte: nothing is read from it
    at = int(buf.address) - base
    if at < 0 or at + int(buf.size) > size:
        raise FormatError("a decoded column lies outside its row group's decoded image")
    return at


def _validity(arr: Any) -> Any:
    """Per row, True where the value is null (None when no row is)."""
    import numpy as np

    if not arr.null_count:
        return None
    valid = validity(arr)
    assert valid is not None
    return ~np.asarray(valid, bool)


def _null_elements(child: Any, offs: Any) -> Any:
    """Per list row (``offs``: its ``n + 1`` offsets into ``child``), its null elements."""
    import numpy as np

    nulls = _validity(child)
    if nulls is None:
        return np.zeros(len(offs) - 1, np.int64)
    cum = np.concatenate([np.zeros(1, np.int64), np.cumsum(nulls, dtype=np.int64)])
    return cum[offs[1:]] - cum[offs[:-1]]


def row_group_table(handle: RowGroupHandle, entry: RowGroupShard, layout: Any) -> Any:
    """The :class:`~astream.core.batchdecode.ShardTable` of an open row group: where every
    value of every row lies in its decoded IPC image (``RowGroupHandle.columnar``). A row with
    a null in any column (or inside a list) is flagged; :func:`null_error` says which."""
    import numpy as np

    from astream.core.batchdecode import ShardTable

    ipc, table = handle.columnar(entry)
    base, size = int(ipc.address), int(ipc.size)
    n = table.num_rows
    small: list[Any] = []
    start = np.zeros((n, layout.nstart), np.int64)
    lens = np.zeros((n, layout.nvar), np.int64)
    bad = np.zeros(n, bool)
    for k, c in enumerate(layout.specs):
        arr = table.column(c.name).chunk(0)
        nulls = _validity(arr)
        if nulls is not None:
            bad |= nulls
        t = arr.type
        if c.kind == "fixed":
            if c.dtype == np.bool_:
                bits = np.frombuffer(arr.buffers()[1], np.uint8)
                vals = np.unpackbits(bits, bitorder="little")[arr.offset : arr.offset + n]
            else:
                if np_dtype(t) != c.dtype:
                    raise FormatError(f"column {c.name!r} is {t}, expected {c.dtype}")
                vals = flat_values(arr)
            small.append(np.ascontiguousarray(vals).view(np.uint8).reshape(n, int(c.size or 0)))
            continue
        offs = np.asarray(list_offsets(arr), np.int64)
        if c.kind == "array":
            child = arr.values
            item = c.dtype.itemsize
            if np_dtype(child.type) != c.dtype:
                raise FormatError(f"column {c.name!r} is {t}, expected {c.dtype} elements")
            if child.null_count:  # a null element flags its row
                bad |= _null_elements(child, offs) > 0
            data = child.buffers()[1]
            at = _addr(data, base, size) + child.offset * item if data is not None else 0
            start[:, layout.start[k]] = at + offs[:-1] * item
            lens[:, c.var_index] = (offs[1:] - offs[:-1]) * item
        else:
            data = arr.buffers()[2]
            at = _addr(data, base, size) if data is not None else 0
            start[:, layout.start[k]] = at + offs[:-1]
            lens[:, c.var_index] = offs[1:] - offs[:-1]
    start[bad] = 0
    lens[bad] = 0
    return ShardTable(n, small, start, lens, np.zeros((n, 0), np.uint8), bad)


def null_error(handle: RowGroupHandle, entry: RowGroupShard, rows: list[int], source: str) -> Any:
    """The error for a batch holding row(s) ``rows`` of this row group flagged by
    :func:`row_group_table`: a ``ConfigError`` naming the first null column met."""
    import numpy as np
    import pyarrow as pa

    from astream.errors import ConfigError

    _, table = handle.columnar(entry)
    for name in table.column_names:
        arr = table.column(name).chunk(0)
        nulls = _validity(arr)
        hit = [] if nulls is None else [r for r in rows if nulls[r]]
        what = "null"
        listy = pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)
        if not hit and listy and arr.values.null_count:
            inner = _null_elements(arr.values, np.asarray(list_offsets(arr), np.int64))
            hit = [r for r in rows if inner[r]]
            what = "a list holding a null"
        if hit:
            return ConfigError(
                f"batch output has no form for nulls: column {name!r} is {what} in row "
                f"{hit[0]} of row group {entry.row_group} of {source} (fill the nulls, "
                "project the column out with "
                "columns=[...], or iterate samples)"
            )
    return AssertionError("a flagged row has no null")  # pragma: no cover
