"""The ways a batch copies variable-size values into its output: one ``memcpy`` per value from
the mapped shards (:func:`copy_segments`), one ``preadv`` per value from the shard files
(:func:`pread_segments`: large values), one fancy-index copy of all of them
(:func:`copy_small`: tiny values), and each value from its shard's map or file
(:func:`mixed_segments`: some shards are read by copy). :func:`strategy` says which a batch
takes.

Pure: stdlib + numpy (``os.preadv`` on descriptors the caller opened).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from astream.core.batch_layout import I64, U8
from astream.errors import FormatError

__all__ = [
    "PREAD", "SMALL", "copy_segments", "copy_small", "mixed_segments", "pread_segments",
    "strategy",
]  # fmt: skip

SMALL = 64  # mean bytes per segment at or below which one fancy-index copy beats a loop
PREAD = 16384  # mean bytes per segment from which values are read with preadv, not the map


def strategy(total: int, n: int, one_buffer: bool, files: bool, copied: bool = False) -> str:
    """``"small"``, ``"pread"``, ``"mixed"`` or ``"copy"`` for ``n`` values of ``total`` bytes
    in all, read from one mapped buffer or several, with shard files to ``preadv`` from or not;
    ``copied``: some of those shards must not be read through their map."""
    if files and total >= PREAD * n:
        return "pread"
    if copied and files:
        return "mixed"
    if one_buffer and total <= SMALL * n:
        return "small"
    return "copy"


def copy_segments(
    dst: memoryview,
    dsts: list[int],
    srcs: list[int],
    nbytes: list[int],
    which: list[int] | None,
    bufs: Sequence[memoryview],
) -> None:
    """``dst[d:d+k] = bufs[w][s:s+k]`` for each segment (``which`` None: all from ``bufs[0]``)."""
    if which is None:
        b = bufs[0]
        for d, s, k in zip(dsts, srcs, nbytes):
            dst[d : d + k] = b[s : s + k]
    else:
        for d, s, k, w in zip(dsts, srcs, nbytes, which):
            dst[d : d + k] = bufs[w][s : s + k]


def mixed_segments(
    dst: memoryview,
    dsts: list[int],
    srcs: list[int],
    nbytes: list[int],
    which: list[int] | None,
    bufs: Sequence[memoryview],
    fds: Sequence[int],
) -> None:
    """:func:`copy_segments` where some buffers are read by copy: a segment of buffer ``w`` is
    read with one ``preadv`` from descriptor ``fds[w]`` when that is not negative, so none of
    that shard's pages is mapped, and copied from ``bufs[w]`` otherwise."""
    preadv = os.preadv
    for d, s, k, w in zip(dsts, srcs, nbytes, [0] * len(dsts) if which is None else which):
        fd = fds[w]
        if fd < 0:
            dst[d : d + k] = bufs[w][s : s + k]
            continue
        got = preadv(fd, [dst[d : d + k]], s)
        if got < k:  # short read: the rest, or a FormatError if the file shrank
            _pread_run(dst, [fd], [d + got], [s + got], [k - got])


def pread_segments(
    dst: memoryview,
    dsts: list[int],
    srcs: list[int],
    nbytes: list[int],
    which: list[int] | None,
    files: Sequence[Any],
) -> None:
    """The same as :func:`copy_segments`, read from the files (``files[w].fileno()``) with one
    ``preadv`` per segment: the page cache is copied straight into ``dst``, and the shard's
    pages are never mapped into this process (no page faults, no file pages in its PSS)."""
    fds = [f.fileno() for f in files]
    fdl = [fds[0]] * len(dsts) if which is None else [fds[w] for w in which]
    _pread_run(dst, fdl, dsts, srcs, nbytes)


def _pread_run(
    dst: memoryview, fds: list[int], dsts: list[int], srcs: list[int], nbytes: list[int]
) -> None:
    preadv = os.preadv
    for fd, d, s, k in zip(fds, dsts, srcs, nbytes):
        got = preadv(fd, [dst[d : d + k]], s)
        while got < k:  # short read: go on from where it stopped; 0 means the file shrank
            more = preadv(fd, [dst[d + got : d + k]], s + got)
            if more <= 0:
                raise FormatError(f"shard file ended inside a sample ({s + got} of {s + k})")
            got += more


def copy_small(dst: U8, dsts: I64, src: U8, srcs: I64, nbytes: I64) -> None:
    """The same from one buffer as a single fancy-index copy (tiny segments)."""
    total = int(nbytes.sum())
    if total == 0:
        return
    before = np.cumsum(nbytes) - nbytes
    step = np.arange(total, dtype=np.int64)
    dst[np.repeat(dsts - before, nbytes) + step] = src[np.repeat(srcs - before, nbytes) + step]
