"""Fixtures for the trainer integration tests: one small MDS dataset written per session.

The frameworks (pytorch-lightning, transformers + accelerate, torchdata) come from the
``[trainers]`` extra; a test module whose framework is missing is skipped with the reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NUM_SAMPLES = 2000
COLUMNS = {"idx": "int", "x": "ndarray:float32", "y": "int"}


def write_trainer_dataset(path: str, n: int = NUM_SAMPLES) -> None:
    """``n`` samples: ``idx`` (the sample id the tests follow), 4 features, a 0/1 class."""
    rng = np.random.default_rng(19)
    with MDSWriter(out=path, columns=COLUMNS, size_limit=8_000) as w:
        for i in range(n):
            x = rng.standard_normal(4).astype(np.float32)
            w.write({"idx": i, "x": x, "y": int(x.sum() > 0)})


@pytest.fixture(scope="session")
def trainer_data(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("trainers") / "data")
    write_trainer_dataset(path)
    return path


def env(**extra: str) -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(extra)
    return e


def run_job(script: str, args: list[str], *, nproc: int = 1, timeout: float = 240) -> None:
    """Run ``script`` with ``args``: a plain process, or ``nproc`` ranks under torchrun (gloo)."""
    path = os.path.join(HERE, script)
    if nproc == 1:
        cmd = [sys.executable, path, *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", path, *args]  # fmt: skip
    # its own session, so that a timeout (ours or pytest's) kills every rank and DataLoader
    # worker of the job, never leaving a hung torchrun tree behind
    proc = subprocess.Popen(
        cmd, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=min(timeout, 280))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    tail = f"{out[-3000:]}\n{err[-6000:]}"
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{tail}"


def read_log(path: str) -> list[Any]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
