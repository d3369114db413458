"""The cache figure of ``astream_cache_bytes`` (Prometheus; the OpenTelemetry gauge reads the same
families) and of ``astream top`` is the bytes on disk under the cache, at any moment: during an
epoch read by real DataLoader workers it lies between two walks of the directory taken around
the scrape (give or take one shard in flight), and right after the epoch it is exactly what is
on disk -- never the 0 B of the job's first scan, never a figure some seconds old. The record
published every ``interval`` (what ``top`` falls back on) rescans a cache of many files at
most once per ``SCAN_SHARE`` times a scan's own duration; an exporter's read scans now."""

from __future__ import annotations

import itertools
import os
import time
from typing import Any

import pytest

from astream import StreamingDataLoader, StreamingDataset
from astream.cli import main
from astream.cli.common import human_bytes
from astream.metrics import Metrics
from astream.runtime.cache import TMP_MARK

from .test_exporter import scrape, total


def scrape_text(m: Metrics) -> Any:
    """The families an exporter would ship, as scrape() parses them (no endpoint needed)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {
        (x.name, tuple(sorted(x.labels.items()))): x.value
        for fam in text_string_to_metric_families(m.prometheus_text())
        for x in fam.samples
    }


def on_disk(local: str) -> int:
    """Bytes under ``local`` as the cache counts them (docs/caching.md): every file but the
    streams' ``index.json`` and what lies under ``.astream/``."""
    n = 0
    for root, dirs, files in os.walk(local):
        dirs[:] = [d for d in dirs if d != ".astream"]
        listed = set(files)
        for f in files:
            if f != "index.json":
                try:
                    n += os.stat(os.path.join(root, f)).st_size
                except FileNotFoundError:
                    # a download renamed into place since the listing, which has not its new
                    # name: count the file under that name (a deleted one is gone)
                    final = f[: f.rfind(TMP_MARK)] if f.rfind(TMP_MARK) > 0 else None
                    if final is not None and final not in listed:
                        listed.add(final)
                        try:
                            n += os.stat(os.path.join(root, final)).st_size
                        except FileNotFoundError:
                            pass
    return n


def _labels(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def _top_bytes(capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["top", "--once", "--pid", str(os.getpid())]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("  cache ")]
    assert len(line) == 1
    return line[0]


def test_gauge_and_top_show_the_bytes_on_disk(
    http_ds: Any, http_root: str, http_server: Any, tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    name, nbytes = http_ds(800)
    local = str(tmp_path / "cache")
    src = os.path.join(http_root, name)
    shard = max(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src) if "shard" in f)
    ds = StreamingDataset(remote=f"{http_server.url}/{name}", local=local, batch_size=10)
    with Metrics(ds, prometheus_port=0) as m:  # the defaults: nothing shortened
        loader = StreamingDataLoader(
            ds, batch_size=10, num_workers=2, collate_fn=_labels, worker_init_fn=m.worker_init_fn
        )
        labels: list[int] = []
        seen: list[tuple[int, float, int]] = []
        for i, batch in enumerate(loader):
            labels += batch
            if i % 8 == 4:  # mid-epoch, workers downloading beside us
                before = on_disk(local)
                gauge = total(scrape(str(m.url)), "astream_cache_bytes")
                after = on_disk(local)
                seen.append((before, gauge, after))
        assert sorted(labels) == list(range(800))
        end = total(scrape(str(m.url)), "astream_cache_bytes")
        disk = on_disk(local)
        top_line = _top_bytes(capsys)
    assert len(seen) >= 8
    # two workers: up to two downloads in flight, whose temp files come and go (a download
    # that lost a race for its shard removes its own) between the walks and the scan
    for before, gauge, after in seen:
        assert before - 2 * shard <= gauge <= after + 2 * shard, (before, gauge, after)
    assert any(g > 0 for _, g, _ in seen)
    assert disk >= nbytes  # every shard is cached (no limit)
    assert end == disk
    assert top_line == f"  cache    {human_bytes(disk)} (no limit)"


def test_a_large_cache_is_rescanned_at_a_bounded_rate(
    http_ds: Any, http_server: Any, tmp_path: Any
) -> None:
    """However often the published figure is read, a scan waits ``SCAN_SHARE`` times the
    last scan's duration; a file added is in it once that wait is over, and at once in an
    exporter's read."""
    name, _ = http_ds(100)
    local = str(tmp_path / "cache")
    ds = StreamingDataset(remote=f"{http_server.url}/{name}", local=local, batch_size=10)
    assert sum(1 for _ in ds) == 100
    extra = os.path.join(local, "other")  # files the cache counts (another dataset's, say)
    os.makedirs(extra)
    for k in range(1500):
        with open(os.path.join(extra, f"f{k}"), "wb") as f:
            f.write(b"x" * (k % 7))
    space = ds.engine.space
    scans: list[tuple[float, float]] = []
    real_usage = space.usage

    def timed() -> int:  # the real scan, its start and end noted
        t0 = time.monotonic()
        try:
            return real_usage()
        finally:
            scans.append((t0, time.monotonic()))

    space.usage = timed  # type: ignore[method-assign]
    with Metrics(ds, announce=False) as m:
        deadline = time.monotonic() + 20
        reads = 0
        while len(scans) < 4 and time.monotonic() < deadline:
            assert m.main_record()["cache"]["bytes"] > 0
            reads += 1
        assert len(scans) >= 4 and reads > 10 * len(scans)  # most reads reuse the last scan
        for (s0, e0), (s1, _) in itertools.pairwise(scans):
            assert s1 - s0 >= m.SCAN_SHARE * (e0 - s0), (s0, e0, s1)
        with open(os.path.join(extra, "now"), "wb") as f:
            f.write(b"z" * 777)
        want = on_disk(local)
        assert m.main_record(fresh=True)["cache"]["bytes"] == want
        assert total(scrape_text(m), "astream_cache_bytes") == want
        with open(os.path.join(extra, "late"), "wb") as f:
            f.write(b"y" * 12345)
        want = on_disk(local)
        got = m.main_record()["cache"]["bytes"]
        deadline = time.monotonic() + 10
        while got != want and time.monotonic() < deadline:
            time.sleep(0.001)
            got = m.main_record()["cache"]["bytes"]
        assert got == want
        took = max(e - s for s, e in scans)
        assert time.monotonic() < deadline  # seen within a few scans' time, not 10 s
        assert took * m.SCAN_SHARE < 5.0
