"""Drop-in fidelity of the dataset/loader layer (issue 11 items 1, 2, 12; issue 19 items 1, 3, 4).

Subclass transforms in every path, epochs through a plain torch DataLoader (fresh or persistent
workers, one rank or several), ``len`` as the whole epoch, the no-argument ``state_dict``, a
dataset without ``batch_size`` under a loader that has one, and the reference's shard-level
cache methods.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest
from torch.utils.data import DataLoader

from astream import StreamingDataLoader, StreamingDataset
from astream.errors import CacheError, ConfigError

from .conftest import labels

N = 1000


def collate(batch: list[Any]) -> list[Any]:
    return batch


def sdl_orders(path: str, epochs: int, workers: int, bs: int = 8, **kw: Any) -> list[list[int]]:
    """Orders of ``epochs`` epochs through StreamingDataLoader (``kw`` goes to the loader)."""
    ds = StreamingDataset(local=path, batch_size=bs, shuffle=True)
    loader = StreamingDataLoader(ds, batch_size=bs, num_workers=workers, collate_fn=collate, **kw)
    return [labels(s for b in loader for s in b) for _ in range(epochs)]


# -- 1. transforms ---------------------------------------------------------------------------
class Doubled(StreamingDataset):
    """The reference's documented pattern: override __getitem__ and call super()."""

    def __getitem__(self, idx: Any) -> Any:
        x = super().__getitem__(idx)
        return {"label2": int(x["label"]) * 2, "text": x["text"].upper()}


class Tagged(StreamingDataset):
    """Overriding get_item instead."""

    def get_item(self, idx: int) -> Any:
        x = super().get_item(idx)
        return (int(idx), int(x["label"]))


def _check_doubled(got: list[Any]) -> None:
    assert sorted(s["label2"] for s in got) == [2 * i for i in range(N)]
    assert all(s["text"] == f"SAMPLE-{s['label2'] // 2}" for s in got)


@pytest.mark.parametrize("workers", [0, 2])
def test_getitem_override_applies_during_iteration(local_dataset: Any, workers: int) -> None:
    path, _ = local_dataset
    ds = Doubled(local=path, batch_size=8, shuffle=True)
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=workers, collate_fn=collate)
    got = [s for b in loader for s in b]
    _check_doubled(got)
    # same order as the plain dataset: the override sees the planned samples, in order
    want = sdl_orders(path, 1, 0)[0]
    assert [s["label2"] // 2 for s in got] == want
    assert ds[7] == {"label2": 14, "text": "SAMPLE-7"}


def test_get_item_override_applies_sync_and_async(local_dataset: Any) -> None:
    path, _ = local_dataset
    ds = Tagged(local=path, batch_size=8, shuffle=True)
    got = list(ds)
    # each sample went through get_item with its own global index
    assert sorted(got) == [(i, i) for i in range(N)]

    async def run() -> list[Any]:
        ads = Tagged(local=path, batch_size=8, shuffle=True)
        out = [x async for x in ads.aiter()]
        out.append(await ads.aget(3))
        await ads.aclose()
        return out

    aout = asyncio.run(run())
    assert aout[:-1] == got and aout[-1] == (3, 3)


@pytest.mark.parametrize("workers", [0, 2])
def test_transform_callable(local_dataset: Any, workers: int) -> None:
    path, _ = local_dataset
    ds = StreamingDataset(
        local=path, batch_size=8, shuffle=False, transform=lambda s: int(s["label"]) + 1
    )
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=workers, collate_fn=collate)
    assert [x for b in loader for x in b] == list(range(1, N + 1))
    assert ds[10] == 11 and ds[[1, 2]] == [2, 3]


