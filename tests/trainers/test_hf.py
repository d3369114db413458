"""The Hugging Face Trainer with astream.integrations.hf.StreamingTrainer: every sample exactly
once per epoch (single process; torchrun x2 with accelerate's default dispatching and with
``dispatch_batches=False``), and exact resumption through ``resume_from_checkpoint`` from
astream's saved state (no replay), at a mid-epoch step, the last step of an epoch and mid-epoch 1.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from .conftest import NUM_SAMPLES, read_log, run_job

pytest.importorskip("transformers", reason="the [trainers] extra is not installed")
pytest.importorskip("accelerate", reason="the [trainers] extra is not installed")


def _meta(out: str, tag: str, rank: int) -> dict[str, Any]:
    with open(os.path.join(out, f"{tag}.rank{rank}.meta.json")) as f:
        return json.load(f)  # type: ignore[no-any-return]


def _check(out: str, ranks: int, per_rank_steps: int, points: list[int]) -> None:
    logs = [read_log(os.path.join(out, f"ref.rank{r}.jsonl")) for r in range(ranks)]
    for r in range(ranks):
        assert len(logs[r]) == 2 * per_rank_steps
        assert _meta(out, "ref", r)["global_step"] == 2 * per_rank_steps
        assert _meta(out, "ref", r)["len_loader"] == per_rank_steps
        for s in points:
            got = read_log(os.path.join(out, f"step{s}.rank{r}.jsonl"))
            assert got == logs[r][s:], (s, r, len(got), len(logs[r]) - s)
            assert _meta(out, f"step{s}", r)["global_step"] == 2 * per_rank_steps
            assert os.path.isfile(os.path.join(out, "ckpt", f"checkpoint-{s}",
                                               "astream_loader_state.json"))  # fmt: skip
    for epoch in range(2):
        part = slice(epoch * per_rank_steps, (epoch + 1) * per_rank_steps)
        ids = [i for log in logs for b in log[part] for i in b]
        assert sorted(ids) == list(range(NUM_SAMPLES))


def test_hf_trainer_single_process_exact_once_and_resume(trainer_data: str, tmp_path: Any) -> None:
    out = str(tmp_path)
    run_job("hf_job.py", ["--data", trainer_data, "--out", out, "--workers", "2",
                          "--save-steps", "60,125,190"])  # fmt: skip
    _check(out, 1, 125, [60, 125, 190])


@pytest.mark.parametrize("dispatch", ["default", "false"])
def test_hf_trainer_torchrun_two_ranks(trainer_data: str, tmp_path: Any, dispatch: str) -> None:
    out = str(tmp_path)
    run_job("hf_job.py", ["--data", trainer_data, "--out", out, "--workers", "2",
                          "--dispatch", dispatch, "--save-steps", "30,63,100"],
            nproc=2, timeout=400)  # fmt: skip
    _check(out, 2, 63, [30, 63, 100])
