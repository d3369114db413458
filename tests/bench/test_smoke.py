"""CI smoke run of the benchmark harness: tiny scale, astream only, every scenario.

It runs the real command (``python -m benchmarks.run``) in a subprocess, with the real moto
emulator and measuring proxy for the cold scenarios, then checks that the report files exist
and that every headline figure is a finite positive number (every sample delivered; after a
mid-epoch resume, no sample duplicated or missing against an uninterrupted epoch).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("bench")
    out = base / "report"
    cmd = [
        sys.executable, "-m", "benchmarks.run",
        "--scale", "0.002", "--reps", "1", "--libs", "astream",
        "--workloads", "tokens", "--latencies-ms", "0", "--random-n", "20",
        "--scale-shards", "1000", "--scale-samples", "1000000",
        "--work", str(base / "work"), "--out", str(out),
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return out


def _median(results: dict[str, Any], key: str, lib: str, metric: str) -> float:
    status = results["status"][key][lib]
    assert status == "ok", f"{key} {lib}: {status}"
    value = results["figures"][key][lib][metric]
    assert set(value) == {"median", "min", "max", "n"}
    assert value["min"] <= value["median"] <= value["max"]
    return float(value["median"])


POSITIVE = [
    ("write/tokens", "astream", "mb_per_s"),
    ("hot/tokens/w0", "astream", "samples_per_s"),
    ("hot/tokens/w0", "astream", "mb_per_s"),
    ("hot/tokens/w0", "astream", "peak_pss_mb"),
    ("hot/tokens/w2", "astream", "samples_per_s"),
    ("hot/tokens/w2", "astream", "peak_rss_mb"),
    ("cold/tokens/0ms", "astream", "ttfb_s"),
    ("cold/tokens/0ms", "astream", "import_s"),
    ("cold/tokens/0ms", "astream", "samples_per_s"),
    ("cold/tokens/0ms", "astream", "proxy_bytes"),
    ("cold/tokens/0ms", "astream", "proxy_requests"),
    ("resume/tokens", "astream", "resume_to_first_batch_s"),
    ("random/tokens/hot", "astream", "later_item_us"),
    ("random/tokens/cold", "astream", "first_item_s"),
    ("random/tokens/cold", "astream", "first_item_bytes"),
    ("scale/1000", "astream", "index_load_s"),
    ("scale/1000", "astream", "resume_s"),
    ("physical/seqread/tokens", "astream", "mb_per_s"),
    ("physical/s3get/tokens/0ms", "sdk", "mb_per_s"),
    ("physical/s3get/tokens/direct", "sdk", "mb_per_s"),
]


def test_report_files_exist(report: Path) -> None:
    for name in ("results.json", "report.md", "throughput_hot.png", "ttfb_cold.png",
                 "throughput_vs_latency.png"):  # fmt: skip
        path = report / name
        assert path.is_file() and path.stat().st_size > 0, name
    assert (report / "throughput_hot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("key", "lib", "metric"), POSITIVE)
def test_figure_is_finite_and_positive(report: Path, key: str, lib: str, metric: str) -> None:
    results = json.loads((report / "results.json").read_text())
    v = _median(results, key, lib, metric)
    assert math.isfinite(v) and v > 0, (key, lib, metric, v)


def test_epoch_and_resume_are_exact(report: Path) -> None:
    results = json.loads((report / "results.json").read_text())
    n = results["meta"]["samples"]["tokens"]
    batch = results["meta"]["batch_size"]
    for key in ("hot/tokens/w0", "hot/tokens/w2", "cold/tokens/0ms"):
        assert _median(results, key, "astream", "unique") == n, key
        # end-of-epoch padding (documented) stays under one batch per worker
        padding = _median(results, key, "astream", "samples") - n
        assert 0 <= padding < 2 * batch, (key, padding)
    assert _median(results, "resume/tokens", "astream", "duplicates") == 0
    assert _median(results, "resume/tokens", "astream", "missing") == 0


def test_report_markdown_names_every_case(report: Path) -> None:
    md = (report / "report.md").read_text()
    for key in ("write/tokens", "hot/tokens/w0", "hot/tokens/w2", "cold/tokens/0ms",
                "resume/tokens", "random/tokens/hot", "random/tokens/cold", "scale/1000",
                "physical/seqread/tokens"):  # fmt: skip
        assert f"| {key} |" in md, key


def test_each_cold_run_leaves_no_cache_and_the_written_copy_stays(report: Path) -> None:
    """The harness removes a cold run's cache after the run (its dirty pages are then never
    written back during another run) and writes back the dirty pages before each run; the
    write scenario's output, which every reading scenario reads, is kept."""
    work = report.parent / "work"
    assert (work / "data" / "astream" / "tokens" / "index.json").is_file()
    cache = work / "cache"  # one directory per library and workload: <lib>/<workload>
    assert sorted(str(p) for p in cache.glob("*/tokens")) == []
    records = json.loads((report / "results.json").read_text())["records"]
    cold = [r for r in records if r["key"].startswith(("cold/", "random/tokens/cold"))]
    assert len(cold) >= 2
    assert all(r["dirty_mb_before"] >= 0 for r in cold), cold


def test_a_cold_epoch_counts_what_the_server_sent_before_its_first_batch(report: Path) -> None:
    """The proxy's counters are read when the dataset is made and when the first batch is in
    hand: the bytes and requests before the first batch are part of the epoch's, and the
    first batch needed at least its index and its samples."""
    records = json.loads((report / "results.json").read_text())["records"]
    cold = [r for r in records if r["key"] == "cold/tokens/0ms" and r["status"] == "ok"]
    assert cold
    for r in cold:
        assert 0 < r["bytes_before_first_batch"] <= r["proxy_bytes"], r
        assert 2 <= r["requests_before_first_batch"] <= r["proxy_requests"], r