def test_transform_and_override_compose(local_dataset: Any) -> None:
    path, _ = local_dataset
    # transform runs on what get_item gives; a __getitem__ override sees its result
    ds = Doubled(local=path, batch_size=8, transform=lambda s: {**s, "text": s["text"] + "!"})
    assert [s["text"] for s in ds] == [f"SAMPLE-{i}!" for i in range(N)]
    assert ds[5] == {"label2": 10, "text": "SAMPLE-5!"}
    tagged = Tagged(local=path, batch_size=8, transform=lambda t: t[1] * 10)
    assert list(tagged) == [10 * i for i in range(N)] and tagged[4] == 40


def test_transform_must_be_callable(local_dataset: Any) -> None:
    with pytest.raises(ConfigError, match="transform must be a callable, got int"):
        StreamingDataset(local=local_dataset[0], batch_size=8, transform=3)


# -- 2. epochs through a plain torch DataLoader ----------------------------------------------
@pytest.mark.parametrize("persistent", [False, True])
def test_plain_dataloader_walks_epochs_like_streaming_dataloader(
    local_dataset: Any, persistent: bool
) -> None:
    path, _ = local_dataset
    want = sdl_orders(path, 3, 0)
    assert len({tuple(o) for o in want}) == 3  # three different shuffles
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True)
    plain = DataLoader(
        ds, batch_size=8, num_workers=2, collate_fn=collate, persistent_workers=persistent
    )
    got = [labels(s for b in plain for s in b) for _ in range(3)]
    assert got == want


def test_streaming_dataloader_persistent_workers(local_dataset: Any) -> None:
    path, _ = local_dataset
    want = sdl_orders(path, 3, 0)
    assert sdl_orders(path, 3, 2, persistent_workers=True) == want


def test_set_epoch_and_owner_iteration_share_the_epoch_counter(local_dataset: Any) -> None:
    path, _ = local_dataset
    want = sdl_orders(path, 4, 0)
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True)
    plain = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate)
    assert labels(s for b in plain for s in b) == want[0]
    assert labels(ds) == want[1]  # the owner iterating itself continues after the workers
    assert labels(s for b in plain for s in b) == want[2]
    ds.set_epoch(1)
    assert labels(s for b in plain for s in b) == want[1]
    assert labels(s for b in plain for s in b) == want[2]
    assert ds.next_epoch == 3


@pytest.mark.parametrize("persistent", [False, True])
def test_plain_dataloader_epochs_on_two_ranks(
    local_dataset: Any, monkeypatch: pytest.MonkeyPatch, persistent: bool
) -> None:
    path, _ = local_dataset
    per_rank: dict[int, list[list[int]]] = {}
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
        ds = StreamingDataset(local=path, batch_size=8, shuffle=True)
        sdl = StreamingDataLoader(ds, batch_size=8, num_workers=0, collate_fn=collate)
        want = [labels(s for b in sdl for s in b) for _ in range(2)]
        ds2 = StreamingDataset(local=path, batch_size=8, shuffle=True)
        plain = DataLoader(
            ds2, batch_size=8, num_workers=2, collate_fn=collate, persistent_workers=persistent
        )
        got = [labels(s for b in plain for s in b) for _ in range(2)]
        assert got == want
        per_rank[rank] = got
    for e in range(2):
        assert set(per_rank[0][e]) | set(per_rank[1][e]) == set(range(N))
    assert per_rank[0][0] != per_rank[0][1]


_KILLED_JOB = textwrap.dedent(
    """
    import sys, time
    from torch.utils.data import DataLoader
    from astream import StreamingDataset
    ds = StreamingDataset(local=sys.argv[1], batch_size=8, shuffle=True)
    plain = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=list)
    for epoch in range(3):
        for i, b in enumerate(plain):
            if epoch == 1 and i == 5:
                print("ready", flush=True)
                time.sleep(60)
    """
)


def test_killed_job_leaves_nothing_that_shifts_the_next_jobs_epochs(local_dataset: Any) -> None:
    path, _ = local_dataset
    want = sdl_orders(path, 2, 0)
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_JOB, path], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"  # killed inside epoch 1, workers alive
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.5)  # orphaned workers notice their parent is gone
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True)
    plain = DataLoader(ds, batch_size=8, num_workers=2, collate_fn=collate)
    assert [labels(s for b in plain for s in b) for _ in range(2)] == want


