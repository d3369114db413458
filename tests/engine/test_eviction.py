"""Next-use eviction in real multi-process runs: 2 ranks x 2 DataLoader workers on one node
sharing a tight cache, against S3 through the fault proxy (which counts every byte served);
the ranks keep in lockstep through a gloo barrier per batch, as data-parallel training does.

Each epoch is one launch of both ranks (``evict_job.py``) on the same cache directory, so the
proxy's counters between launches are that epoch's downloads. Checked: exact epochs, the limit
never exceeded (sampled under the cache lock), downloaded bytes within the range of
``astream.plan.simulate`` (below) and the high-water within 5% of it, and next-use against LRU.

Downloaded bytes are checked against the plan's *range* over ``INTERLEAVINGS`` seeded
interleavings of the four consumers with their prefetches (``simulate(interleavings=...)``,
docs/plan.md), within ``TOL`` of its ends: which consumer's demand or prefetch takes the last
free room first is timing, and moves an epoch by several shards (measured, 2026-12-02: 6-shard
LRU epoch 0 from 251,363 to 276,220 B over 8 runs, the fixed-interleaving plan 246,400 B).
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

import pytest

from astream.plan import simulate
from astream.storage.sync import upload

from .conftest import write_dataset

JOB = os.path.join(os.path.dirname(__file__), "evict_job.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
BATCH = 8
BLOCK = 200  # shuffle blocks of ~3 shards: a window of the order touches few shards
N = 3000  # samples, in ~42 shards of ~5 KB
INTERLEAVINGS = 32  # seeded interleavings the plan's range is taken over
TOL = 0.03  # measured bytes within the planned range, widened by this share at each end


def _env(rank: int, port: str) -> dict[str, str]:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(RANK=str(rank), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", LOCAL_RANK=str(rank))
    return env


class Sampler:
    """Bytes under the cache directory, sampled under the cache lock (a consistent view)."""

    def __init__(self, local: str) -> None:
        self.local = local
        self.peak = 0
        self.samples = 0
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
                    if e.is_file() and e.name != "index.json":
                        try:
                            total += e.stat().st_size
                        except FileNotFoundError:
                            pass
            finally:
                os.close(fd)
            self.peak = max(self.peak, total)
            self.samples += 1
            time.sleep(0.002)

    def __enter__(self) -> Sampler:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _shard_bytes(proxy: Any) -> int:
    for _ in range(100):
        try:
            return sum(n for q, n in list(proxy.stats.bytes.items()) if "/shard." in q)
        except RuntimeError:  # the proxy thread added a key while we copied
            continue
    raise AssertionError("proxy counters kept changing")


def _shard_gets(proxy: Any) -> int:
    return sum(1 for q, _r in list(proxy.stats.ranges) if "/shard." in q)


def _epoch(url: str, local: str, out: str, epoch: int, limit: int, policy: str, proxy: Any):
    proxy.reset_stats()
    cmd = [sys.executable, JOB, "--remote", url, "--cache-dir", local, "--out", out,
           "--epoch", str(epoch), "--batch", str(BATCH), "--workers", "2",
           "--cache-limit", str(limit), "--cache-policy", policy, "--block", str(BLOCK),
           "--endpoint", proxy.url, "--sync"]  # fmt: skip
    with socket.create_server(("127.0.0.1", 0)) as free:
        port = str(free.getsockname()[1])
    with Sampler(local) as sampler:
        procs = [subprocess.Popen(cmd, env=_env(r, port)) for r in range(2)]
        for p in procs:
            assert p.wait(timeout=240) == 0
    got = []
    for r in range(2):
        with open(f"{out}.{r}") as f:
            got += [x for line in f if line.strip() for x in json.loads(line)]
    return sorted(got), _shard_bytes(proxy), sampler, _shard_gets(proxy)


@pytest.fixture(scope="module")
def evict_src(tmp_path_factory: pytest.TempPathFactory, s3_bucket: str) -> tuple[str, str, int]:
    src = str(tmp_path_factory.mktemp("evict") / "src")
    write_dataset(src, N, size_limit=5_000)
    url = f"{s3_bucket}/evict-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    biggest = max(os.path.getsize(os.path.join(src, n)) for n in os.listdir(src) if "shard" in n)
    return src, url, biggest


@pytest.mark.parametrize(
    "shards",
    # tight; half the dataset. Both slow for their cost, not their reliability: four two-rank
    # launches take 40-90 s on the shared 2-core machine (10 of 10 runs of the tight case
    # passed against the planned range, 2026-12-02, docs/results/plan_eviction_runs.jsonl)
    [pytest.param(6, marks=pytest.mark.slow), pytest.param(21, marks=pytest.mark.slow)],
)
def test_downloads_match_the_plan_and_beat_lru(
    evict_src: tuple[str, str, int], s3_server: Any, make_proxy: Any, tmp_path: Any, shards: int
) -> None:
    src, url, biggest = evict_src
    limit = shards * biggest
    proxy = make_proxy(s3_server.url)
    plans = {
        r.policy: r
        for r in simulate(
            src,
            batch_size=BATCH,
            ranks_per_node=2,
            workers=2,
            epochs=2,
            cache_limit=limit,
            cache_policy=("next_use", "lru"),
            shuffles=["astream"],
            shuffle_block_size=BLOCK,
            interleavings=INTERLEAVINGS,
        )
    }
    measured: dict[str, list[int]] = {}
    extra: dict[str, dict[str, list[int]]] = {}
    for policy in ("next_use", "lru"):
        local = str(tmp_path / policy)
        measured[policy] = []
        extra[policy] = {"measured_downloads": [], "measured_peak": []}
        for epoch in range(2):
            prefix = str(tmp_path / "o")
            got, nbytes, sampler, gets = _epoch(url, local, prefix, epoch, limit, policy, proxy)
            assert got == list(range(N))  # exact epochs, whatever the evictions
            assert sampler.samples > 0 and sampler.peak <= limit, (sampler.peak, limit)
            plan = plans[policy]
            span = plan.span("bytes", epoch)
            assert span is not None
            lo, _, hi = span
            assert lo * (1 - TOL) <= nbytes <= hi * (1 + TOL), (policy, epoch, nbytes, span)
            hw = plan.total("high_water", epoch)
            assert sampler.peak <= hw * 1.05, (policy, epoch, sampler.peak, hw)
            measured[policy].append(nbytes)
            extra[policy]["measured_downloads"].append(gets)
            extra[policy]["measured_peak"].append(sampler.peak)
    # the second epoch under next-use downloads less than under LRU (which evicts what the
    # reshuffled order needs next), as the plan says
    assert plans["next_use"].total("bytes", 1) < plans["lru"].total("bytes", 1)
    assert plans["next_use"].span("bytes", 1)[1] < plans["lru"].span("bytes", 1)[1]  # medians
    assert measured["next_use"][1] < measured["lru"][1], measured
    out = os.environ.get("ASTREAM_EVICT_RESULTS")  # docs/results/plan.md's table: raw figures
    if out:
        with open(out, "a") as f:
            for policy in ("next_use", "lru"):
                row = {
                    "cache_shards": shards,
                    "cache_limit": limit,
                    "policy": policy,
                    "measured_bytes": measured[policy],
                    "planned_bytes": [plans[policy].total("bytes", e) for e in range(2)],
                    "planned_bytes_range": [plans[policy].span("bytes", e) for e in range(2)],
                    **extra[policy],
                    "planned_downloads": [plans[policy].total("downloads", e) for e in range(2)],
                    "planned_high_water": [plans[policy].total("high_water", e) for e in range(2)],
                    "dataset_bytes": sum(
                        os.path.getsize(os.path.join(src, n))
                        for n in os.listdir(src)
                        if "shard" in n
                    ),
                }
                f.write(json.dumps(row) + "\n")
