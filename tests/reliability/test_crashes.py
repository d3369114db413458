"""Issue 7.2: kill -9 the main process or one DataLoader worker at random moments (downloads,
zstd decompression, eviction under a tight cache_limit); the next run on the same cache must
complete with exact data. SIGINT stops a job promptly and leaves no process behind."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from astream.runtime.locks import FileLock

from .conftest import HERE, MakeProxy, job_env

JOB = os.path.join(HERE, "rel_job.py")


def read_out(path: str) -> list[dict[str, Any]]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def group_alive(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(pid))
    return alive


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def job(args: list[str], **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, JOB, *args],
        env=job_env(),
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        **kw,
    )


CI_TRIALS = [  # (dataset, cache_limit, workers, victim): every combination kind once
    ("plain", None, 2, "worker"),
    ("zstd", "120kb", 2, "main"),
    ("zstd", None, 0, "main"),
    ("plain", "120kb", 2, "worker"),
    ("zstd", "120kb", 2, "worker"),
]


def run_trials(n: int, seed: int, urls: dict[str, str], proxy: Any, tmp: Any) -> list[str]:
    rng = random.Random(seed)
    log = []
    for t in range(n):
        if n <= len(CI_TRIALS):
            kind, limit, workers, victim = CI_TRIALS[t]
        else:
            kind = rng.choice(["plain", "zstd"])
            limit = rng.choice([None, "120kb"])  # 120 KiB: ~3 shards, constant eviction
            workers = rng.choice([0, 2])
            victim = rng.choice(["main", "worker"]) if workers else "main"
        # half the kills land during start-up downloads, half after the first batch
        early = rng.random() < 0.5
        delay = rng.uniform(0.5, 2.0) if early else rng.uniform(0.0, 0.6)
        local = str(tmp / f"cache-{kind}")  # caches are reused across trials, as in real life
        out = str(tmp / f"out-{t}")
        args = ["--remote", urls[kind], "--local", local, "--endpoint", proxy.url]
        args += ["--workers", str(workers), "--shuffle", "--batch", "8"]
        if limit:
            args += ["--cache-limit", limit]
        p = job([*args, "--out", out + ".killed"])
        if not early:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "READY"
        time.sleep(delay)
        if victim == "worker" and children(p.pid):
            os.kill(rng.choice(children(p.pid)), signal.SIGKILL)
            try:
                p.wait(timeout=60)  # the DataLoader notices its dead worker and fails
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                raise AssertionError(f"trial {t}: job hung after its worker was killed") from None
            os.killpg(p.pid, signal.SIGKILL) if group_alive(p.pid) else None
        else:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)
        consumed = len(read_out(out + ".killed"))
        # the next run on the same cache: complete and exact
        r = job([*args, "--out", out])
        assert r.wait(timeout=120) == 0, f"trial {t}: rerun failed"
        rows = read_out(out)
        ids = sorted(i for row in rows for i in row["ids"])
        assert ids == list(range(1200)), f"trial {t}: ids differ"
        assert not [i for row in rows for i in row["bad"]], f"trial {t}: wrong bytes"
        tmps = [n for n in os.listdir(local) if ".tmp-" in n]
        assert not tmps, f"trial {t}: leftovers {tmps}"
        assert FileLock(os.path.join(local, ".astream", "cache.lock")).try_exclusive()
        log.append(
            f"trial {t}: {kind} limit={limit} workers={workers} kill {victim} at "
            f"{'start' if early else 'first batch'}+{delay:.2f}s ({consumed} batches in) -> rerun "
            "exact"
        )
    return log


def _trials(
    n: int, seed: int, s3_plain: str, s3_zstd: str, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    # slow the wire so that kills land during downloads and decompression, not after
    proxy = make_proxy(s3_server.url, latency=0.01, bandwidth=600_000)
    log = run_trials(n, seed, {"plain": s3_plain, "zstd": s3_zstd}, proxy, tmp_path)
    print("\n" + "\n".join(log))


def test_kill9_trials_ci(
    s3_plain: str, s3_zstd: str, s3_server: Any, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    _trials(5, 11, s3_plain, s3_zstd, s3_server, make_proxy, tmp_path)


@pytest.mark.slow
def test_kill9_trials_full(
    s3_plain: str, s3_zstd: str, s3_server: Any, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    _trials(24, 12345, s3_plain, s3_zstd, s3_server, make_proxy, tmp_path)


@pytest.mark.parametrize("workers", [0, 2])
def test_sigint_stops_promptly_and_leaves_nothing(
    s3_plain: str, s3_server: Any, make_proxy: MakeProxy, tmp_path: Any, workers: int
) -> None:
    proxy = make_proxy(s3_server.url, latency=0.01, bandwidth=300_000)
    p = job(
        [
            "--remote",
            s3_plain,
            "--local",
            str(tmp_path / "c"),
            "--endpoint",
            proxy.url,
            "--workers",
            str(workers),
            "--epochs",
            "5",
            "--out",
            str(tmp_path / "o"),
        ]
    )
    assert p.stdout is not None
    assert p.stdout.readline().strip() == "READY"
    t0 = time.perf_counter()
    os.killpg(p.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    rc = p.wait(timeout=15)
    took = time.perf_counter() - t0
    deadline = time.monotonic() + 5
    while group_alive(p.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    print(f"\n[sigint] workers={workers}: exited rc={rc} after {took:.2f}s")
    assert rc != 0 and took < 10
    assert group_alive(p.pid) == []
