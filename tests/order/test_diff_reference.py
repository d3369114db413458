"""The differential run in CI: 40 random configurations through astream and the reference
(mosaicml-streaming 0.13.0, in ``.venv-ref`` made by ``scripts/setup.sh``), a new seed each run.

``scripts/diff_reference.py`` draws the configurations (streams and their weights, batching
methods, shuffle on and off, every reference algorithm, 1-3 DataLoader workers, resume
points; the default arguments and ``shuffle=False`` always among them) and compares every
sample. On a divergence the output names each configuration and the seed to rerun it with.
A second run puts ``WORLD_CASES`` configurations on a World of one node of 2 ranks (one
process per rank), the three fixed ones among them: the default arguments and
``shuffle=False``. Run it alone: two reference jobs at once on one machine collide in the
reference's shared memory names (``FileExistsError: .../..._locals``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REF = ROOT / ".venv-ref" / "bin" / "python"
CASES = int(os.environ.get("ASTREAM_DIFF_CASES", "40"))
WORLD_CASES = int(os.environ.get("ASTREAM_DIFF_WORLD_CASES", "20"))

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
@pytest.mark.skipif(
    not REF.exists(),
    reason="no reference venv: run `bash scripts/setup.sh` to make .venv-ref "
    "(mosaicml-streaming 0.13.0 beside the CPU torch)",
)
def test_random_configurations_match_the_reference(tmp_path: Path) -> None:
    cmd = [sys.executable, str(ROOT / "scripts" / "diff_reference.py")]
    cmd += ["--cases", str(CASES), "--worlds", "0", "--peer-python", str(REF)]
    cmd += ["--keep", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=580, cwd=ROOT)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr[-3000:]}"
    last = run.stdout.strip().splitlines()[-1]
    assert f"({CASES} configurations" in last and " 0 diverged" in last, run.stdout


@pytest.mark.timeout(300)
@pytest.mark.skipif(not REF.exists(), reason="no reference venv: run `bash scripts/setup.sh`")
def test_two_rank_worlds_match_the_reference(tmp_path: Path) -> None:
    """Every configuration on 2 ranks, each rank's samples against the reference's rank."""
    cmd = [sys.executable, str(ROOT / "scripts" / "diff_reference.py")]
    cmd += ["--cases", str(WORLD_CASES), "--worlds", "1", "--modes", "iter,resume"]
    cmd += ["--peer-python", str(REF), "--keep", str(tmp_path)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert run.returncode == 0, f"{run.stdout}\n{run.stderr[-3000:]}"
    last = run.stdout.strip().splitlines()[-1]
    ran = f"({WORLD_CASES} configurations, modes iter,resume; {WORLD_CASES} on 2 ranks)"
    assert ran in last and " 0 diverged" in last, run.stdout
    assert "hung" not in run.stdout, run.stdout
