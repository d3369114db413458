"""Real torchrun jobs over a Parquet table on the S3 emulator: 1 rank and 2 ranks, each with 2
DataLoader worker processes, deliver the same global batches as one process (an exact epoch),
and a job stopped on 2 ranks resumes exactly on 1 rank (another world shape)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.storage.sync import upload

JOB = os.path.join(os.path.dirname(__file__), "pq_job.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _torchrun(nproc: int, url: str, cache: str, out: str, batch: int, *extra: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", JOB, "--remote", url, "--cache-dir", cache,
           "--out", out, "--batch", str(batch), *extra]  # fmt: skip
    r = subprocess.run(cmd, env=env, timeout=300, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    for rank in range(nproc):
        with open(f"{out}.{rank}.world") as f:
            assert f.read() == str(nproc)


def _global(out: str, nproc: int) -> list[list[int]]:
    per = []
    for rank in range(nproc):
        with open(f"{out}.{rank}") as f:
            per.append([json.loads(line) for line in f if line.strip()])
    assert len({len(p) for p in per}) == 1
    return [sorted(x for p in per for x in p[j]) for j in range(len(per[0]))]


def _setup(pq_table: Any, s3_bucket: str, tmp_path: Any) -> tuple[str, list[list[int]]]:
    """The table on S3, and the global batches of 16 that one process reads from it."""
    root, _ = pq_table
    url = f"{s3_bucket}/pq-mp-{uuid.uuid4().hex[:8]}"
    upload(root, url)
    ds = StreamingDataset(remote=url, local=str(tmp_path / "single"), format="parquet",
                          columns=["label"], batch_size=16, shuffle=True,
                          num_canonical_nodes=2)  # fmt: skip
    single = [sorted(int(s["label"]) for s in b) for b in
              StreamingDataLoader(ds, batch_size=16, collate_fn=lambda b: b)]  # fmt: skip
    assert sorted(x for b in single for x in b) == list(range(170))
    return url, single


def test_torchrun_two_ranks_stop_and_resume_on_one_rank(
    pq_table: Any, s3_bucket: str, tmp_path: Any
) -> None:
    """2 ranks x 2 workers stopped after 4 global batches; the rest on 1 rank x 2 workers."""
    url, single = _setup(pq_table, s3_bucket, tmp_path)
    part = str(tmp_path / "part")
    _torchrun(2, url, str(tmp_path / "c2"), part, 8, "--stop-after", "4")
    assert _global(part, 2) == single[:4]
    rest = str(tmp_path / "rest")
    _torchrun(1, url, str(tmp_path / "c1"), rest, 16, "--resume", f"{part}.state")
    assert _global(rest, 1) == single[4:]


@pytest.mark.slow
def test_torchrun_exact_epochs_one_and_two_ranks(
    pq_table: Any, s3_bucket: str, tmp_path: Any
) -> None:
    """Whole epochs: 1 rank x 2 workers and 2 ranks x 2 workers equal one process."""
    url, single = _setup(pq_table, s3_bucket, tmp_path)
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    _torchrun(1, url, str(tmp_path / "c1"), one, 16)
    _torchrun(2, url, str(tmp_path / "c2"), two, 8)
    assert _global(one, 1) == single
    got = _global(two, 2)
    assert got[:-1] == single[:-1] and set(got[-1]) == set(single[-1])  # last: 2-rank padding
    assert sorted(x for b in got for x in b) == list(range(170))
