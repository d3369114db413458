"""Shard maps per epoch when each batch spans more shards than the reader's base LRU size: the
LRU grows to the working set, so an epoch maps each shard O(1) times, not once per batch."""

from __future__ import annotations

import gc
import json
import os
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataset
from astream.runtime.batch_groups import BatchGroups, batch_groups

from .conftest import write_dataset


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, int]:
    p = str(tmp_path_factory.mktemp("reopen") / "ds")
    write_dataset(p, 1600, size_limit=4000)
    with open(os.path.join(p, "index.json")) as f:
        n = len(json.load(f)["shards"])
    return p, n


@pytest.mark.parametrize("kind", ["dicts", "batches"])
def test_each_shard_mapped_o1_times_per_epoch(many_shards: tuple[str, int], kind: str) -> None:
    path, nshards = many_shards
    assert nshards >= 24  # more than the base LRU size of 16
    ds = StreamingDataset(local=path, batch_size=64, shuffle=True, shuffle_algo="naive")
    seen: list[int] = []
    for _ in range(2):
        if kind == "dicts":
            labels = [s["label"] for s in ds]
        else:
            labels = [int(x) for b in ds.batches() for x in b["label"]]
        assert sorted(labels) == list(range(1600))  # a sample's label is its global id
        seen.append(ds.stats.shard_maps)
    ids = np.asarray(labels, np.int64).reshape(-1, 64)
    spans = [len(batch_groups(b, ds.engine.catalog)) for b in ids]
    assert min(spans) > 16  # every batch spans more shards than the base LRU size
    per_epoch = [seen[0], seen[1] - seen[0]]
    # every shard once, plus a few reopens while the LRU learns the working set (the old fixed
    # LRU of 16 mapped 568 times per epoch here)
    assert all(nshards <= m <= 2 * nshards for m in per_epoch), (per_epoch, nshards)


def test_batch_groups_vectorised_matches_a_plain_loop() -> None:
    class Cat:
        def locate(self, ids: Any) -> tuple[Any, Any]:
            return ids // 10, ids % 10

    rng = np.random.default_rng(0)
    for _ in range(300):
        ids = rng.integers(0, int(rng.integers(1, 400)), int(rng.integers(0, 60)))
        got = batch_groups(ids.astype(np.int64), Cat())  # type: ignore[arg-type]
        want: dict[int, tuple[list[int], list[int]]] = {}
        for j, i in enumerate(ids.tolist()):
            g = want.setdefault(i // 10, ([], []))
            g[0].append(j)
            g[1].append(i % 10)
        assert isinstance(got, BatchGroups)
        plain = [(s, list(p), list(q)) for s, p, q in got]  # tuples and ranges, as lists
        assert plain == [(s, p, q) for s, (p, q) in want.items()]
        if got.which is not None:
            assert got.local is not None
            assert [got[w][0] for w in got.which.tolist()] == (ids // 10).tolist()
            assert got.local.tolist() == (ids % 10).tolist()


def _shards_with_pages(path: str) -> int:
    """Mapped files of ``path`` with pages in this process's memory (Rss > 0)."""
    n, cur = 0, None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and len(head) >= 6:
                cur = head[5]
            elif head and head[0] == "Rss:" and cur and cur.startswith(path) and int(head[1]):
                n += 1
    return n


def test_only_the_base_lru_keeps_pages_mapped(many_shards: tuple[str, int]) -> None:
    path, nshards = many_shards
    # the datasets of the tests before this one (same files, same process) must be gone, so
    # that only this dataset's maps are counted: collect them, and check none is left
    gc.collect()
    assert _shards_with_pages(os.path.realpath(path)) == 0
    ds = StreamingDataset(local=path, batch_size=64, shuffle=True, shuffle_algo="naive")
    it = iter(ds)
    for _ in range(1500):
        next(it)
    # every shard is still mapped (no reopen churn), but only the 16 most recently read keep
    # the pages they touched in this process's memory, plus shards opened since and not read
    # yet (timing-dependent: 16-17 alone, up to 22 seen in a full-suite run); without the
    # unmapping every shard of the dataset keeps its pages (32)
    assert nshards == 32
    assert _shards_with_pages(os.path.realpath(path)) <= 24
    assert ds.stats.shard_maps <= 2 * nshards
    list(it)
