"""``map_memory``: an iteration reads through memory maps at most that many bytes of shards
(shared by a loader's workers); the shards it reads past that are read by copy (``pread``),
so an order that reads every shard all epoch long (py1e at the reference's block) keeps the
limit mapped, as /proc/self/smaps shows during real iterations. The samples and batches are
the same as through the map, and an order that moves through the dataset copies nothing."""

from __future__ import annotations

import functools
import json
import mmap
import os
from typing import Any

import numpy as np
import pytest
import torch

from astream import MDSWriter, StreamingDataset
from astream.errors import ConfigError, FormatError

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps"), reason="reads the process's mappings from /proc"
)

SHARDS, PER_SHARD, SIZE = 8, 128, 1000  # uint16 tokens: ~2 KB samples, each shard ~260 KB


def _tokens(i: int) -> np.ndarray:
    rng = np.random.default_rng(100 + i)
    return rng.integers(0, 1 << 16, int(rng.integers(SIZE // 2, SIZE)), dtype=np.uint16)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str], int]:
    root = str(tmp_path_factory.mktemp("mapmem") / "ds")
    limit = 4 + PER_SHARD * (2 * SIZE + 24)  # a sample: its tokens + 20 bytes, its offset 4
    with MDSWriter(
        out=root, columns={"id": "int", "tokens": "ndarray:uint16"}, size_limit=limit
    ) as w:
        for i in range(SHARDS * PER_SHARD):
            w.write({"id": i, "tokens": _tokens(i)})
    with open(os.path.join(root, "index.json")) as f:
        counts = [sh["samples"] for sh in json.load(f)["shards"]]
    assert len(counts) >= 7, counts
    files = sorted(os.path.join(root, f) for f in os.listdir(root) if f.endswith(".mds"))
    return root, files, max(os.path.getsize(f) for f in files)


def _mapped_bytes(files: list[str]) -> int:
    """Resident bytes of this process's mappings of ``files``."""
    want = {os.path.realpath(f) for f in files}
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                ours = len(head) > 5 and head[5] in want
            elif ours and head[0] == "Rss:":
                total += int(head[1]) * 1024
    return total


def _pages(n: int) -> int:
    return -(-n // mmap.PAGESIZE) * mmap.PAGESIZE


def _py1e(root: str, mem: int | None, **kw: Any) -> StreamingDataset:
    return StreamingDataset(
        local=root, shuffle=True, shuffle_seed=3, batch_size=16, map_memory=mem, **kw
    )


def _dict_epoch(ds: StreamingDataset, files: list[str]) -> tuple[list[Any], int]:
    out, most = [], 0
    for k, s in enumerate(ds):
        out.append((int(s["id"]), np.array(s["tokens"], copy=True)))
        if k % 8 == 0:
            most = max(most, _mapped_bytes(files))
    return out, most


def _same(got: list[Any], want: list[Any]) -> None:
    assert [i for i, _ in got] == [i for i, _ in want]
    assert sorted(i for i, _ in got) == list(range(SHARDS * PER_SHARD))
    for (i, g), (_, w) in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w), i
        assert np.array_equal(g, _tokens(i)), i


def test_sample_dicts_map_at_most_the_limit(shards: tuple[str, list[str], int]) -> None:
    root, files, size = shards
    want, most = _dict_epoch(_py1e(root, None), files)
    assert most > 4 * size  # through the map, every shard stays mapped all epoch
    ds = _py1e(root, 2 * size)
    got, most = _dict_epoch(ds, files)
    assert most <= 2 * _pages(size), (most, size)  # two shards at most
    _same(got, want)
    assert ds.stats.shard_copies >= len(files) - 2, ds.stats.shard_copies
    # nothing mapped at all: every shard read by copy, the same samples
    ds = _py1e(root, 0)
    got, most = _dict_epoch(ds, files)
    assert most == 0 and ds.stats.shard_copies >= len(files)
    _same(got, want)


@pytest.mark.parametrize("ragged", ["offsets", "pad"])
def test_column_batches_map_at_most_the_limit(
    shards: tuple[str, list[str], int], ragged: str
) -> None:
    root, files, size = shards

    def epoch(mem: int | None) -> tuple[list[dict[str, Any]], int]:
        out, most = [], 0
        for b in _py1e(root, mem).batches(ragged=ragged):
            out.append({k: np.array(v, copy=True) for k, v in b.items()})
            most = max(most, _mapped_bytes(files))
        return out, most

    want, most = epoch(None)
    assert most > 4 * size
    got, most = epoch(2 * size)
    assert most <= 2 * _pages(size), (most, size)
    assert len(got) == len(want) == SHARDS * PER_SHARD // 16
    for g, w in zip(got, want):
        assert g.keys() == w.keys()
        for k in w:
            assert g[k].dtype == w[k].dtype and np.array_equal(g[k], w[k]), k


def test_an_order_that_moves_on_copies_nothing(shards: tuple[str, list[str], int]) -> None:
    """In index order each shard leaves the reader's window once read, so two shards' worth
    of ``map_memory`` maps every shard in turn: nothing is read by copy."""
    root, files, size = shards
    ds = StreamingDataset(local=root, batch_size=16, map_memory=2 * size)
    got, most = _dict_epoch(ds, files)
    assert [i for i, _ in got] == list(range(SHARDS * PER_SHARD))
    assert ds.stats.shard_copies == 0
    assert 0 < most <= 2 * _pages(size), most


def _note_mapped(files: list[str], s: dict[str, Any]) -> dict[str, Any]:
    """A transform run in the worker: the sample, with the shard bytes its process maps."""
    return {**s, "mapped": _mapped_bytes(files) if int(s["id"]) % 4 == 0 else 0}


def _listed(batch: list[Any]) -> list[Any]:
    return batch


def test_workers_share_the_limit(shards: tuple[str, list[str], int]) -> None:
    """With 2 workers each maps at most half of ``map_memory``; same batches as mapped."""
    root, files, size = shards
    note = functools.partial(_note_mapped, files)

    def epoch(mem: int | None) -> tuple[list[Any], int]:
        ds = _py1e(root, mem, transform=note)
        loader = torch.utils.data.DataLoader(ds, batch_size=16, num_workers=2, collate_fn=_listed)
        out, most = [], 0
        for b in loader:
            out.extend((int(s["id"]), s["tokens"]) for s in b)
            most = max(most, *(s["mapped"] for s in b))
        return out, most

    want, most = epoch(None)
    assert most > 4 * size  # each worker maps every shard through the map
    got, most = epoch(4 * size)
    assert most <= 2 * _pages(size), (most, size)  # each worker: two shards at most
    assert [i for i, _ in got] == [i for i, _ in want]
    assert all(np.array_equal(g, w) for (_, g), (_, w) in zip(got, want))


def test_under_a_cache_limit_a_shard_past_the_limit_is_copied(
    shards: tuple[str, list[str], int],
) -> None:
    """Under a ``cache_limit`` one shard is open at a time: it is read by copy when it alone
    is larger than ``map_memory``, through the map otherwise."""
    root, files, size = shards
    want, _ = _dict_epoch(_py1e(root, None, cache_limit="10mb"), files)
    small = min(os.path.getsize(f) for f in files)
    ds = _py1e(root, small - 1, cache_limit="10mb")
    got, most = _dict_epoch(ds, files)
    assert most == 0 and ds.stats.shard_copies >= len(files)
    _same(got, want)
    ds = _py1e(root, size, cache_limit="10mb")
    got, most = _dict_epoch(ds, files)
    assert most > 0 and ds.stats.shard_copies == 0
    _same(got, want)


def test_a_shard_cut_short_under_a_copy_read_names_the_file(
    tmp_path: Any,
) -> None:
    """A shard file cut short after it was opened (its map would fault): the copy read
    raises a FormatError naming the file, not a short sample."""
    root = str(tmp_path / "ds")
    with MDSWriter(out=root, columns={"id": "int", "tokens": "ndarray:uint16"}) as w:
        for i in range(64):
            w.write({"id": i, "tokens": _tokens(i)})
    path = os.path.join(root, "shard.00000.mds")
    ds = StreamingDataset(local=root, batch_size=4, map_memory=0)
    it = iter(ds)
    assert int(next(it)["id"]) == 0
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(FormatError, match="ended inside a sample") as e:
        for _ in it:
            pass
    assert path in str(e.value)


@pytest.mark.parametrize("bad", [-1, True, 1.5, "64mb", 2**47])
def test_map_memory_is_checked(shards: tuple[str, list[str], int], bad: object) -> None:
    root, _, _ = shards
    with pytest.raises(ConfigError, match=r"map_memory must be an int of bytes .* or None"):
        StreamingDataset(local=root, map_memory=bad)  # type: ignore[arg-type]
