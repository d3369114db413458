"""A tiny Hugging Face Trainer job the tests run as a subprocess (alone or under torchrun).

``StreamingTrainer`` (astream.integrations.hf) trains a linear model for 2 epochs (batch 16,
``--workers`` DataLoader workers). The model logs, per rank, every step's
``[global step, sample ids]`` to ``<out>/<tag>.rank<R>.jsonl``. The uninterrupted run (``ref``)
saves checkpoints after the global steps ``--save-steps``; then, in the same process, a fresh
model, dataset and Trainer resume from each (``train(resume_from_checkpoint=...)``).
``--dispatch`` sets accelerate's ``dispatch_batches`` (``default`` leaves it alone).
``--plain`` uses ``transformers.Trainer`` itself (to show what goes wrong without the mixin).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainerCallback, TrainingArguments

from astream import StreamingDataset
from astream.integrations.hf import StreamingTrainer


class Model(torch.nn.Module):
    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 2)
        self.log_path = log_path
        self.step = 0

    def forward(self, idx: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> dict[str, Any]:
        with open(self.log_path, "a") as f:
            f.write(json.dumps(idx.tolist()) + "\n")
        return {"loss": F.cross_entropy(self.net(x), y)}


class SaveAt(TrainerCallback):
    def __init__(self, steps: set[int]) -> None:
        self.steps = steps

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step in self.steps:
            control.should_save = True
        return control


def train(a: argparse.Namespace, tag: str, resume: str | None, save: set[int]) -> float:
    rank = int(os.environ.get("RANK", "0"))
    log = os.path.join(a.out, f"{tag}.rank{rank}.jsonl")
    if os.path.exists(log):
        os.remove(log)
    ds = StreamingDataset(local=a.data, batch_size=None if a.no_batch else 16, shuffle=True)
    accel: dict[str, Any] = {}
    if a.dispatch != "default":
        accel["dispatch_batches"] = a.dispatch == "true"
    args = TrainingArguments(
        output_dir=os.path.join(a.out, "ckpt"),
        per_device_train_batch_size=16,
        num_train_epochs=2,
        learning_rate=0.05,
        dataloader_num_workers=a.workers,
        # forked fresh each epoch on several ranks, see tests/trainers/test_lightning.py
        dataloader_persistent_workers="WORLD_SIZE" in os.environ and a.workers > 0,
        save_strategy="no",
        logging_strategy="no",
        report_to="none",
        disable_tqdm=True,
        use_cpu=True,
        ddp_backend="gloo" if "WORLD_SIZE" in os.environ else None,
        accelerator_config=accel or None,
        seed=7,
    )
    cls = Trainer if a.plain else StreamingTrainer
    trainer = cls(model=Model(log), args=args, train_dataset=ds, callbacks=[SaveAt(save)])
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    took = time.perf_counter() - t0
    with open(os.path.join(a.out, f"{tag}.rank{rank}.meta.json"), "w") as f:
        json.dump({"global_step": trainer.state.global_step, "seconds": took,
                   "len_loader": len(trainer.get_train_dataloader())}, f)  # fmt: skip
    return took


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--save-steps", default="")
    p.add_argument("--dispatch", choices=["default", "true", "false"], default="default")
    p.add_argument("--plain", action="store_true")
    p.add_argument("--no-batch", action="store_true", help="dataset without batch_size")
    a = p.parse_args()
    steps = sorted(int(s) for s in a.save_steps.split(",") if s)
    train(a, "ref", None, set(steps))
    for s in steps:
        train(a, f"step{s}", os.path.join(a.out, "ckpt", f"checkpoint-{s}"), set())


if __name__ == "__main__":
    main()
