"""The ``lit-full`` column: litdata at its strongest shuffle (``item_shuffle_window=0``).

litdata 0.2.76's default shuffle permutes its chunks and then samples only inside blocks of
256, so its order is far weaker than astream's or mosaic's; ``--shuffle both`` adds a litdata
column with a full in-chunk permutation, decoding per item (``batch_decode=0``: its default
decodes a window of rows around each item, which that order defeats). The first tests check
the wiring in the harness; the last runs the real harness with the peers' litdata on a tiny
dataset (skipped where the peers' venv is absent) and checks that the setting reached
litdata: the order it yields scores higher than the default's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.run import VARIANTS, Harness, epoch_libs, parse_args

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".bench" / "peers-venv"


def test_shuffle_both_adds_each_variant_after_its_library() -> None:
    libs = ["astream", "mosaic", "lit"]
    assert epoch_libs(libs, "defaults") == libs
    assert epoch_libs(libs, "both") == ["astream", "astream-py1e", "mosaic", "lit", "lit-full"]
    assert epoch_libs(["mosaic", "lit"], "both") == ["mosaic", "lit", "lit-full"]
    assert epoch_libs(["astream"], "both") == ["astream", "astream-py1e"]


def test_lit_full_spec_reaches_the_lit_runner_with_window_zero(tmp_path: Path) -> None:
    assert VARIANTS["lit-full"] == ("lit", {"item_shuffle_window": 0, "batch_decode": 0})
    a = parse_args(["--work", str(tmp_path), "--out", str(tmp_path / "out"), "--shuffle", "both"])
    h = Harness(a)
    h.data[("lit", "tokens")] = tmp_path / "lit-tokens"
    base = {"scenario": "epoch", "workload": "tokens", "cold": False, "num_workers": 0}
    full, default = h.spec_for("lit-full", base), h.spec_for("lit", base)
    # the same runner and the same written copy, only the window differs
    assert full["lib"] == default["lib"] == "lit"
    assert full["data"] == default["data"] == str(tmp_path / "lit-tokens")
    assert (full["item_shuffle_window"], full["batch_decode"]) == (0, 0)
    assert "item_shuffle_window" not in default and "batch_decode" not in default
    # each column keeps its own download cache
    assert full["cache"] != default["cache"]


@pytest.mark.skipif(
    not (PEERS / "bin" / "python").exists(),
    reason="needs the peers' venv with litdata and mosaicml-streaming (1.8 GB, ~9 min to "
    "install): .venv/bin/python -m benchmarks.peers_env",
)
def test_lit_full_yields_a_stronger_order_than_lit(tmp_path: Path) -> None:
    out = tmp_path / "report"
    cmd = [
        sys.executable, "-m", "benchmarks.run",
        "--scale", "0.005", "--reps", "1", "--libs", "lit", "--workloads", "tokens",
        "--scenarios", "hot", "--shuffle", "both", "--peers-venv", str(PEERS),
        "--work", str(tmp_path / "work"), "--out", str(out),
    ]  # fmt: skip
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    res = json.loads((out / "results.json").read_text())
    assert res["meta"]["libs"] == ["lit", "lit-full"]
    for w in (0, 2):
        key = f"hot/tokens/w{w}"
        assert res["status"][key] == {"lit": "ok", "lit-full": "ok"}, res["status"][key]
        score = {
            lib: res["figures"][key][lib]["order_score"]["median"] for lib in ("lit", "lit-full")
        }
        # every sample delivered by both, and the full in-chunk permutation is the stronger order
        n = {lib: res["figures"][key][lib]["samples"]["median"] for lib in ("lit", "lit-full")}
        assert n["lit"] == n["lit-full"] == res["meta"]["samples"]["tokens"]
        assert score["lit-full"] > score["lit"] + 0.05, score
    assert "lit-full" in (out / "report.md").read_text()
