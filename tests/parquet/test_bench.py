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
