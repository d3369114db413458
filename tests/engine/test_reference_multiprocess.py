"""A reference shuffle_algo across real processes: 2 "nodes" x 2 ranks x 2 DataLoader workers,
each rank its own process (RANK/WORLD_SIZE/LOCAL_WORLD_SIZE as torchrun sets them), yields
exactly the planner's dealing -- which tests/order/test_reference_world.py holds equal to
mosaicml-streaming 0.13.0's for this world shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from astream.core.order import StreamSpec, plan_epoch
from astream.core.world import World

JOB = os.path.join(os.path.dirname(__file__), "epoch_job.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _sizes(path: str) -> np.ndarray:
    with open(os.path.join(path, "index.json")) as f:
        return np.array([s["samples"] for s in json.load(f)["shards"]], np.int64)


def _read(path: str) -> list[list[int]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _rank_batches(plan: Any, world: World, rank: int) -> list[list[int]]:
    """The DataLoader's round-robin over the rank's workers, worker 0 first."""
    per = [[b.tolist() for b in plan.worker_batches(world, rank, w, 0)] for w in range(2)]
    out: list[list[int]] = []
    for j in range(max(len(p) for p in per)):
        out += [p[j] for p in per if j < len(p)]
    return out


@pytest.mark.parametrize(
    ("algo", "ncn"), [("py1e", 2), pytest.param("py1br", 8, marks=pytest.mark.slow)]
)
def test_two_nodes_two_ranks_two_workers(local_dataset: Any, tmp_path: Any, algo: str, ncn: int):
    path = local_dataset[0]
    out = str(tmp_path / "out")
    procs = []
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", LOCAL_WORLD_SIZE="2")
        env.update(
            LOCAL_RANK=str(rank % 2), PYTHONPATH=ROOT + os.pathsep + env.get("PYTHONPATH", "")
        )
        cmd = [sys.executable, JOB, "--local", path, "--cache-dir", str(tmp_path / f"c{rank}"),
               "--out", out, "--batch", "4", "--workers", "2", "--shuffle", "--seed", "17",
               "--shuffle-algo", algo, "--ncn", str(ncn), "--block", "300"]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-4000:]
    sizes = _sizes(path)
    plan = plan_epoch(
        [StreamSpec(sizes)], seed=17, epoch=0, num_canonical_nodes=ncn, batch_size=4,
        shuffle=True, shuffle_algo=algo, shuffle_block_size=300,
    )  # fmt: skip
    world = World(2, 2, 2)
    seen: list[int] = []
    for rank in range(4):
        got = _read(f"{out}.{rank}")
        assert got == _rank_batches(plan, world, rank), rank
        seen += [x for b in got for x in b]
    assert sorted(set(seen)) == list(range(int(sizes.sum())))  # padding repeats, never loses
