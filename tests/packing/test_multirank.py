"""A real multi-rank run: torchrun, 2 ranks x 2 DataLoader workers, gloo process group
(marked slow: left out of the quick loop, which keeps the in-process 3 ranks x 2 workers
test of test_dataset.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

JOB = os.path.join(os.path.dirname(__file__), "pack_job.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


@pytest.mark.slow  # 20 s alone, 35 s on a contended machine: torchrun, gloo, 3 interpreters
def test_two_ranks_two_workers_every_token_once_and_exact_resume(
    tokens: Any, tmp_path: Any
) -> None:
    """Every token of the epoch is delivered exactly once over 2 ranks x 2 workers (301
    documents: the plan pads one rank, whose pad sample is not packed), and each rank resumed
    from the ranks' merged mid-epoch state yields exactly its remaining batches."""
    path, docs = tokens
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        env.pop(name, None)
    out = str(tmp_path / "job")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           JOB, "--data", path, "--out", out]  # fmt: skip
    r = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    ranks = []
    for rank in range(2):
        with open(f"{out}.{rank}") as f:
            ranks.append(json.load(f))
    every = sorted(t for d in docs for t in d.tolist())
    assert sorted(ranks[0]["tokens"] + ranks[1]["tokens"]) == every
    assert set(ranks[0]["tokens"]).isdisjoint(ranks[1]["tokens"])
    for res in ranks:
        assert res["exact"] and res["rest"] == res["batches"] - 3 > 0
