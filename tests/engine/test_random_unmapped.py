"""Random access to a cached shard this process has not opened reads the sample with ``pread``
(``ShardOpener.read_unmapped``), never mapping the shard; anything that does not add up falls
back to opening it, whose full checks raise the same errors as before."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataset
from astream.errors import FormatError
from tests.engine.conftest import write_dataset


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["label"] == want["label"] and got["text"] == want["text"]
    assert np.array_equal(got["ids"], want["ids"]) and got["ids"].dtype == np.uint16


@pytest.fixture()
def data(tmp_path: Path, local_dataset: tuple[str, list[dict[str, Any]]]) -> tuple[str, Any]:
    """A private copy of the session's local dataset (the tests damage it)."""
    path, samples = local_dataset
    copy = str(tmp_path / "ds")
    shutil.copytree(path, copy)
    return copy, samples


def _shard_file(path: str, s: int) -> str:
    index = json.loads(Path(path, "index.json").read_text())
    return os.path.join(path, index["shards"][s]["raw_data"]["basename"])


def test_random_reads_of_unopened_shards_map_nothing_and_return_the_samples(data) -> None:
    path, samples = data
    ds = StreamingDataset(local=path, batch_size=1)
    order = np.random.default_rng(3).permutation(len(samples))[:300].tolist()
    for i in order:
        _same(ds[i], samples[i])
    assert ds.stats.shard_maps == 0
    assert ds.stats.samples == 300


def test_under_a_cache_limit_random_access_opens_the_shard(data) -> None:
    # a read under a limit pins its shard, which needs it opened
    path, samples = data
    ds = StreamingDataset(local=path, batch_size=1, cache_limit="10mb")
    _same(ds[7], samples[7])
    assert ds.stats.shard_maps == 1


def test_hash_validated_random_access_opens_and_hashes_the_shard(tmp_path: Path) -> None:
    path = str(tmp_path / "h")
    samples = write_dataset(path, 40, hashes=["sha1"])
    ds = StreamingDataset(local=path, batch_size=1, validate_hash="sha1")
    _same(ds[5], samples[5])
    assert ds.stats.shard_maps == 1


def test_offsets_out_of_order_raise_the_open_checks_error(data) -> None:
    path, samples = data
    f = _shard_file(path, 0)
    with open(f, "r+b") as fh:
        (n,) = struct.unpack("<I", fh.read(4))
        offs = list(struct.unpack(f"<{n + 1}I", fh.read(4 * (n + 1))))
        offs[3], offs[4] = offs[4], offs[3]  # sample 3 now ends before it starts
        fh.seek(4)
        fh.write(struct.pack(f"<{n + 1}I", *offs))
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FormatError, match="sample offsets out of order at sample 3: "):
        ds[3]
    # sample 2's offsets are in order, but span sample 3's bytes too: its decode fails, and
    # the error is the open's
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FormatError, match="sample offsets out of order at sample 3: "):
        ds[2]
    _same(ds[n + 1], samples[n + 1])  # another shard reads on


def test_an_offset_past_the_end_of_the_file_raises_the_open_checks_error(data) -> None:
    path, _ = data
    f = _shard_file(path, 0)
    size = os.path.getsize(f)
    with open(f, "r+b") as fh:
        (n,) = struct.unpack("<I", fh.read(4))
        fh.seek(4 + 4 * n)
        fh.write(struct.pack("<I", size + 100))  # the last offset
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FormatError, match=f"last sample offset {size + 100} does not match"):
        ds[n - 1]


def test_a_shard_whose_config_differs_from_the_index_is_refused(data) -> None:
    path, _ = data
    f = _shard_file(path, 1)
    raw = bytearray(Path(f).read_bytes())
    at = raw.index(b'"label"')
    raw[at : at + 7] = b'"lab3l"'  # same length: only the config's column name changes
    Path(f).write_bytes(bytes(raw))
    ds = StreamingDataset(local=path, batch_size=1)
    ds[0]  # shard 0 first: its config (same layout, other bytes) is known good in this process
    assert ds.stats.shard_maps == 0
    first = ds.engine.catalog.starts[1]
    with pytest.raises(FormatError, match=r"shard config column_names .* differs from the index"):
        ds[int(first)]


def test_a_shard_whose_header_counts_other_samples_is_refused(data) -> None:
    """The header's sample count is not the index's (size and offsets untouched, so the
    sample's own bytes would still read right): refused with the open's error."""
    path, _ = data
    f = _shard_file(path, 0)
    raw = bytearray(Path(f).read_bytes())
    (n,) = struct.unpack_from("<I", raw, 0)
    struct.pack_into("<I", raw, 0, n - 1)
    Path(f).write_bytes(bytes(raw))
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FormatError, match=rf"shard header says {n - 1} samples, index says {n}"):
        ds[0]


def test_a_truncated_shard_is_refused(data) -> None:
    path, _ = data
    f = _shard_file(path, 0)
    size = os.path.getsize(f)
    with open(f, "r+b") as fh:
        fh.truncate(size - 10)
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FormatError, match=r"shard is .* bytes, index says"):
        ds[0]


def test_offsets_into_the_header_are_refused_even_when_their_length_decodes(
    tmp_path: Path,
) -> None:
    # a fixed-size column decodes any 8 bytes: only the offsets' bounds tell a sample from
    # the header's bytes
    from astream import MDSWriter

    path = str(tmp_path / "fixed")
    with MDSWriter(out=path, columns={"x": "int"}) as w:
        for i in range(10):
            w.write({"x": 1000 + i})
    f = _shard_file(path, 0)
    with open(f, "r+b") as fh:
        fh.seek(4 + 4 * 3)
        fh.write(struct.pack("<II", 4, 12))  # sample 3: the bytes of offsets 0 and 1
    ds = StreamingDataset(local=path, batch_size=1)
    with pytest.raises(FormatError, match="sample offsets out of order at sample 2: "):
        ds[3]


def test_a_shard_truncated_after_its_first_read_is_refused(data) -> None:
    # the once-per-shard checks passed; the file is cut afterwards (a disk full, a careless
    # copy): a read past the new end gets the open's error, never a short sample
    path, samples = data
    f = _shard_file(path, 0)
    ds = StreamingDataset(local=path, batch_size=1)
    _same(ds[0], samples[0])
    n = struct.unpack("<I", Path(f).read_bytes()[:4])[0]
    with open(f, "r+b") as fh:
        fh.truncate(os.path.getsize(f) - 10)
    with pytest.raises(FormatError, match=r"shard is .* bytes, index says"):
        ds[n - 1]
