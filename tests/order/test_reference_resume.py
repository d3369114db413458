"""Resuming from the reference's checkpoints: astream continues with exactly the reference's
remainder of the epoch (goldens: scripts/gen_mosaic_order_golden.py, ``resume.npz``)."""

from __future__ import annotations

import json
import os
import warnings

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.state import LoaderState
from astream.core.world import World

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "mosaic", "resume.npz")
_DATA = np.load(GOLDEN)
_META = json.loads(str(_DATA["cases"]))
CASES = list(enumerate(_META["cases"]))
BATCH = 4


def _id(case: tuple[int, dict]) -> str:
    _k, c = case
    shape = "x".join(map(str, c["shape"]))
    return f"{c['algo']}-{shape}-at{c['state']['sample_in_epoch']}"


def _plan(c: dict, state: LoaderState):
    streams = [StreamSpec(np.array(s, np.int64)) for s in _META["streams"][c["streams"]]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan_epoch(
            streams, seed=state.shuffle_seed, epoch=state.epoch,
            num_canonical_nodes=state.num_canonical_nodes, batch_size=BATCH, shuffle=True,
            shuffle_algo=c["algo"], shuffle_block_size=c["block"],
        )  # fmt: skip


def _rank_stream(work: np.ndarray, node: int, local: int) -> list[int]:
    """What a rank yields through a DataLoader: batch j from worker j % W, fillers dropped."""
    out = []
    for b in range(work.shape[3]):
        for w in range(work.shape[2]):
            out += [int(x) for x in work[node, local, w, b] if x != -1]
    return out


def _astream_rank_stream(plan, world: World, rank: int, start: int) -> list[int]:
    its = [list(plan.worker_batches(world, rank, w, start)) for w in range(world.workers_per_rank)]
    out = []
    for j in range(max(len(x) for x in its)):
        for batches in its:
            if j < len(batches):
                out += batches[j].tolist()
    return out


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_resume_from_reference_checkpoint(case: tuple[int, dict]) -> None:
    k, c = case
    state = LoaderState.from_dict(c["state"])  # the reference's keys, as it writes them
    want = _DATA[str(k)].astype(np.int64)
    pn, rpn, workers = c["shape"]
    world = World(pn, rpn, workers)
    p = _plan(c, state)
    for rank in range(pn * rpn):
        for w in range(workers):
            ref = [[int(x) for x in b if x != -1] for b in want[rank // rpn, rank % rpn, w]]
            got = [b.tolist() for b in p.worker_batches(world, rank, w, state.sample_in_epoch)]
            assert got == [b for b in ref if b], (rank, w)


@pytest.mark.parametrize(
    "group", sorted({(c["algo"], tuple(c["shape"])) for _, c in CASES}), ids=str
)
def test_stopped_on_reference_resumed_on_astream_equals_uninterrupted(group) -> None:
    """Every rank: what it consumed on the reference before the checkpoint, then what astream
    yields after loading that checkpoint, is the reference's uninterrupted epoch."""
    runs = [(k, c) for k, c in CASES if (c["algo"], tuple(c["shape"])) == group]
    full = next(k for k, c in runs if c["state"]["sample_in_epoch"] == 0)
    pn, rpn, workers = group[1]
    world = World(pn, rpn, workers)
    resumed = [(k, c) for k, c in runs if c["state"]["sample_in_epoch"] > 0]
    assert len(resumed) == 3
    for _k, c in resumed:
        state = LoaderState.from_dict(c["state"])
        p = _plan(c, state)
        consumed = state.sample_in_epoch // world.num_ranks
        for rank in range(world.num_ranks):
            uninterrupted = _rank_stream(_DATA[str(full)], rank // rpn, rank % rpn)
            after = _astream_rank_stream(p, world, rank, state.sample_in_epoch)
            assert uninterrupted[:consumed] + after == uninterrupted, (rank, state.sample_in_epoch)
