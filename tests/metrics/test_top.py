"""``astream top --once`` against a running job: a separate process that holds a Metrics."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

from tests.metrics.conftest import write_ds

JOB = textwrap.dedent(
    """
    import sys, time
    from astream import StreamingDataset
    from astream.metrics import Metrics
    ds = StreamingDataset(local=sys.argv[1], batch_size=10)
    with Metrics(ds, interval=0.1) as m:
        n = sum(1 for _ in ds)
        time.sleep(0.5)               # let the publisher write the final record
        print("READY", n, flush=True)
        sys.stdin.readline()          # stay alive until the test has looked
    """
)


def _top(runtime_dir: str, *extra: str) -> str:
    env = dict(os.environ, ASTREAM_RUNTIME_DIR=runtime_dir)
    out = subprocess.run(
        [sys.executable, "-m", "astream", "top", "--once", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout


def test_top_once_shows_the_running_job_then_forgets_it(tmp_path, runtime_dir):
    write_ds(str(tmp_path / "d"), 250)
    env = dict(os.environ, ASTREAM_RUNTIME_DIR=runtime_dir)
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path / "d")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert job.stdout is not None
        assert job.stdout.readline().split() == ["READY", "250"]
        deadline = time.monotonic() + 20  # a record is up to `interval` s old: poll for it
        while True:
            text = _top(runtime_dir)
            assert "1 job(s) on this node" in text
            assert f"job pid {job.pid}" in text
            rows = [line.split() for line in text.splitlines()]
            main = next(r for r in rows if r[:1] == ["main"])
            if main[1] == "250" or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert main[1] == "250", text  # samples read by the job's main process
        assert f"job pid {job.pid}" not in _top(runtime_dir, "--pid", str(job.pid + 1))
    finally:
        assert job.stdin is not None
        job.stdin.write("\n")
        job.stdin.close()
        job.wait(timeout=60)
    deadline = time.monotonic() + 10
    while "no running job found" not in (text := _top(runtime_dir)):
        assert time.monotonic() < deadline, text
        time.sleep(0.2)


def test_top_refuses_a_bad_interval(runtime_dir):
    env = dict(os.environ, ASTREAM_RUNTIME_DIR=runtime_dir)
    out = subprocess.run(
        [sys.executable, "-m", "astream", "top", "--interval", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "--interval must be > 0 seconds" in out.stderr


def test_a_killed_job_is_not_shown(tmp_path, runtime_dir):
    """kill -9 leaves the job's files behind; top must skip them (main process dead)."""
    import signal

    write_ds(str(tmp_path / "d"), 50)
    env = dict(os.environ, ASTREAM_RUNTIME_DIR=runtime_dir)
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(tmp_path / "d")],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert job.stdout is not None
    assert job.stdout.readline().split() == ["READY", "50"]
    assert f"job pid {job.pid}" in _top(runtime_dir)
    job.send_signal(signal.SIGKILL)
    job.wait(timeout=60)
    jobs_root = os.path.join(runtime_dir, "jobs")
    assert os.listdir(jobs_root), "the killed job's files should still be there"
    assert "no running job found" in _top(runtime_dir)