# -- len, remaining_len and the no-argument state_dict ---------------------------------------
def test_len_is_the_whole_epoch_before_and_after_resume(local_dataset: Any) -> None:
    path, _ = local_dataset
    ds = StreamingDataset(local=path, batch_size=16, shuffle=True)
    loader = StreamingDataLoader(ds, batch_size=16, num_workers=2, collate_fn=collate)
    full_batches = -(-N // 16)
    assert len(ds) == N and len(loader) == full_batches
    it = iter(loader)
    for _ in range(20):
        next(it)
    state = loader.state_dict()
    del it
    ds2 = StreamingDataset(local=path, batch_size=16, shuffle=True)
    loader2 = StreamingDataLoader(ds2, batch_size=16, num_workers=2, collate_fn=collate)
    loader2.load_state_dict(state)
    assert len(ds2) == N and len(loader2) == full_batches
    assert ds2.remaining_len() == N - 320
    assert loader2.remaining_len() == full_batches - 20
    rest = [s for b in loader2 for s in b]
    assert len(rest) == N - 320
    assert len(ds2) == N and loader2.remaining_len() == full_batches  # next epoch is whole


def test_no_argument_state_dict_resumes_exactly(local_dataset: Any) -> None:
    path, _ = local_dataset
    want = sdl_orders(path, 2, 0)
    ds = StreamingDataset(local=path, batch_size=8, shuffle=True)
    it = iter(ds)
    head = [int(next(it)["label"]) for _ in range(123)]
    state = ds.state_dict()
    assert (state["epoch"], state["sample_in_epoch"]) == (0, 123)
    ds2 = StreamingDataset(local=path, batch_size=8, shuffle=True)
    ds2.load_state_dict(state)
    tail = labels(ds2)
    assert head + tail == want[0]
    assert labels(ds2) == want[1]
    # a state saved after the last sample resumes into that finished epoch (an empty
    # iteration, as the iterator it describes would give: torchdata), then the next one
    end = ds2.state_dict()
    ds3 = StreamingDataset(local=path, batch_size=8, shuffle=True)
    ds3.load_state_dict(end)
    assert ds3.remaining_len() == 0 and list(ds3) == []
    assert ds3.next_epoch == 2
    # the reference's own dict at the end of an epoch means the next epoch
    ref = {k: v for k, v in end.items() if not k.startswith("astream")}
    ds4 = StreamingDataset(local=path, batch_size=8, shuffle=True)
    ds4.load_state_dict(ref)
    assert ds4.next_epoch == 2 and ds4.remaining_len() == N


def test_worker_state_cannot_be_loaded_outside_a_worker(local_dataset: Any) -> None:
    path, _ = local_dataset
    ds = StreamingDataset(local=path, batch_size=8)
    state = ds.state_dict()
    state["astream_worker"] = {"worker": 1, "num_workers": 2, "yielded": 8}
    with pytest.raises(ConfigError, match="saved inside DataLoader worker 1"):
        ds.load_state_dict(state)


# -- 4. batch_size from the DataLoader -------------------------------------------------------
@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_without_batch_size_takes_the_loaders(local_dataset: Any, workers: int) -> None:
    path, _ = local_dataset
    want = sdl_orders(path, 2, workers, bs=16)
    ds = StreamingDataset(local=path, shuffle=True)
    plain = DataLoader(ds, batch_size=16, num_workers=workers, collate_fn=collate)
    got = [labels(s for b in plain for s in b) for _ in range(2)]
    assert got == want
    assert sorted(got[0]) == list(range(N))


def test_batch_size_mismatch_is_named(local_dataset: Any) -> None:
    path, _ = local_dataset
    ds = StreamingDataset(local=path, batch_size=8)
    plain = DataLoader(ds, batch_size=16, num_workers=0, collate_fn=collate)
    with pytest.warns(UserWarning, match=r"batch_size=8\) under a DataLoader with batch_size=16"):
        next(iter(plain))


def test_spawned_worker_without_batch_size_refuses(local_dataset: Any) -> None:
    path, _ = local_dataset
    ds = StreamingDataset(local=path)
    plain = DataLoader(
        ds, batch_size=16, num_workers=1, collate_fn=collate, multiprocessing_context="spawn"
    )
    with pytest.raises(Exception, match=r"batch_size=None\) in a DataLoader worker"):
        next(iter(plain))


# -- 12. the reference's introspection and cache methods -------------------------------------
def test_introspection(local_dataset: Any) -> None:
    path, _ = local_dataset
    ds = StreamingDataset(local=path, batch_size=8, epoch_size=500)
    assert ds.size == ds.num_samples == N
    assert ds.num_shards == len(ds.shards) > 3
    assert ds.epoch_size == 500 and len(ds) == 500
    # the stream remote/local make is there, resolved, as in the reference
    assert ds.num_streams == len(ds.streams) == 1
    assert ds.streams[0].local == path and ds.streams[0].choose == 500
    with pytest.raises(CacheError, match="local-only data"):
        ds.evict_shard(0)
    with pytest.raises(IndexError, match="shard_id 99 out of range"):
        ds.prepare_shard(99)


def test_prepare_and_evict_shards(s3_dataset: Any, fresh_local: Any) -> None:
    url, samples = s3_dataset
    local = fresh_local()
    ds = StreamingDataset(remote=url, local=local, batch_size=8)
    raw = [os.path.join(local, e.raw_data.basename) for e in ds.shards]
    assert not any(os.path.exists(p) for p in raw)
    assert ds.prepare_shard(2) is True
    assert os.path.exists(raw[2])
    ds.prepare_shard(0)
    os.utime(raw[0], (1, 1))  # shard 0 is now the coldest
    size0 = os.path.getsize(raw[0])
    assert ds.evict_coldest_shard() == size0
    assert not os.path.exists(raw[0]) and os.path.exists(raw[2])
    assert ds.evict_shard(2) > 0 and not os.path.exists(raw[2])
    assert ds.evict_shard(2) == 0  # nothing left to free
    with pytest.raises(CacheError, match="no shard can be evicted"):
        ds.evict_coldest_shard()
    # the data is intact after all that
    assert np.array_equal(ds[5]["ids"], samples[5]["ids"])


def test_a_worker_state_taken_mid_batch_skips_exactly_what_it_yielded() -> None:
    # a worker resumed from its own state skips the samples it had yielded, also when that
    # count ends inside a planned batch (a consumer that stopped mid-batch)
    from astream.dataset import _skip

    batches = [np.arange(k * 8, k * 8 + 8) for k in range(4)]
    for n in (0, 5, 8, 13, 31, 32):
        got = np.concatenate(list(_skip(iter(batches), n)) or [np.zeros(0, int)]).tolist()
        assert got == list(range(n, 32)), n


def freeze_count(batch: list[Any]) -> list[int]:
    """``collate_fn`` run in the worker: how many objects its garbage collector never walks."""
    import gc

    return [gc.get_freeze_count()]


def test_forked_workers_start_with_the_parents_objects_frozen(local_dataset: Any) -> None:
    """StreamingDataLoader freezes the process's objects while torch forks the workers (a
    worker's collections then skip the inherited heap), and unfreezes them in the parent."""
    import gc

    path, _ = local_dataset
    ds = StreamingDataset(local=path, batch_size=8)
    loader = StreamingDataLoader(ds, batch_size=8, num_workers=2, collate_fn=freeze_count)
    counts = [c for b in loader for c in b]
    assert len(counts) == -(-N // 8)
    assert min(counts) > 10_000  # the parent's heap (torch's modules alone are more)
    assert gc.get_freeze_count() == 0
