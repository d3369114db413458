"""PyTorch Lightning: exact mid-epoch resume from a ``StreamingDataLoader``, alone and under DDP.

Each test runs one job (tests/trainers/lightning_job.py): an uninterrupted 2-epoch run that
saves checkpoints at 4 points -- mid-epoch 0, the last step of epoch 0 (``on_train_batch_end``),
the end of epoch 0 (``on_train_epoch_end``), mid-epoch 1 -- then a resume from each. Every
resumed run must train exactly the steps the uninterrupted run trained after its checkpoint:
same epochs, batch indices and sample ids in the same order, on every rank.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from .conftest import NUM_SAMPLES, read_log, run_job

pytest.importorskip("pytorch_lightning", reason="the [trainers] extra is not installed")


def _check(out: str, ranks: int, per_rank_steps: int, points: dict[str, int]) -> None:
    import json

    for r in range(ranks):
        ref = read_log(os.path.join(out, f"ref.rank{r}.jsonl"))
        assert len(ref) == 2 * per_rank_steps
        for name, done in points.items():
            got = read_log(os.path.join(out, f"{name}.rank{r}.jsonl"))
            assert got == ref[done:], (name, r, len(got), len(ref) - done)
        for name in ["ref", *points]:
            with open(os.path.join(out, f"{name}.rank{r}.meta.json")) as f:
                meta = json.load(f)
            # len() is the full epoch of this rank, after load_state_dict as before
            assert meta == {
                "num_training_batches": per_rank_steps,
                "len_loader": per_rank_steps,
                "len_dataset": per_rank_steps * 16,
            }, (name, r)
    # the uninterrupted run: every sample once per epoch (2 ranks: padded to whole global batches)
    logs = [read_log(os.path.join(out, f"ref.rank{r}.jsonl")) for r in range(ranks)]
    for epoch in range(2):
        ids = [i for log in logs for e, _, b in log if e == epoch for i in b]
        assert len(ids) == per_rank_steps * 16 * ranks
        assert set(ids) == set(range(NUM_SAMPLES))
    first = [b for _, _, b in logs[0]][:per_rank_steps]
    second = [b for _, _, b in logs[0]][per_rank_steps:]
    assert first != second  # shuffled per epoch


def test_lightning_single_process_resume_at_four_points(trainer_data: str, tmp_path: Any) -> None:
    out = str(tmp_path)
    run_job("lightning_job.py", ["--data", trainer_data, "--out", out, "--workers", "2",
                                 "--save-steps", "60,125,190", "--save-epochs", "0"])  # fmt: skip
    _check(out, 1, 125, {"step60": 60, "step125": 125, "epoch0": 125, "step190": 190})


def test_lightning_ddp_two_processes_resume_at_four_points(trainer_data: str, tmp_path: Any) -> None:
    out = str(tmp_path)
    run_job("lightning_job.py", ["--data", trainer_data, "--out", out, "--workers", "2",
                                 "--save-steps", "30,63,100", "--save-epochs", "0"],
            nproc=2, timeout=400)  # fmt: skip
    _check(out, 2, 63, {"step30": 30, "step63": 63, "epoch0": 63, "step100": 100})
