"""pyarrow's view of an indexed Parquet file: its footer as metadata, its fetched chunks as a file.

Pure: no store, no cache directory (pyarrow is imported lazily, inside functions: the
``[parquet]`` extra). A row group's cache file holds the byte ranges of its projected column
chunks, concatenated in object order (:meth:`astream.parquet.table.RowGroupShard.ranges`). To
decode, pyarrow reads the row group through :class:`ChunkFile`, a read-only file object that
presents the whole object's size and serves every read from the cache file at the range's
place in it; a read outside the fetched ranges is an ``OSError`` (never bytes we did not
fetch). The footer is never read again: :func:`file_metadata` parses the ``FileMetaData``
kept in the index, once per file per process.
"""

from __future__ import annotations

import io
from bisect import bisect_right
from collections import OrderedDict
from typing import Any

from astream.errors import ConfigError
from astream.parquet.table import ParquetFile

__all__ = ["ChunkFile", "file_metadata", "normalized_table", "pyarrow_parquet"]


def pyarrow_parquet() -> Any:
    """``pyarrow.parquet``, or a ``ConfigError`` saying how to install it."""
    try:
        import pyarrow.parquet as pq
    except ImportError:  # pragma: no cover - the extra is installed in CI
        raise ConfigError(
            'format="parquet" needs pyarrow: pip install "astream[parquet]"'
        ) from None
    return pq


class ChunkFile(io.RawIOBase):
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


def file_metadata(src: ParquetFile) -> Any:
    """The ``pyarrow.parquet.FileMetaData`` of ``src``'s footer (the last 64 kept)."""
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


def normalized_table(table: Any, names: tuple[str, ...]) -> Any:
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
