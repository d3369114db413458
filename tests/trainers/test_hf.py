"""The Hugging Face Trainer with astream.integrations.hf.StreamingTrainer: every sample exactly
once per epoch (single process; torchrun x2 with accelerate's default dispatching and with
``dispatch_batches=False``), and exact resumption through ``resume_from_checkpoint`` from
astream's saved state (no replay), at a mid-epoch step, the last step of an epoch and mid-epoch 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import accelerate  # noqa: F401  (the [trainers] extra: a missing install fails, never skips)
import pytest
import transformers  # noqa: F401

from .conftest import HERE, NUM_SAMPLES, env, read_log, run_job


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


def test_plain_trainer_without_batch_size_every_sample_once(
    trainer_data: str, tmp_path: Any
) -> None:
    # transformers.Trainer itself, one process, 2 workers, a dataset built without batch_size:
    # the dataset takes the DataLoader's 16 (it used to yield 1,992 of 2,000 per epoch)
    out = str(tmp_path)
    run_job("hf_job.py", ["--data", trainer_data, "--out", out, "--workers", "2", "--plain",
                          "--no-batch"])  # fmt: skip
    log = read_log(os.path.join(out, "ref.rank0.jsonl"))
    assert [len(b) for b in log] == [16] * 250
    for epoch in range(2):
        ids = sorted(i for b in log[epoch * 125 : (epoch + 1) * 125] for i in b)
        assert ids == list(range(NUM_SAMPLES))


def test_resharding_is_detected() -> None:
    from astream.integrations.hf import detect_resharding, resharding_error

    class IterableDatasetShard:  # stands in for accelerate's wrapper, by module and name
        __module__ = "accelerate.data_loader"

        def __iter__(self) -> Any:
            yield detect_resharding()

    assert detect_resharding() is None and resharding_error() is None
    assert list(IterableDatasetShard()) == ["accelerate.data_loader.IterableDatasetShard"]


@pytest.mark.parametrize("dispatch", ["default", "false"])
def test_plain_trainer_under_torchrun_is_refused(
    trainer_data: str, tmp_path: Any, dispatch: str
) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           os.path.join(HERE, "hf_job.py"), "--data", trainer_data, "--out", str(tmp_path),
           "--workers", "0", "--plain", "--dispatch", dispatch]  # fmt: skip
    r = subprocess.run(cmd, env=env(), timeout=300, capture_output=True, text=True)
    assert r.returncode != 0
    assert "ConfigError: StreamingDataset is being split between ranks a second time" in r.stderr
    assert "StreamingTrainer" in r.stderr
