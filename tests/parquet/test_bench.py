"""Smoke run of benchmarks/bench_parquet.py (slow): tiny scale, the astream sides only, the
real moto emulator and shaping proxy; every sample delivered, every figure finite."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_parquet_smoke(tmp_path: Path) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks.bench_parquet", "--scale", "0.002", "--reps", "1",
           "--sides", "astream-parquet,astream-mds", "--workloads", "tokens", "--latency-ms", "5",
           "--index-files", "30", "--work", str(tmp_path / "work"), "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    samples = summary["layout"]["workloads"]["tokens"]["samples"]
    for side in ("astream-parquet", "astream-mds"):
        row = summary["epoch"]["tokens"][side]
        assert row["errors"] == [] and row["unique"] == [samples]
        for k in ("ttfb_s", "mb_per_s", "hot_mb_per_s", "proxy_bytes"):
            assert math.isfinite(row[k]) and row[k] > 0, (side, k, row[k])
    assert summary["index"]["files"] == 30 and summary["index"]["errors"] == []
    assert summary["index"]["warm_s"] > 0 and summary["index"]["cold_s"] > 0
    records = json.loads((out / "results.json").read_text())["records"]
    assert [r["files"] for r in records if r["case"] == "index"] == [30]


@pytest.mark.slow
def test_bench_parquet_index_stores_smoke(tmp_path: Path) -> None:
    """bench_parquet_index over fake-gcs-server and Azurite, each behind its own proxy: every
    side ok, and the proxy saw exactly the requests a footer index makes (the listing page and
    one GET per file cold, one page warm; the SDK floor the same; the published path
    HEAD + GET cold, HEAD warm -- Azure's published cold start adds a HEAD before its GET)."""
    n, out = 7, tmp_path / "out"
    cmd = [sys.executable, "-m", "benchmarks.bench_parquet_index", "--files", str(n), "--reps",
           "1", "--stores", "gcs,azure", "--latency-ms", "100", "--no-local",
           "--work", str(tmp_path / "work"), "--out", str(out)]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    records = json.loads((out / "results.json").read_text())["records"]
    got = {r["side"]: r for r in records}
    assert sorted(got) == sorted(
        f"{kind}-{st}" + sfx
        for st in ("gcs", "azure")
        for kind, sfx in (("astream", ""), ("astream", "-pub"), ("floor", ""))
    )
    for side, r in got.items():
        assert r["status"] == "ok", (side, r)
        if side.startswith("astream"):
            assert r["rows"] == 4 * n and r["cold_s"] > 0 and r["warm_s"] > 0
    for st in ("gcs", "azure"):
        assert got[f"astream-{st}"]["proxy_requests"] == (1 + n) + 1
        assert got[f"floor-{st}"]["objects"] == n
        # every footer GET at once: all n are sent within one 100 ms round trip (a client
        # that waited for each answer would have one in flight; 5 ms was shorter than a time
        # slice on a busy 2-core machine)
        assert got[f"astream-{st}"]["proxy_peak_in_flight"] == n
    assert got["astream-gcs-pub"]["proxy_requests"] == 2 + 1
    summary = json.loads((out / "summary.json").read_text())
    row = summary["files"][str(n)]
    assert math.isfinite(row["cold_floor_s_gcs"]) and math.isfinite(row["warm_floor_s_azure"])
