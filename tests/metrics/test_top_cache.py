"""``astream top``'s cache line: the bytes really in the job's cache directories.

The job's own record rescans the cache only every ``Metrics.cache_scan_every`` seconds, so a job
that has just downloaded its shards still reports what its first scan found (0 B). ``top``
counts the directories itself, at each frame.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

from astream import StreamingDataset
from astream.cli import main
from astream.cli.common import human_bytes
from astream.metrics import Metrics


def _shard_bytes(local: str) -> int:
    return sum(
        os.path.getsize(os.path.join(local, n)) for n in os.listdir(local) if n.startswith("shard.")
    )


def _cache_line(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["top", "--once", "--pid", str(os.getpid())]) == 0
    lines = capsys.readouterr().out.splitlines()
    found = [ln for ln in lines if ln.startswith("  cache ")]
    assert len(found) == 1, lines
    return found[0]


@pytest.mark.parametrize("limit", [None, 10 << 20])
def test_top_shows_the_bytes_in_the_cache(
    http_ds: Any, http_server: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str],
    limit: int | None,
) -> None:  # fmt: skip
    name, nbytes = http_ds(300)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(
        remote=f"{http_server.url}/{name}", local=local, batch_size=10, cache_limit=limit
    )
    with Metrics(ds, interval=0.05) as m:
        m.cache_scan_every = 3600.0  # the job's own figure: its first scan, before any read
        got = sum(1 for _ in ds)
        assert got == 300
        assert _shard_bytes(local) == nbytes
        real = ds.engine.space.usage()
        assert real >= nbytes
        tail = " (no limit)" if limit is None else f" of {human_bytes(limit)} limit"
        assert _cache_line(capsys) == f"  cache    {human_bytes(real)}{tail}"


def test_top_falls_back_to_the_jobs_figure(
    http_ds: Any, http_server: Any, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Directories ``top`` cannot list: the job's own (last scanned) figure is shown."""
    name, _ = http_ds(100)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=f"{http_server.url}/{name}", local=local, batch_size=10)
    with Metrics(ds, interval=0.05) as m:
        assert sum(1 for _ in ds) == 100
        m.cache_scan_every = 0.0  # the next publish scans the cache ...
        time.sleep(0.5)
        m.cache_scan_every = 3600.0  # ... and the later ones keep that figure
        time.sleep(0.2)
        want = m.main_record()["cache"]["bytes"]
        assert want == ds.engine.space.usage() > 0
        shutil.rmtree(local)
        assert _cache_line(capsys) == f"  cache    {human_bytes(want)} (no limit)"
