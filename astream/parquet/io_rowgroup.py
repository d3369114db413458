"""Reading a row-group virtual shard: what to fetch, decoding it, and sharing the decode.

I/O (runtime level): reads the cache file, writes the decoded file under the cache's locks.

A row group's cache file holds the byte ranges of its projected column chunks, concatenated in
object order (:meth:`astream.parquet.table.RowGroupShard.ranges`; the fetcher copies them there
with one ranged GET per range, split into parts when large: :func:`row_group_remote_shard`).
pyarrow decodes it through :class:`~astream.parquet.arrow.ChunkFile` (:func:`decode_row_group`).
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
to pyarrow's own ``to_pylist`` (``parquet/values.py``). A :class:`RowGroupHandle`
serves samples from per-column sequences built over the table's buffers, and recent row
groups (up to ``DECODED_BYTES`` of them, at least the last ``KEEP_DECODED``) are kept per
process, so re-opening one -- a shuffle moves between many row groups, a pinning consumer
re-opens -- decodes nothing. (Under a ``cache_limit`` a mapped decoded file is not kept past
its handle: no map outlives the pin.) Columnar batches read the same table
(``parquet/batches.py``).
"""

from __future__ import annotations

import mmap
import os
from collections import OrderedDict
from typing import Any

from astream.errors import FormatError
from astream.parquet.arrow import ChunkFile, file_metadata, normalized_table
from astream.parquet.table import RowGroupShard
from astream.parquet.values import column_values
from astream.runtime.cache import TMP_MARK, ShardFiles
from astream.runtime.fetch import RemoteShard
from astream.runtime.locks import FileLock

__all__ = [
    "DecodedGroup",
    "RowGroupHandle",
    "decode_row_group",
    "open_row_group",
    "row_group_remote_shard",
]

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


def decode_row_group(path: str, shard: RemoteShard, entry: RowGroupShard) -> Any:
    """The row group's projected columns, decoded by pyarrow, as a ``pyarrow.Table`` of one
    chunk per column with dictionary columns decoded (``path``: the cache file, or the object
    itself when read in place)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    src = entry.source
    assert src is not None
    md = file_metadata(src)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if shard.files.raw_size else b""
    try:
        if shard.ranges is None:
            source: Any = pa.BufferReader(mm)  # the object itself
        else:
            source = ChunkFile(memoryview(mm), shard.ranges, src.size, path)
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
        return normalized_table(table, entry.projection)
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
    return normalized_table(table, entry.projection)  # one chunk each: no copy


class DecodedGroup:
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
            self._cols = {c: column_values(t.column(c)) for c in t.column_names}
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


def _map_side(side: str, entry: RowGroupShard) -> DecodedGroup | None:
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
    return DecodedGroup(table, whole, side)


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
        fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
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


def _load(path: str, shard: RemoteShard, entry: RowGroupShard, space: Any) -> DecodedGroup:
    """The row group decoded: the node's shared decoded file mapped when there is one, else
    decoded here (once per node: under the shard's side lock, the first process to get here
    decodes and writes the file, the others wait for it and map it)."""
    files = shard.files
    side = files.side_path
    if side is None or space is None or files.raw_size < SHARE_MIN_BYTES:
        return DecodedGroup(decode_row_group(path, shard, entry))
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
        return DecodedGroup(table) if mine is None else DecodedGroup(mine, buf)
    finally:
        lk.release()


class RowGroupHandle:
    """An open row group: ``sample(i)``/``samples(indices)`` as ``shard_handles.OpenShard``;
    and what the columnar batch decoder reads (``runtime/batch.py``)."""

    __slots__ = ("_cols", "_fd", "_group", "_names", "_pin")

    def __init__(self, group: DecodedGroup) -> None:
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


_decoded: OrderedDict[tuple[str, str], tuple[DecodedGroup, int]] = OrderedDict()
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
