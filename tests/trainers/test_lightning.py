"""PyTorch Lightning: exact mid-epoch resume from a ``StreamingDataLoader``, alone and under DDP.

Each configuration runs one job (tests/trainers/lightning_job.py, 2 DataLoader workers per rank):
an uninterrupted 2-epoch run that saves checkpoints at 4 points -- mid-epoch 0, the last step
of epoch 0 (``on_train_batch_end``, where ``ModelCheckpoint(every_n_train_steps=...)`` saves),
the end of epoch 0 (``on_train_epoch_end``), mid-epoch 1 -- then a resume from each. Every
resumed run must train exactly the steps the uninterrupted run trained after its checkpoint:
same epochs, batch indices and sample ids in the same order, on every rank; and Lightning must
size every epoch with the full per-rank length.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
import pytorch_lightning  # noqa: F401  (the [trainers] extra: a missing install fails, never skips)

from .conftest import NUM_SAMPLES, read_log, run_job

# (ranks, steps per rank per epoch, checkpoint name -> steps the uninterrupted run had done)
CONFIGS = {
    "single": (1, 125, {"step60": 60, "step125": 125, "epoch0": 125, "step190": 190}),
    "ddp": (2, 63, {"step30": 30, "step63": 63, "epoch0": 63, "step100": 100}),
}


def _args(points: dict[str, int]) -> list[str]:
    steps = ",".join(n.removeprefix("step") for n in points if n.startswith("step"))
    epochs = ",".join(n.removeprefix("epoch") for n in points if n.startswith("epoch"))
    return ["--workers", "2", "--save-steps", steps, "--save-epochs", epochs]


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def run(request: Any, trainer_data: str, tmp_path_factory: Any) -> tuple[str, str]:
    name = request.param
    ranks, _, points = CONFIGS[name]
    out = str(tmp_path_factory.mktemp(f"lightning-{name}"))
    # Under DDP the workers are persistent: forking fresh workers every epoch while the last
    # epoch's queue feeder threads exit can deadlock the child inside os.fork() on CPython
    # 3.11 (seen once here: a worker stuck in PyOS_AfterFork_Child); the single-process run
    # keeps the default fresh workers.
    persistent = ["--persistent"] if ranks > 1 else []
    run_job("lightning_job.py", ["--data", trainer_data, "--out", out, *_args(points),
                                 *persistent], nproc=ranks, timeout=400)  # fmt: skip
    return name, out


def test_uninterrupted_run_every_sample_once_per_epoch(run: tuple[str, str]) -> None:
    name, out = run
    ranks, steps, _ = CONFIGS[name]
    logs = [read_log(os.path.join(out, f"ref.rank{r}.jsonl")) for r in range(ranks)]
    for log in logs:
        assert [(e, i) for e, i, _ in log] == [(e, i) for e in range(2) for i in range(steps)]
    for epoch in range(2):  # 2 ranks: 1,000 samples each, 62 batches of 16 and one of 8
        ids = [i for log in logs for e, _, b in log if e == epoch for i in b]
        assert sorted(ids) == list(range(NUM_SAMPLES))
    assert [b for _, _, b in logs[0]][:steps] != [b for _, _, b in logs[0]][steps:]


def test_len_is_the_full_epoch_before_and_after_restore(run: tuple[str, str]) -> None:
    name, out = run
    ranks, steps, points = CONFIGS[name]
    for r in range(ranks):
        for tag in ["ref", *points]:
            with open(os.path.join(out, f"{tag}.rank{r}.meta.json")) as f:
                meta = json.load(f)
            assert meta == {
                "num_training_batches": steps,
                "len_loader": steps,
                "len_dataset": NUM_SAMPLES // ranks,
            }, (tag, r)


POINTS = ["mid-epoch-0", "last-step-0", "epoch-end-0", "mid-epoch-1"]


@pytest.mark.parametrize("point", POINTS)
def test_resume_is_exact(run: tuple[str, str], point: str) -> None:
    name, out = run
    ranks, _, points = CONFIGS[name]
    ckpt = list(points)[POINTS.index(point)]
    done = points[ckpt]
    for r in range(ranks):
        ref = read_log(os.path.join(out, f"ref.rank{r}.jsonl"))
        got = read_log(os.path.join(out, f"{ckpt}.rank{r}.jsonl"))
        assert got == ref[done:], (ckpt, r, len(got), len(ref) - done)
