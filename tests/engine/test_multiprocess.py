"""Real processes: torchrun ranks, two "nodes", a tight shared cache, kill -9 mid-download."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from astream import StreamingDataLoader, StreamingDataset
from astream.storage.sync import upload

from .conftest import write_dataset

JOB = os.path.join(os.path.dirname(__file__), "epoch_job.py")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _job(url: str, cache: str, out: str, *extra: str, workers: int = 2) -> list[str]:
    """The command line of one epoch_job run (batch 8, shuffled)."""
    return [sys.executable, JOB, "--remote", url, "--cache-dir", cache, "--out", out,
            "--batch", "8", "--workers", str(workers), "--shuffle", *extra]  # fmt: skip


def _read(path: str) -> list[list[int]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _single_process_batches(url: str, local: str, bs: int) -> list[list[int]]:
    # astream's own order, as epoch_job.py runs it: the same on any World
    ds = StreamingDataset(
        remote=url, local=local, batch_size=bs, shuffle=True, shuffle_algo="astream"
    )
    loader = StreamingDataLoader(ds, batch_size=bs, collate_fn=lambda b: [s["label"] for s in b])
    return [b for b in loader]


def test_torchrun_two_ranks_and_two_nodes(s3_dataset: Any, tmp_path: Any) -> None:
    url, _ = s3_dataset
    single = _single_process_batches(url, str(tmp_path / "single"), 16)  # global batch 16
    # one node, two ranks, gloo process group initialised by the job (never by astream)
    out = str(tmp_path / "tr")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd = launcher + _job(url, str(tmp_path / "n0"), out, "--dist")[1:]
    r = subprocess.run(cmd, env=_env(), timeout=240, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    ranks = [_read(f"{out}.{r}") for r in range(2)]
    with open(f"{out}.0.world") as f:
        assert f.read() == "2"
    together = [sorted(ranks[0][j] + ranks[1][j]) for j in range(len(ranks[0]))]
    assert together == [sorted(b) for b in single]
    # two "nodes": two independent launches on loopback, each with its own local dir
    out2 = str(tmp_path / "nodes")
    procs = []
    for node in range(2):
        env = _env(RANK=str(node), WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0")
        procs.append(
            subprocess.Popen(
                _job(url, str(tmp_path / f"node{node}"), out2, workers=1),
                env=env,
            )
        )
    for p in procs:
        assert p.wait(timeout=240) == 0
    nodes = [_read(f"{out2}.{r}") for r in range(2)]
    together = [sorted(nodes[0][j] + nodes[1][j]) for j in range(len(nodes[0]))]
    assert together == [sorted(b) for b in single]
    flat = [x for b in together for x in b]
    assert sorted(flat) == list(range(1000))  # 2 ranks: 500 each, no padding (was 1008)


def test_tight_cache_two_processes_two_workers(s3_bucket: str, tmp_path: Any) -> None:
    src = str(tmp_path / "src")
    write_dataset(src, 2000, size_limit=20_000)
    sizes = [
        os.path.getsize(os.path.join(src, n)) for n in os.listdir(src) if n.startswith("shard")
    ]
    assert len(sizes) >= 8
    limit = 3 * max(sizes)
    url = f"{s3_bucket}/tight-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    local = str(tmp_path / "cache")
    os.makedirs(local)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        # A consistent snapshot: reservations, evictions and renames into the cache happen
        # under the cache lock, so a listing under it is what the processes themselves see.
        nonlocal peak
        lock = os.path.join(local, ".astream", "cache.lock")
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        while not stop.is_set():
            fd = os.open(lock, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                total = 0
                for e in os.scandir(local):
                    if e.is_file() and e.name != "index.json":  # index: not counted (documented)
                        try:
                            total += e.stat().st_size
                        except FileNotFoundError:  # a temporary file deleted since the listing
                            pass
            finally:
                os.close(fd)
            peak = max(peak, total)
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    out = str(tmp_path / "o")
    procs = [
        subprocess.Popen(
            _job(url, local, out, "--cache-limit", str(limit)),
            env=_env(RANK=str(r), WORLD_SIZE="2", LOCAL_WORLD_SIZE="2", LOCAL_RANK=str(r)),
        )
        for r in range(2)
    ]
    try:
        for p in procs:
            assert p.wait(timeout=240) == 0
    finally:
        stop.set()
        t.join()
    got = [x for r in range(2) for b in _read(f"{out}.{r}") for x in b]
    assert sorted(got) == list(range(2000))
    assert 0 < peak <= limit, (peak, limit)


def _shard_gets(proxy: Any) -> int:
    for _ in range(100):
        try:
            return sum(n for q, n in list(proxy.stats.requests.items()) if "/shard." in q)
        except RuntimeError:  # the proxy thread added a key while we copied
            continue
    raise AssertionError("proxy counters kept changing")


def test_kill9_during_download_then_rerun(
    s3_dataset: Any, local_dataset: Any, s3_server: Any, make_proxy: Any, tmp_path: Any
) -> None:
    url, _ = s3_dataset
    proxy = make_proxy(s3_server.url, latency=0.05, bandwidth=200_000)
    local = str(tmp_path / "cache")
    out = str(tmp_path / "o")
    for extra in (0.0, 0.1):
        proxy.reset_stats()
        p = subprocess.Popen(
            _job(url, local, out, "--endpoint", proxy.url),
            env=_env(),
            start_new_session=True,
        )
        # not a fixed delay (on a loaded machine it can fall before the first request): wait
        # for the proxy to count the job's first shard GET, then kill mid-download
        deadline = time.monotonic() + 60
        while not _shard_gets(proxy) and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(extra)
        started = _shard_gets(proxy)
        os.killpg(p.pid, signal.SIGKILL)  # the job and its DataLoader workers, mid-download
        p.wait(timeout=30)
        assert started >= 1, "killed before any shard request"
    proxy.configure(latency=0.0, bandwidth=None)
    r = subprocess.run(
        _job(url, local, out, "--endpoint", proxy.url),
        env=_env(),
        timeout=120,
    )
    assert r.returncode == 0
    got = [x for b in _read(f"{out}.0") for x in b]
    assert sorted(got) == list(range(1000))
    assert not [n for n in os.listdir(local) if ".tmp-" in n]
    # every shard in the cache is whole and byte-identical to the source, killed runs or not
    src = local_dataset[0]
    for name in sorted(n for n in os.listdir(src) if n.startswith("shard")):
        with open(os.path.join(local, name), "rb") as a, open(os.path.join(src, name), "rb") as b:
            assert a.read() == b.read(), name
    ds = StreamingDataset(local=local, batch_size=8)
    assert sorted(int(s["label"]) for s in ds) == list(range(1000))
