"""The plain-torchrun recipe of docs/trainers.md, run as the page says: the block marked
``<!-- trainers-doc: torchrun script -->`` saved as train.py and launched with
``torchrun --nproc_per_node 2`` twice -- a first run that saves a checkpoint mid-epoch 0, then
one that resumes from it. The docs test runs the same block in one process and checks the
resume there; here each launch must succeed on 2 ranks and the checkpoint must hold the
loader's global position (6 batches x 16 x 2 ranks)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import torch

from .conftest import ROOT, env

MARK = "<!-- trainers-doc: torchrun script -->"


def _blocks() -> tuple[str, str]:
    """(the dataset block, the torchrun script block) of docs/trainers.md."""
    with open(os.path.join(ROOT, "docs", "trainers.md"), encoding="utf-8") as f:
        text = f.read()
    py = text.split("```python\n")
    data = py[1].split("\n```", 1)[0]
    _, sep, rest = text.partition(MARK + "\n```python\n")
    assert sep, f"docs/trainers.md lost its {MARK} marker"
    return data, rest.split("\n```", 1)[0]


def test_torchrun_recipe_on_two_ranks(tmp_path: Any) -> None:
    data, script = _blocks()
    assert "MDSWriter" in data and "def train(" in script
    (tmp_path / "train.py").write_text(script)
    r = subprocess.run([sys.executable, "-c", data], cwd=tmp_path, env=env(), timeout=120)
    assert r.returncode == 0
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "train.py"]  # fmt: skip
    for launch in ("first", "resume"):
        r = subprocess.run(cmd, cwd=tmp_path, env=env(), timeout=300, capture_output=True,
                           text=True)  # fmt: skip
        assert r.returncode == 0, (launch, r.stderr[-4000:])
        if launch == "first":
            saved = torch.load(tmp_path / "plain-ckpt.pt")
            assert saved["epoch"] == 0
            assert saved["loader"]["epoch"] == 0
            assert saved["loader"]["sample_in_epoch"] == 6 * 16 * 2
