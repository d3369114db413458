"""The order's batching fidelity through the real dataset and torch DataLoader workers:
per_stream / device_per_stream, padding and len() per rank, partition_algo, index order."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from astream import Stream, StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError
from tests.engine.conftest import write_dataset


@pytest.fixture(scope="module")
def two_streams(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    a = str(tmp_path_factory.mktemp("bat") / "a")
    b = str(tmp_path_factory.mktemp("bat") / "b")
    write_dataset(a, 300, seed=5, size_limit=4000)
    write_dataset(b, 90, seed=6, size_limit=4000)
    return a, b


def rank(monkeypatch: pytest.MonkeyPatch, r: int, world: int, local_world: int) -> None:
    monkeypatch.setenv("RANK", str(r))
    monkeypatch.setenv("WORLD_SIZE", str(world))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(local_world))


def load(ds: StreamingDataset, bs: int, workers: int = 2, **kw: Any) -> list[list[dict]]:
    loader = StreamingDataLoader(
        ds, batch_size=bs, num_workers=workers, collate_fn=lambda x: x, **kw
    )
    return list(loader)


@pytest.fixture(scope="module")
def keys(two_streams: tuple[str, str]) -> dict:
    from astream import LocalDataset

    out = {}
    for s, path in enumerate(two_streams):
        for x in LocalDataset(path):
            out[(x["text"], x["ids"].tobytes())] = s
    return out


@pytest.mark.parametrize("method", ["per_stream", "device_per_stream"])
def test_every_batch_from_one_stream_on_every_rank(two_streams, keys, monkeypatch, method):
    a, b = two_streams
    per_rank = []
    for r in range(2):
        rank(monkeypatch, r, 2, 2)
        ds = StreamingDataset(
            streams=[Stream(local=a), Stream(local=b)],
            batch_size=4,
            shuffle=True,
            batching_method=method,
            num_canonical_nodes=2,
        )
        got = load(ds, 4)
        assert len(got) * 4 == len(ds)  # whole batches, and len() is what the rank yields
        for batch in got:
            assert len(batch) == 4
            assert len({keys[(s["text"], s["ids"].tobytes())] for s in batch}) == 1
        per_rank.append(got)
    assert len(per_rank[0]) == len(per_rank[1])
    if method == "per_stream":  # the two device batches of a global batch: one stream too
        for x, y in zip(*per_rank):
            both = {keys[(s["text"], s["ids"].tobytes())] for s in x + y}
            assert len(both) == 1
    streams = Counter(keys[(b_[0]["text"], b_[0]["ids"].tobytes())] for r in per_rank for b_ in r)
    assert set(streams) == {0, 1}


def test_three_ranks_pad_only_to_a_multiple_of_ranks(two_streams, keys, monkeypatch):
    a, _ = two_streams  # 300 samples
    seen: Counter[tuple[str, bytes]] = Counter()
    for r in range(3):
        rank(monkeypatch, r, 3, 3)
        ds = StreamingDataset(streams=[Stream(local=a, choose=299)], batch_size=7, shuffle=True)
        got = load(ds, 7)
        assert len(ds) == 100 == sum(len(x) for x in got)  # ceil(299 / 3)
        assert [len(x) for x in got[-2:]] == [7, 2]  # 14 full batches, then 2
        seen.update((s["text"], s["ids"].tobytes()) for x in got for s in x)
    assert len(seen) == 299 and sum(seen.values()) == 300  # one pad in all


def test_one_rank_drop_last(two_streams):
    a, _ = two_streams
    ds = StreamingDataset(local=a, batch_size=32, shuffle=True)
    assert [len(x) for x in load(ds, 32)][-2:] == [32, 12]  # 300 = 9 * 32 + 12
    ds = StreamingDataset(local=a, batch_size=32, shuffle=True)
    assert [len(x) for x in load(ds, 32, drop_last=True)] == [32] * 9


def test_partition_algo_orig_refuses_what_relaxed_deals(two_streams, monkeypatch):
    a, _ = two_streams
    rank(monkeypatch, 0, 3, 1)  # 3 nodes of 1 rank
    # astream's own order deals any World; the reference's orders refuse this one fresh
    ok = StreamingDataset(local=a, batch_size=4, num_canonical_nodes=2, shuffle_algo="astream")
    assert len(ok) == 100
    with pytest.raises(ConfigError, match="num_canonical_nodes=2 is incompatible with num_nodes=3"):
        StreamingDataset(
            local=a, batch_size=4, num_canonical_nodes=2, partition_algo="orig",
            shuffle_algo="astream",
        )  # fmt: skip


def test_unshuffled_partly_sampled_stream_in_index_order(two_streams):
    a, _ = two_streams

    def epoch(e: int, method: str) -> list[int]:
        ds = StreamingDataset(
            streams=[Stream(local=a, choose=123)],
            batch_size=8,
            shuffle=False,
            sampling_method=method,
        )
        ds.set_epoch(e)
        return [int(s["label"]) for x in load(ds, 8) for s in x]

    first = epoch(0, "fixed")
    assert len(first) == 123 and first == sorted(set(first))
    assert epoch(3, "fixed") == first
    balanced = epoch(3, "balanced")
    assert balanced == sorted(set(balanced)) and len(balanced) == 123
