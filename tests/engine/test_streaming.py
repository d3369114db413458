"""End-to-end streaming: exact sample sets and orders, local and S3, real DataLoader workers."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from astream import StreamingDataLoader, StreamingDataset
from astream.errors import ConfigError

from .conftest import labels, write_dataset


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def epoch_labels(ds: StreamingDataset, workers: int, bs: int = 8) -> list[int]:
    loader = StreamingDataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=collate)
    return [x for b in loader for x in b]


def check_sample(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["label"] == want["label"]
    assert got["text"] == want["text"]
    assert got["ids"].dtype == np.uint16
    assert np.array_equal(got["ids"], want["ids"])


@pytest.mark.parametrize("shuffle", [False, True])
def test_local_epoch_exact_and_worker_independent(local_dataset: Any, shuffle: bool) -> None:
    path, _samples = local_dataset
    orders = {}
    for workers in (0, 2):
        ds = StreamingDataset(local=path, batch_size=8, shuffle=shuffle)
        orders[workers] = epoch_labels(ds, workers)
    assert orders[0] == orders[2]
    assert sorted(orders[0]) == list(range(1000))
    if shuffle:
        assert orders[0] != list(range(1000))
    else:
        assert orders[0] == list(range(1000))


def test_samples_decode_exactly(local_dataset: Any) -> None:
    path, samples = local_dataset
    ds = StreamingDataset(local=path, batch_size=4, shuffle=True)
    for s in ds:
        check_sample(s, samples[s["label"]])


def test_s3_epoch_matches_local(s3_dataset: Any, local_dataset: Any, fresh_local: Any) -> None:
    url, _samples = s3_dataset
    want = epoch_labels(StreamingDataset(local=local_dataset[0], batch_size=8, shuffle=True), 0)
    local = fresh_local()
    ds = StreamingDataset(remote=url, local=local, batch_size=8, shuffle=True)
    got = epoch_labels(ds, 2)
    assert got == want
    # every shard now sits in the cache, byte-identical to the original
    for entry in ds.shards:
        name = entry.raw_data.basename
        with (
            open(os.path.join(local, name), "rb") as a,
            open(os.path.join(local_dataset[0], name), "rb") as b,
        ):
            assert a.read() == b.read()


def test_epochs_differ_and_advance(local_dataset: Any) -> None:
    ds = StreamingDataset(local=local_dataset[0], batch_size=8, shuffle=True)
    e0 = labels(ds)
    e1 = labels(ds)
    assert sorted(e0) == sorted(e1) == list(range(1000))
    assert e0 != e1
    ds2 = StreamingDataset(local=local_dataset[0], batch_size=8, shuffle=True)
    ds2.set_epoch(1)
    assert labels(ds2) == e1


def test_plain_dataloader_with_workers_yields_each_sample_once(local_dataset: Any) -> None:
    ds = StreamingDataset(local=local_dataset[0], batch_size=8, shuffle=True)
    loader = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate)
    got = [x for b in loader for x in b]
    assert sorted(got) == list(range(1000))


def test_len_is_per_rank(local_dataset: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ds = StreamingDataset(local=local_dataset[0], batch_size=8)
    assert len(ds) == 1000
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    ds = StreamingDataset(local=local_dataset[0], batch_size=8)
    assert len(ds) == 250  # ceil(1000 / 4), as the reference: pads only to a multiple of ranks
    got = labels(ds)
    assert len(got) == 250  # what the rank yields is its len


def test_bad_arguments_are_named(local_dataset: Any, tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="download_retry must be >= 0"):
        StreamingDataset(local=local_dataset[0], download_retry=-1)
    with pytest.raises(
        ConfigError,
        match=r"No `remote` provided, but local file .*/nothing/index\.json does not exist",
    ):
        StreamingDataset(local=str(tmp_path / "nothing"))
    with pytest.raises(ConfigError, match="partition_algo='weird'"):
        StreamingDataset(local=local_dataset[0], partition_algo="weird")
    with pytest.raises(ConfigError, match="give either `streams` or `remote`/`local`, not both"):
        StreamingDataset(streams=[object()], local=local_dataset[0])


def test_local_only_compressed_dataset_keeps_its_compressed_files(tmp_path: Any) -> None:
    path = str(tmp_path / "z")
    samples = write_dataset(path, 600, compression="zstd", size_limit=8_000)
    zips = sorted(n for n in os.listdir(path) if n.endswith(".zstd"))
    assert len(zips) >= 4 and not [n for n in os.listdir(path) if n.endswith(".mds")]
    raw_max = max(e.raw_data.bytes for e in StreamingDataset(local=path).shards)
    used_by_zips = sum(os.path.getsize(os.path.join(path, n)) for n in zips)
    # room for every compressed file plus two decompressed shards: raw copies get evicted
    ds = StreamingDataset(local=path, batch_size=6, cache_limit=used_by_zips + 2 * raw_max)
    got = list(ds)
    assert sorted(labels(got)) == list(range(600))
    for s in got:
        check_sample(s, samples[s["label"]])
    assert sorted(n for n in os.listdir(path) if n.endswith(".zstd")) == zips  # sources kept
    assert ds.cache_usage <= used_by_zips + 2 * raw_max
    assert ds.engine.space.evictions > 0


def test_a_cache_smaller_than_a_shuffle_block_is_warned_about(local_dataset: Any) -> None:
    path = local_dataset[0]
    one = max(e.raw_data.bytes for e in StreamingDataset(local=path).shards)
    with pytest.warns(UserWarning, match="holds fewer shards than one shuffle block reads"):
        StreamingDataset(local=path, batch_size=8, shuffle=True, cache_limit=2 * one)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        StreamingDataset(local=path, batch_size=8, shuffle=True, cache_limit=200 * one)
        StreamingDataset(local=path, batch_size=8, shuffle=False, cache_limit=2 * one)


def _submit_in_child(q: Any) -> None:
    from astream.runtime.locks import waiters

    try:
        q.put(waiters().submit(lambda: 42).result(timeout=10))
    except Exception as exc:  # pragma: no cover - reported to the parent
        q.put(repr(exc))


def test_lock_wait_pool_works_in_a_forked_child() -> None:
    """A DataLoader worker is a fork: the pool of the parent (with an idle thread) must not be
    reused there, or the first lock wait queues for a thread that does not exist."""
    import multiprocessing

    from astream.runtime.locks import waiters

    assert waiters().submit(lambda: 1).result() == 1  # the parent's pool now has an idle thread
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_submit_in_child, args=(q,))
    p.start()
    try:
        assert q.get(timeout=30) == 42
    finally:
        p.join(10)
