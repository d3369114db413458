"""Open shards as the consumer reads them: a mapped cached shard (:class:`OpenShard`), or the
few samples of an uncached one read by ranged GETs (:class:`RangeShard`). Both decode samples
and give the columnar decoder their bytes (``buffer``, ``offsets_array``, ``fileno``).

May import: core, errors, ``runtime.locks``.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from astream.core.shard import SampleDecoder
from astream.core.splitformats import SplitDecoder
from astream.errors import FormatError
from astream.runtime.locks import FileLock

__all__ = ["OpenShard", "RangeShard"]


class OpenShard:
    """One mapped shard: ``sample(i)`` decodes sample ``i``.

    The shard's offsets are validated once per process (``ShardView``) and remembered, so
    re-opening a shard -- which a pinning consumer does every batch -- costs one ``mmap``.
    """

    __slots__ = (
        "_arrays", "_drop", "_fd", "_mm", "_mv", "_off", "_path", "_pin", "by_copy", "decode",
    )  # fmt: skip

    def __init__(
        self, path: str, offsets: Sequence[int], decoder: SampleDecoder | SplitDecoder
    ) -> None:
        self._pin: FileLock | None = None
        with open(path, "rb") as f:
            self._mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if len(self._mm) != offsets[-1]:
            self._mm.close()
            raise FormatError(f"shard is {len(self._mm)} bytes, expected {offsets[-1]}", path)
        self._mv = memoryview(self._mm)
        self._off = offsets
        self._arrays: Any = None
        self._path = path
        self._fd = -1
        self._drop = False  # unmap samples' pages once decoded (see ShardOpener.drop_read)
        # read by copy (``pread``), not through the map: set by the opener while this shard
        # would take its mapped shards past ``ShardOpener.map_limit``
        self.by_copy = False
        self.decode = decoder.decode

    def buffer(self) -> Any:
        """The shard as a uint8 array, for the columnar decoder (runtime/batch)."""
        if self._arrays is None:
            self._arrays = np.frombuffer(self._mm, np.uint8)
        return self._arrays

    def fileno(self) -> int:
        """A descriptor of the shard file (opened on first use, closed with the shard): the
        columnar decoder reads large values with ``preadv`` instead of through the map."""
        if self._fd < 0:
            self._fd = os.open(self._path, os.O_RDONLY | os.O_CLOEXEC)
        return self._fd

    def drop_pages(self) -> None:
        """Unmap the pages of the shard touched so far (they stay in the page cache): the
        columnar decoder calls this after reading the headers of a shard whose values it reads
        with ``preadv``, so those pages do not count in this process's memory."""
        try:
            self._mm.madvise(mmap.MADV_DONTNEED)
        except (AttributeError, OSError, ValueError):
            pass  # no madvise on this platform: the pages simply stay mapped

    def offsets_array(self) -> Any:
        """Its sample offsets as int64 (built on each call: the columnar decoder needs them
        once per shard and process)."""
        return np.asarray(self._off, np.int64)

    def sample(self, i: int) -> dict[str, Any]:
        off = self._off
        if self.by_copy:
            return self.decode(self._read(off[i], off[i + 1]))
        return self.decode(self._mv[off[i] : off[i + 1]])

    def samples(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """``[sample(i) for i in indices]`` without a method call per sample (the hot path)."""
        dec, mv, off = self.decode, self._mv, self._off
        if self.by_copy:
            return self._copied(indices)
        out = [dec(mv[off[i] : off[i + 1]]) for i in indices]
        if self._drop:
            self.drop_pages()
        return out

    def _copied(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """:meth:`samples` by copy: one ``pread`` per sample, nothing of the shard mapped."""
        dec, off, fd, pread = self.decode, self._off, self.fileno(), os.pread
        out = []
        for i in indices:
            a, b = off[i], off[i + 1]
            data = pread(fd, b - a, a)
            if len(data) != b - a:
                data = self._read(a, b)  # short: again, to the end or a FormatError
            out.append(dec(data))
        return out

    def _read(self, a: int, b: int) -> bytes:
        """Bytes ``a:b`` of the shard file, read with ``pread`` (a short read goes on from
        where it stopped; none at all means the file shrank under us)."""
        fd, parts, at = self.fileno(), [], a
        while at < b:
            got = os.pread(fd, b - at, at)
            if not got:
                raise FormatError(f"shard file ended inside a sample ({at} of {b})", self._path)
            parts.append(got)
            at += len(got)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def close(self) -> None:
        self._arrays = None
        self._mv.release()
        try:
            self._mm.close()
        except BufferError:
            pass  # decoded arrays still view the map; it is unmapped when they go
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._pin is not None:
            self._pin.release()
            self._pin = None


class RangeShard:
    """Some samples of a shard that is not in the cache yet, read by ranged GETs (the start of
    an iteration, see ``Engine._range_batch``): the same interface as :class:`OpenShard` for
    the samples it holds. ``slot[i]`` is shard sample ``i``'s place in the compact buffer (the
    samples back to back, in shard order), which is what :meth:`buffer` and
    :meth:`offsets_array` describe: the columnar path reads it as a small shard of its own.
    Nothing of it is ever written to the cache."""

    __slots__ = ("_buf", "_fd", "_mv", "_off", "decode", "slot")

    def __init__(
        self,
        buf: bytes,
        offsets: Sequence[int],
        slot: dict[int, int],
        decoder: SampleDecoder | SplitDecoder,
    ) -> None:
        self._buf = buf
        self._mv = memoryview(buf)
        self._off = offsets  # len(slot) + 1 offsets into ``buf``, from 0
        self.slot = slot
        self._fd = -1
        self.decode = decoder.decode

    def sample(self, i: int) -> dict[str, Any]:
        j = self.slot[i]
        return self.decode(self._mv[self._off[j] : self._off[j + 1]])

    def samples(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        dec, mv, off, slot = self.decode, self._mv, self._off, self.slot
        return [dec(mv[off[slot[i]] : off[slot[i] + 1]]) for i in indices]

    def buffer(self) -> Any:
        return np.frombuffer(self._buf, np.uint8)

    def offsets_array(self) -> Any:
        return np.asarray(self._off, np.int64)

    def drop_pages(self) -> None:
        pass  # private memory: nothing mapped from the cache

    def fileno(self) -> int:
        """An anonymous in-memory file holding the buffer, for the columnar decoder's
        ``preadv`` of large values (closed by :meth:`close`)."""
        if self._fd < 0:
            try:
                fd = os.memfd_create("astream-range", os.MFD_CLOEXEC)
            except (AttributeError, OSError):  # no memfd here: an unlinked temporary file
                import tempfile

                with tempfile.TemporaryFile() as f:
                    fd = os.dup(f.fileno())
            try:
                mv = self._mv
                done = 0
                while done < len(mv):
                    done += os.pwrite(fd, mv[done:], done)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
