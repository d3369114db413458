"""A reference shuffle_algo end to end: real DataLoader workers yield exactly the planner's order
(which tests/order/test_reference_world.py holds equal to mosaicml-streaming 0.13.0's)."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

import numpy as np
import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def shard_sizes(path: str) -> np.ndarray:
    with open(os.path.join(path, "index.json")) as f:
        return np.array([s["samples"] for s in json.load(f)["shards"]], np.int64)


@pytest.mark.parametrize(("algo", "ncn"), [("py1e", 2), ("py1s", 4), ("py1br", 1), ("naive", 1)])
def test_dataloader_yields_the_reference_order(local_dataset: Any, algo: str, ncn: int) -> None:
    path = local_dataset[0]
    kw: dict[str, Any] = dict(
        shuffle=True, shuffle_algo=algo, num_canonical_nodes=ncn, shuffle_seed=17, batch_size=4
    )
    ds = StreamingDataset(local=path, shuffle_block_size=300, **kw)
    loader = StreamingDataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate)
    got = [b for b in loader]
    sizes = shard_sizes(path)
    plan = plan_epoch(
        [StreamSpec(sizes)], seed=17, epoch=0, num_canonical_nodes=ncn, batch_size=4,
        shuffle=True, shuffle_algo=algo, shuffle_block_size=300,
    )  # fmt: skip
    world = World(1, 1, 2)
    w0 = [b.tolist() for b in plan.worker_batches(world, 0, 0, 0)]
    w1 = [b.tolist() for b in plan.worker_batches(world, 0, 1, 0)]
    want = [b for pair in zip(w0, w1) for b in pair] + w0[len(w1) :] + w1[len(w0) :]
    assert got == want
    # one rank, whole epoch: every sample exactly once
    assert sorted(x for b in got for x in b) == list(range(int(sizes.sum())))


def test_reference_checkpoint_resumes_in_the_reference_order(local_dataset: Any) -> None:
    """A dict with the reference's state_dict keys, loaded into StreamingDataset: the real
    DataLoader continues with the rest of the same (py1e) epoch; prefix + rest == whole."""
    path = local_dataset[0]
    kw: dict[str, Any] = dict(shuffle=True, shuffle_algo="py1e", shuffle_block_size=300)
    whole = [
        b
        for b in StreamingDataLoader(
            StreamingDataset(local=path, batch_size=4, num_canonical_nodes=2, shuffle_seed=5, **kw),
            batch_size=4, num_workers=2, collate_fn=collate,
        )
    ]  # fmt: skip
    # the reference's checkpoint after 40 samples; this dataset was built with other values
    state = {
        "epoch": 0,
        "sample_in_epoch": 40,
        "num_canonical_nodes": 2,
        "shuffle_seed": 5,
        "initial_physical_nodes": 1,
    }
    ds = StreamingDataset(local=path, batch_size=4, num_canonical_nodes=3, shuffle_seed=9, **kw)
    ds.load_state_dict(state)
    rest = list(StreamingDataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate))
    flat = [x for b in whole for x in b]
    assert flat[:40] + [x for b in rest for x in b] == flat


@pytest.mark.parametrize("method", ["stratified", "per_stream", "device_per_stream"])
def test_dataloader_yields_the_reference_batching(tmp_path: Any, method: str) -> None:
    """Two streams (``choose`` and ``repeat``) under py1e with a per-stream batching method:
    real DataLoader workers yield the planner's batches (which tests/order/
    test_reference_batching.py holds equal to mosaicml-streaming 0.13.0's)."""
    from astream import Stream

    src = os.path.join(os.path.dirname(__file__), "..", "order", "golden", "mosaic", "jobs")
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    shutil.copytree(os.path.join(src, "data"), a)
    shutil.copytree(os.path.join(src, "data"), b)
    ds = StreamingDataset(
        streams=[Stream(local=a, choose=150), Stream(local=b, repeat=0.5)], shuffle=True,
        shuffle_algo="py1e", shuffle_seed=3, num_canonical_nodes=2, batch_size=4,
        batching_method=method, shuffle_block_size=40,
    )  # fmt: skip
    got = list(
        StreamingDataLoader(
            ds, batch_size=4, num_workers=2, collate_fn=lambda s: [int(x["x"]) for x in s]
        )
    )
    plan = ds.plan(0)
    world = World(1, 1, 2)
    w0 = [x.tolist() for x in plan.worker_batches(world, 0, 0)]
    w1 = [x.tolist() for x in plan.worker_batches(world, 0, 1)]
    want = [q for pair in zip(w0, w1) for q in pair] + w0[len(w1) :] + w1[len(w0) :]
    assert got == [[i % 203 for i in q] for q in want]  # x is the index inside its stream
    # stream a gives 150 distinct samples, stream b 101 (its repeat of 0.5), minus what the
    # method drops to fill whole batches; every batch holds exactly 4
    assert all(len(q) == 4 for q in got)
    ids = [i for q in want for i in q]
    assert (
        len(set(i for i in ids if i < 203)) <= 150 and len(set(i for i in ids if i >= 203)) <= 101
    )


def test_reference_checkpoint_redeals_on_a_world_that_does_not_divide(
    local_dataset: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A py1e run started on 2 nodes (2 canonical nodes) resumes on 3 nodes x 2 ranks: the
    dataset takes the checkpoint's initial_physical_nodes and yields the reference's "relaxed"
    re-deal (the planner's, which tests/order/test_reference_redeal.py holds equal to 0.13.0's),
    and its own checkpoint keeps the initial node count, as the reference's does."""
    monkeypatch.setenv("WORLD_SIZE", "6")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    path = local_dataset[0]
    ds = StreamingDataset(
        local=path, batch_size=4, shuffle=True, shuffle_algo="py1e", num_canonical_nodes=2,
        shuffle_seed=5, shuffle_block_size=300,
    )  # fmt: skip
    state = {
        "epoch": 0,
        "sample_in_epoch": 72,
        "num_canonical_nodes": 2,
        "shuffle_seed": 5,
        "initial_physical_nodes": 2,
    }
    ds.load_state_dict(state)
    got = [int(s["label"]) for s in ds]
    plan = plan_epoch(
        [StreamSpec(shard_sizes(path))], seed=5, epoch=0, num_canonical_nodes=2, batch_size=4,
        shuffle=True, shuffle_algo="py1e", shuffle_block_size=300, initial_physical_nodes=2,
    )  # fmt: skip
    want = [int(x) for b in plan.worker_batches(World(3, 2, 1), 3, 0, 72) for x in b]
    assert got == want and len(got) > 100
    assert ds.state_dict(96, True)["initial_physical_nodes"] == 2
