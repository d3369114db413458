"""The three ways a batch copies variable-size values into its output: one ``memcpy`` per
value from the mapped shards (:func:`copy_segments`), one ``preadv`` per value from the shard
files (:func:`pread_segments`: large values), and one fancy-index copy of all of them
(:func:`copy_small`: tiny values). :func:`strategy` says which a batch takes.

Pure: stdlib + numpy (``os.preadv`` on descriptors the caller opened).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from astream.core.batch_layout import I64, U8
from astream.errors import FormatError

__all__ = ["PREAD", "SMALL", "copy_segments", "copy_small", "pread_segments", "strategy"]

SMALL = 64  # mean bytes per segment at or below which one fancy-index copy beats a loop
PREAD = 16384  # mean bytes per segment from which values are read with preadv, not the map


def strategy(total: int, n: int, one_buffer: bool, files: bool) -> str:
    """``"small"``, ``"pread"`` or ``"copy"`` for ``n`` values of ``total`` bytes in all, read
    from one mapped buffer or several, with shard files to ``preadv`` from or not."""
    if one_buffer and total <= SMALL * n:
        return "small"
    if files and total >= PREAD * n:
        return "pread"
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
