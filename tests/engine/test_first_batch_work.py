"""The work between building a local dataset and its first batch: no loop thread, no second
plan of epoch 0, no import. Each is counted in a fresh interpreter (what a training job pays
once per process), never timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Builds a dataset, reads its first batch through a StreamingDataLoader (no workers) and
# prints what happened in between: the modules imported, the plans made, the loop thread.
CHILD = r"""
import json, sys
import numpy as np
import torch
from astream import StreamingDataLoader, StreamingDataset, bridge
import astream.core.order as order

made = []
plan_epoch = order.plan_epoch
def counting(*args, **kwargs):
    made.append(kwargs.get("epoch"))
    return plan_epoch(*args, **kwargs)
order.plan_epoch = counting

args = json.loads(sys.argv[1])
before = set(sys.modules)
ds = StreamingDataset(**args)
loader = StreamingDataLoader(ds, batch_size=4, num_workers=0, collate_fn=lambda b: b)
batch = next(iter(loader))
print(json.dumps({
    "imported": sorted(set(sys.modules) - before),
    "plans": made,
    "loop_thread": bridge._current is not None,
    "ids": [int(s["label"]) for s in batch],
}))
"""


def _first_batch(**args: Any) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


@pytest.fixture(scope="module")
def local_data(local_dataset: tuple[str, list[dict[str, Any]]]) -> str:
    return local_dataset[0]


def test_a_local_dataset_reaches_its_first_batch_without_the_loop_thread(local_data: str) -> None:
    # a local index is a file read: the blocking constructor reads it itself; starting the loop
    # thread for it costs a thread start and two hand-offs before the first batch
    got = _first_batch(local=local_data, batch_size=4, shuffle=True)
    assert got["loop_thread"] is False
    assert len(got["ids"]) == 4 and len(set(got["ids"])) == 4


def test_epoch_0_is_planned_once_from_construction_to_the_first_batch(local_data: str) -> None:
    # the constructor's checks plan epoch 0; the first epoch reads that plan
    got = _first_batch(local=local_data, batch_size=4, shuffle=True)
    assert got["plans"] == [0]
    # same order as a dataset that planned epoch 0 only when iterating (no cached plan)
    from astream import StreamingDataset

    ds = StreamingDataset(local=local_data, batch_size=4, shuffle=True)
    ds._plans.clear()
    assert [s["label"] for s in _take(ds, 4)] == got["ids"]


def test_without_batch_size_epoch_0_is_planned_again_with_its_warning(local_data: str) -> None:
    # batch_size=None plans with 1 and warns when the epoch is planned: the checks' plan is
    # not kept, so the warning still comes at the first epoch
    from astream import StreamingDataset

    ds = StreamingDataset(local=local_data, shuffle=True)
    assert ds._plans == {}
    with pytest.warns(UserWarning, match="batch_size=None"):
        ds.plan(0)


def test_building_a_local_dataset_and_its_first_batch_import_nothing(local_data: str) -> None:
    # a module the constructor always needs is imported with astream, not inside the timing
    # of a job's first batch
    got = _first_batch(local=local_data, batch_size=4, shuffle=True)
    assert got["imported"] == []


def _take(ds: Any, n: int) -> list[dict[str, Any]]:
    out = []
    for s in ds:
        out.append(s)
        if len(out) == n:
            break
    return out


def test_a_pickled_dataset_leaves_its_plans_behind_and_plans_the_same(local_data: str) -> None:
    # a spawned worker gets the dataset pickled: a plan of ten million samples would add tens
    # of MB to every worker's start; the copy plans the same epoch itself
    import pickle

    from astream import StreamingDataset

    ds = StreamingDataset(local=local_data, batch_size=4, shuffle=True)
    assert len(ds._plans) == 1
    copy = pickle.loads(pickle.dumps(ds))
    assert copy._plans == {} and len(ds._plans) == 1
    assert [s["label"] for s in _take(copy, 8)] == [s["label"] for s in _take(ds, 8)]
    assert len(copy._plans) == 1  # planned again, when iterated
