"""The segment copies of ``astream.core.batch_copy`` on real files: each value lands where it
belongs, from its shard's buffer or its file, and a file that ends inside a value is a
``FormatError``, never a short value."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from astream.core.batch_copy import mixed_segments, pread_segments, strategy
from astream.errors import FormatError


class _File:
    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[tuple[list[bytes], list[int]]]:
    """Two 5000-byte shard files: their bytes and a read descriptor of each."""
    datas = [np.random.default_rng(k).bytes(5000) for k in range(2)]
    fds = []
    for k, data in enumerate(datas):
        path = tmp_path / f"s{k}"
        path.write_bytes(data)
        fds.append(os.open(path, os.O_RDONLY))
    yield datas, fds
    for fd in fds:
        os.close(fd)


def test_mixed_reads_each_value_from_its_map_or_its_file(
    shards: tuple[list[bytes], list[int]],
) -> None:
    datas, fds = shards
    srcs, nbytes, which = [10, 4000, 0, 2500, 4999], [300, 1000, 1, 2500, 1], [0, 1, 1, 0, 1]
    dsts = [0, 300, 1300, 1301, 3801]
    want = b"".join(datas[w][s : s + k] for s, k, w in zip(srcs, nbytes, which))
    # shard 1 by copy: its buffer is garbage, so a value read through it would differ
    bufs = [memoryview(datas[0]), memoryview(b"\xff" * 5000)]
    out = bytearray(len(want))
    mixed_segments(memoryview(out), dsts, srcs, nbytes, which, bufs, [-1, fds[1]])
    assert bytes(out) == want
    out = bytearray(len(want))
    pread_segments(memoryview(out), dsts, srcs, nbytes, which, [_File(fd) for fd in fds])
    assert bytes(out) == want


def test_a_file_that_ends_inside_a_value_is_a_format_error(
    shards: tuple[list[bytes], list[int]], tmp_path: Path
) -> None:
    _, fds = shards
    os.truncate(tmp_path / "s1", 4500)
    out = memoryview(bytearray(1000))
    with pytest.raises(FormatError, match="ended inside a sample"):
        mixed_segments(out, [0], [4000], [1000], None, [memoryview(b"")], [fds[1]])
    with pytest.raises(FormatError, match="ended inside a sample"):
        pread_segments(out, [0], [4000], [1000], None, [_File(fds[1])])


def test_strategy() -> None:
    assert strategy(64 * 10, 10, True, True) == "small"
    assert strategy(64 * 10, 10, True, True, copied=True) == "mixed"
    assert strategy(100 * 10, 10, False, True, copied=True) == "mixed"
    assert strategy(100 * 10, 10, False, False, copied=True) == "copy"  # no files to read
    assert strategy(16384 * 10, 10, False, True, copied=True) == "pread"
    assert strategy(16384 * 10, 10, False, True) == "pread"
    assert strategy(16383 * 10, 10, False, True) == "copy"
