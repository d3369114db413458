"""``astream top`` and a job killed with SIGKILL: its files stay, the view must skip it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tests.metrics.conftest import write_ds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

JOB = textwrap.dedent(
    """
    import sys, time
    from astream import StreamingDataset
    from astream.metrics import Metrics
    ds = StreamingDataset(local=sys.argv[1], batch_size=10)
    m = Metrics(ds, interval=0.1)
    n = sum(1 for _ in ds)
    print("READY", n, flush=True)
    time.sleep(600)
    """
)


def _top(runtime_dir: str) -> str:
    env = dict(os.environ, ASTREAM_RUNTIME_DIR=runtime_dir)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run(
        [sys.executable, "-m", "astream", "top", "--once"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_a_killed_job_is_not_shown(tmp_path, runtime_dir):
    write_ds(str(tmp_path / "d"), 50)
    env = dict(os.environ, ASTREAM_RUNTIME_DIR=runtime_dir)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path / "d")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        assert job.stdout.readline().split() == ["READY", "50"]
        assert f"job pid {job.pid}" in _top(runtime_dir)
    finally:
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
    jobs_root = os.path.join(runtime_dir, "jobs")
    assert os.listdir(jobs_root), "the killed job's files should still be there"
    deadline = time.monotonic() + 10
    while "no running job found" not in (text := _top(runtime_dir)):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)
    assert os.listdir(jobs_root)  # top only reads; the next Metrics prunes them
