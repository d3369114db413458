"""The planner against real runs: what ``astream.plan.simulate`` predicts, measured.

A real run: 2 ranks x 2 DataLoader workers on one node (``tests/engine/evict_job.py``, one
process per rank, a gloo barrier per batch as in data-parallel training, a sleep of ``STEP_MS``
per batch as the step's compute), a tight ``cache_limit``, S3 (moto) behind the FaultProxy with
a per-request latency and a bandwidth cap. Measured: shard bytes served by the proxy, the cache's
peak bytes (sampled under the cache lock), the wait for the first batch and the share of the
epoch spent waiting for later batches. Predicted: the same figures from the index alone.

Tolerances (docs/results/plan.md, "Validation"):

- bytes: within the plan's range over ``INTERLEAVINGS`` seeded interleavings of the consumers
  and their prefetches (``simulate(interleavings=...)``), widened by ``TOL`` at each end: which
  consumer takes the last free room first is timing (docs/plan.md, "Interleavings");
- cache high-water: within 5% (the issue's bar);
- stall share: within 0.12 absolute, in a bandwidth-bound run (the epoch's bytes take ~4.7 s on
  the link, its compute 0.75 s): the share is mostly transfer time, which the model has; what
  it leaves out -- decoding, the hop from worker to main process, the barrier, a shared 2-core
  machine -- adds waiting of the same kind, and the tolerance covers it. The model's epoch
  starts with its own first batch, without the run's start-up, so the measured one is counted
  the same way (the measured first wait swapped for the model's);
- time to first batch, a prediction: the model's opening (every worker's first downloads --
  its first batch and its prefetch window, as far as the cache has room -- share the link) is
  compared with the measured wait for the data: from the first shard GET at the proxy to the
  moment the last rank had its first batch, so the run's start-up (worker processes, plan
  walk) is left out, in the same launch. Asserted:
  ``FIRST_LOW x alone <= measured <= FIRST_HIGH x planned + FIRST_SLACK``. How the opening
  shares the link is a race: step 0's requests go first, and when a worker starts late its
  prefetches do not share the link with them at all, so step 0's shards can come in alone --
  the plan's ``first_batch_alone_s`` (one latency plus step 0's bytes over the bandwidth: the
  physical minimum; 0.8x of it for the proxy's rate limiter and the 2 ms polls; measured
  0.896 s against 0.794 s alone and 1.519 s planned, 2026-12-02). 1.25x planned and 1 s above:
  the first GET comes from the first worker up; on a loaded 2-core machine the other three
  start up to a second later.
  The ``slow`` test runs the same check at a quarter of the bandwidth (the data takes ~4-6 s
  there, so the slack weighs less).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import numpy as np
import pytest

from astream import MDSWriter
from astream.plan import simulate
from astream.storage.sync import upload

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOB = os.path.join(ROOT, "tests", "engine", "evict_job.py")
BATCH = 8
BLOCK = 200
STEP_MS = 10.0
LATENCY = 0.05  # s per request
BANDWIDTH = 20_000  # bytes/s for the whole proxy: ~4.7 s for the epoch's bytes
CACHE_SHARDS = 6
INTERLEAVINGS = 32  # seeded interleavings the planned bytes' range is taken over
TOL = 0.03  # measured bytes within that range, widened by this share at each end
# first batch: FIRST_LOW x alone <= measured wait for the data <= FIRST_HIGH x planned + SLACK
FIRST_LOW, FIRST_HIGH, FIRST_SLACK = 0.8, 1.25, 1.0


class Peak:
    """Peak bytes under the cache directory (``index.json`` excluded), under the cache lock."""

    def __init__(self, local: str) -> None:
        self.local = local
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        lock = os.path.join(self.local, ".astream", "cache.lock")
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        while not self._stop.is_set():
            fd = os.open(lock, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                total = 0
                for e in os.scandir(self.local):
                    if e.name != "index.json" and e.is_file():
                        try:
                            total += e.stat().st_size
                        except FileNotFoundError:
                            pass
            finally:
                os.close(fd)
            self.peak = max(self.peak, total)
            time.sleep(0.002)

    def __enter__(self) -> Peak:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


class FirstGet:
    """``time.monotonic()`` when the first shard GET reached the proxy (polled every 2 ms)."""

    def __init__(self, proxy: Any) -> None:
        self.proxy = proxy
        self.at: float | None = None
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set() and self.at is None:
            if any("/shard." in q for q, _r in list(self.proxy.stats.ranges)):
                self.at = time.monotonic()
                return
            time.sleep(0.002)

    def __enter__(self) -> FirstGet:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _data_wait(runs: list[Any], first_get: FirstGet) -> float:
    """From the first shard GET at the proxy to the moment the last rank had its first batch:
    the first batch's wait without the run's start-up (worker processes, plan walk)."""
    assert first_get.at is not None
    return max(t["iter_monotonic"] + t["first_batch_s"] for t in runs) - first_get.at


def _launch(url: str, local: str, out: str, limit: int, endpoint: str, *extra: str) -> list[Any]:
    """Both ranks of one epoch-0 run; their timing records."""
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = str(free.getsockname()[1])
    cmd = [sys.executable, JOB, "--remote", url, "--cache-dir", local, "--out", out,
           "--epoch", "0", "--batch", str(BATCH), "--workers", "2", "--cache-limit", str(limit),
           "--block", str(BLOCK), "--endpoint", endpoint, "--sync", *extra]  # fmt: skip
    procs = []
    for r in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r),
                   WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", LOCAL_RANK=str(r))  # fmt: skip
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        procs.append(subprocess.Popen(cmd, env=env))
    for p in procs:
        assert p.wait(timeout=240) == 0
    timings = []
    for r in range(2):
        with open(f"{out}.{r}.timing.json") as f:
            timings.append(json.load(f))
    return timings


def _shard_bytes(proxy: Any) -> int:
    for _ in range(100):
        try:
            return sum(n for q, n in list(proxy.stats.bytes.items()) if "/shard." in q)
        except RuntimeError:  # the proxy thread added a key while we copied
            continue
    raise AssertionError("proxy counters kept changing")


@pytest.fixture(scope="module")
def small_src(tmp_path_factory: pytest.TempPathFactory, s3_bucket: str) -> tuple[str, str, int]:
    src = str(tmp_path_factory.mktemp("validation") / "src")
    rng = np.random.default_rng(7)
    with MDSWriter(out=src, columns={"label": "int", "payload": "bytes"}, size_limit=5_000) as w:
        for i in range(1200):
            w.write({"label": i, "payload": rng.bytes(int(rng.integers(40, 80)))})
    url = f"{s3_bucket}/validation-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    biggest = max(os.path.getsize(os.path.join(src, n)) for n in os.listdir(src) if "shard" in n)
    return src, url, biggest


def _plan(src: str, limit: int, bandwidth: float) -> Any:
    (plan,) = simulate(
        src,
        batch_size=BATCH,
        ranks_per_node=2,
        workers=2,
        cache_limit=limit,
        cache_policy="next_use",
        shuffles=["astream"],
        shuffle_block_size=BLOCK,
        bandwidth_mbps=bandwidth * 8 / 1e6,
        latency_ms=LATENCY * 1e3,
        step_ms=STEP_MS,
        interleavings=INTERLEAVINGS,
    )
    (f,) = plan.epochs
    assert f.first_batch_s is not None and f.stall_share is not None
    assert f.first_batch_alone_s is not None
    return f


def _record(figures: dict[str, Any]) -> None:
    out = os.environ.get("ASTREAM_VALIDATION_RESULTS")  # docs/results/plan.md's "Validation": raw
    if out:
        with open(out, "a") as fh:
            fh.write(json.dumps(figures) + "\n")


def test_plan_matches_a_shaped_real_run(
    small_src: tuple[str, str, int], s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """Bytes within the planned range, high-water within 5%, stall share within 0.12, the
    first batch's wait for data within the stated tolerance (module docstring); one launch."""
    src, url, biggest = small_src
    limit = CACHE_SHARDS * biggest
    proxy = make_proxy(s3_server.url, latency=LATENCY, bandwidth=BANDWIDTH)
    local = str(tmp_path / "cache")
    with Peak(local) as peak, FirstGet(proxy) as first_get:
        runs = _launch(url, local, str(tmp_path / "o"), limit, proxy.url,
                       "--step-ms", str(STEP_MS))  # fmt: skip
    f = _plan(src, limit, BANDWIDTH)
    nbytes = _shard_bytes(proxy)
    ttfb = max(t["first_batch_s"] for t in runs)
    data = _data_wait(runs, first_get)
    waits = max(t["later_waits_s"] for t in runs)
    seconds = max(t["seconds"] for t in runs)
    # the model's epoch starts with its own first batch, without the run's start-up: the
    # measured epoch is counted the same way (the measured first wait swapped for the model's)
    stall = waits / (seconds - ttfb + f.first_batch_s)
    figures = {
        "test": "shaped_run", "cache_limit": limit, "latency_s": LATENCY,
        "bandwidth_Bps": BANDWIDTH, "step_ms": STEP_MS,
        "bytes": [nbytes, f.bytes], "bytes_range": f.bytes_range,
        "high_water": [peak.peak, f.high_water],
        "first_batch_s": [round(ttfb, 3), round(f.first_batch_s, 3)],
        "first_batch_data_s": [round(data, 3), round(f.first_batch_s, 3)],
        "first_batch_alone_s": round(f.first_batch_alone_s, 3),
        "stall_share": [round(stall, 3), round(f.stall_share, 3)],
        "later_waits_s": round(waits, 3), "epoch_s": round(seconds, 3),
    }  # fmt: skip
    print("measured, planned:", figures)
    _record(figures)
    assert f.bytes_range is not None
    lo, _, hi = f.bytes_range
    assert lo * (1 - TOL) <= nbytes <= hi * (1 + TOL), figures
    assert abs(peak.peak - f.high_water) <= 0.05 * f.high_water, figures
    _check_first_batch(data, f, figures)
    assert abs(stall - f.stall_share) <= 0.12, figures


