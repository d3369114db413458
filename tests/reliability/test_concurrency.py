"""Issue 7.5: processes x workers sharing a cache at its minimum limit (never over, sampled under
the cache lock; no deadlock; exact data), two jobs with different datasets sharing one cache
directory, and local-only data that is never evicted."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import uuid
from typing import Any

import pytest

from astream import Stream, StreamingDataset
from astream.runtime.cache import CacheSpace
from astream.runtime.locks import FileLock
from astream.storage.sync import upload

from .conftest import HERE, check_samples, job_env, shard_names, write_ds
from .test_crashes import read_out

JOB = os.path.join(HERE, "rel_job.py")


def _footprint(src: str) -> int:
    return max(os.path.getsize(os.path.join(src, n)) for n in shard_names(src))


class UsageSampler:
    """Samples a cache's usage while holding its cache.lock, so that no reservation, rename
    or eviction is half-done when we look: each sample is exact."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        space = CacheSpace([self.root], None)
        lock = os.path.join(self.root, ".astream", "cache.lock")
        while not self._stop.wait(0.003):
            with FileLock(lock) as lk:
                lk.exclusive()
                used = space.usage()
            self.peak = max(self.peak, used)
            self.samples += 1

    def __enter__(self) -> UsageSampler:
        os.makedirs(os.path.join(self.root, ".astream"), exist_ok=True)
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _jobs(n: int, url: str, local: str, out: str, workers: int, epochs: int, limit: int) -> None:
    args = ["--remote", url, "--local", local, "--workers", str(workers)]
    args += ["--epochs", str(epochs), "--shuffle", "--batch", "4", "--cache-limit", str(limit)]
    procs = []
    for r in range(n):
        env = job_env(RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n), LOCAL_RANK=str(r))
        with open(f"{out}.{r}.err", "w") as err:
            procs.append(
                subprocess.Popen(
                    [sys.executable, JOB, *args, "--out", f"{out}.{r}"],
                    env=env,
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )
            )
    try:
        for r, p in enumerate(procs):
            rc = p.wait(timeout=240)
            with open(f"{out}.{r}.err") as f:
                assert rc == 0, f"rank {r} failed: {f.read()[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)


def _min_cache(s3_bucket: str, tmp: Any, procs: int, workers: int, epochs: int) -> None:
    src = write_ds(str(tmp / "src"), 480, size_limit=24_000)
    assert len(shard_names(src)) >= 12
    limit = _footprint(src)  # the smallest limit the dataset accepts: one shard at a time
    url = f"{s3_bucket}/minc-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    local = str(tmp / "cache")
    out = str(tmp / "o")
    with UsageSampler(local) as sampler:
        _jobs(procs, url, local, out, workers, epochs, limit)
    for e in range(epochs):
        rows = [row for r in range(procs) for row in read_out(f"{out}.{r}") if row["epoch"] == e]
        assert sorted(i for row in rows for i in row["ids"]) == list(range(480)), f"epoch {e}"
        assert not [i for row in rows for i in row["bad"]]
    print(
        f"\n[min-cache] {procs}x{workers}x{epochs}: peak {sampler.peak} <= limit {limit} "
        f"({sampler.samples} samples)"
    )
    assert sampler.samples > 10
    assert 0 < sampler.peak <= limit


def test_two_processes_two_workers_min_cache_two_epochs(s3_bucket: str, tmp_path: Any) -> None:
    _min_cache(s3_bucket, tmp_path, 2, 2, 2)


@pytest.mark.slow
def test_two_processes_four_workers_min_cache_three_epochs(s3_bucket: str, tmp_path: Any) -> None:
    _min_cache(s3_bucket, tmp_path, 2, 4, 3)


def test_two_jobs_different_datasets_share_one_cache_dir(s3_bucket: str, tmp_path: Any) -> None:
    urls = []
    for k, first in enumerate((0, 100_000)):
        src = write_ds(str(tmp_path / f"src{k}"), 400, size_limit=20_000, first=first)
        urls.append(f"{s3_bucket}/share{k}-{uuid.uuid4().hex[:8]}")
        upload(src, urls[-1])
    shared = str(tmp_path / "shared-cache")
    share_args = ["--workers", "2", "--epochs", "2", "--shuffle", "--cache-limit", "60kb"]
    procs = [
        subprocess.Popen(
            [sys.executable, JOB, "--remote", u, "--out", str(tmp_path / f"o{k}"), *share_args],
            env=job_env(ASTREAM_CACHE_DIR=shared),
        )
        for k, u in enumerate(urls)
    ]
    for p in procs:
        assert p.wait(timeout=240) == 0
    for k, first in enumerate((0, 100_000)):
        rows = read_out(str(tmp_path / f"o{k}"))
        for e in range(2):
            ids = sorted(i for row in rows if row["epoch"] == e for i in row["ids"])
            assert ids == list(range(first, first + 400))
        assert not [i for row in rows for i in row["bad"]]
    assert len(os.listdir(shared)) == 2  # one directory per dataset under the shared root


def _digest(root: str) -> dict[str, str]:
    out = {}
    for n in sorted(os.listdir(root)):
        p = os.path.join(root, n)
        if os.path.isfile(p):
            with open(p, "rb") as f:
                out[n] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_local_only_stream_is_never_evicted(s3_bucket: str, tmp_path: Any) -> None:
    only = write_ds(str(tmp_path / "only"), 300, size_limit=8_000)  # its only copy
    before = _digest(only)
    src = write_ds(str(tmp_path / "src"), 300, size_limit=8_000, first=300)
    url = f"{s3_bucket}/mix-{uuid.uuid4().hex[:8]}"
    upload(src, url)
    local_bytes = sum(os.path.getsize(os.path.join(only, n)) for n in before)
    limit = local_bytes + 2 * _footprint(src)  # room for the local data and two remote shards
    ds = StreamingDataset(
        streams=[Stream(local=only), Stream(remote=url, local=str(tmp_path / "cache"))],
        batch_size=4,
        shuffle=True,
        cache_limit=limit,
    )
    for _ in range(2):
        check_samples(list(ds), range(600))
        assert ds.engine.space.evictions > 0  # the remote stream really was evicted from
    assert _digest(only) == before