@pytest.mark.slow
def test_first_batch_at_a_slower_link(
    small_src: tuple[str, str, int], s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    """Time to first batch where the data takes seconds (a quarter of the default test's
    bandwidth, one batch): the same tolerance, which the start-up noise then weighs less in."""
    src, url, biggest = small_src
    limit = CACHE_SHARDS * biggest
    slow_bw = BANDWIDTH // 4
    proxy = make_proxy(s3_server.url, latency=LATENCY, bandwidth=slow_bw)
    with FirstGet(proxy) as first_get:
        runs = _launch(url, str(tmp_path / "c1"), str(tmp_path / "o"), limit, proxy.url,
                       "--max-batches", "1")  # fmt: skip
    f = _plan(src, limit, slow_bw)
    ttfb = max(t["first_batch_s"] for t in runs)
    data = _data_wait(runs, first_get)
    figures = {
        "test": "first_batch", "cache_limit": limit, "latency_s": LATENCY,
        "bandwidth_Bps": slow_bw,
        "first_batch_s": [round(ttfb, 3), round(f.first_batch_s, 3)],
        "first_batch_data_s": [round(data, 3), round(f.first_batch_s, 3)],
        "first_batch_alone_s": round(f.first_batch_alone_s, 3),
    }  # fmt: skip
    print("measured, planned:", figures)
    _record(figures)
    _check_first_batch(data, f, figures)


def _check_first_batch(data: float, f: Any, figures: dict[str, Any]) -> None:
    """The measured wait for the data (start-up taken out) within the stated tolerance."""
    alone, planned = f.first_batch_alone_s, f.first_batch_s
    assert FIRST_LOW * alone <= data <= FIRST_HIGH * planned + FIRST_SLACK, figures
