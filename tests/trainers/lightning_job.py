"""A tiny PyTorch Lightning training job the tests run as a subprocess (alone or under torchrun).

The model's ``train_dataloader`` returns a ``StreamingDataLoader``: no other astream code.
It trains ``--epochs`` epochs (batch 16, ``--workers`` DataLoader workers) and logs, per rank,
every training step's ``[epoch, batch_idx, sample ids]`` to ``<out>/<tag>.rank<R>.jsonl``.
The uninterrupted run (tag ``ref``) saves checkpoints at the global steps ``--save-steps`` (in
``on_train_batch_end``, where ``ModelCheckpoint(every_n_train_steps=...)`` saves) and at the end
of the epochs ``--save-epochs`` (in ``on_train_epoch_end``). Then, in the same process with a
fresh model, dataset, loader and Trainer each, it resumes from each of those checkpoints
(``trainer.fit(ckpt_path=...)``), logging under the checkpoint's name.
"""

from __future__ import annotations

import argparse
import json
import os
import warnings

import pytorch_lightning as pl
import torch
import torch.nn.functional as F

from astream import StreamingDataLoader, StreamingDataset


class Model(pl.LightningModule):
    def __init__(self, data: str, workers: int, log_path: str, persistent: bool = False) -> None:
        super().__init__()
        self.data, self.workers, self.persistent = data, workers, persistent
        self.net = torch.nn.Linear(4, 2)
        self.log_file = open(log_path, "w")  # noqa: SIM115 - closed in on_fit_end
        self.loader: StreamingDataLoader | None = None

    def train_dataloader(self) -> StreamingDataLoader:
        ds = StreamingDataset(local=self.data, batch_size=16, shuffle=True)
        self.loader = StreamingDataLoader(
            ds, batch_size=16, num_workers=self.workers, persistent_workers=self.persistent
        )
        return self.loader

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        ids = batch["idx"].tolist()
        self.log_file.write(json.dumps([self.current_epoch, batch_idx, ids]) + "\n")
        return F.cross_entropy(self.net(batch["x"]), batch["y"])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_fit_end(self) -> None:
        self.log_file.close()


class Saver(pl.Callback):
    def __init__(self, out: str, steps: set[int], epochs: set[int]) -> None:
        self.out, self.steps, self.epochs = out, steps, epochs

    def on_train_batch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.global_step in self.steps:
            trainer.save_checkpoint(os.path.join(self.out, f"step{trainer.global_step}.ckpt"))

    def on_train_epoch_end(self, trainer: pl.Trainer, *args: object) -> None:
        if trainer.current_epoch in self.epochs:
            trainer.save_checkpoint(os.path.join(self.out, f"epoch{trainer.current_epoch}.ckpt"))


class Meta(pl.Callback):
    """Records what Lightning sized the epoch with, and the loader's len() after the restore."""

    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_start(self, trainer: pl.Trainer, pl_module: Model) -> None:
        assert pl_module.loader is not None
        with open(self.path, "w") as f:
            json.dump(
                {
                    "num_training_batches": trainer.num_training_batches,
                    "len_loader": len(pl_module.loader),
                    "len_dataset": len(pl_module.loader.dataset),  # type: ignore[arg-type]
                },
                f,
            )


def fit(a: argparse.Namespace, tag: str, ckpt: str | None, saver: Saver | None) -> None:
    rank = int(os.environ.get("RANK", "0"))
    model = Model(a.data, a.workers, os.path.join(a.out, f"{tag}.rank{rank}.jsonl"), a.persistent)
    callbacks: list[pl.Callback] = [Meta(os.path.join(a.out, f"{tag}.rank{rank}.meta.json"))]
    if saver is not None:
        callbacks.append(saver)
    nproc = int(os.environ.get("WORLD_SIZE", "1"))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=nproc,
        strategy="ddp" if nproc > 1 else "auto",
        max_epochs=a.epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
    )
    trainer.fit(model, ckpt_path=ckpt)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--persistent", action="store_true", help="persistent_workers=True")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--save-steps", default="")
    p.add_argument("--save-epochs", default="")
    a = p.parse_args()
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    steps = {int(s) for s in a.save_steps.split(",") if s}
    epochs = {int(s) for s in a.save_epochs.split(",") if s}
    fit(a, "ref", None, Saver(a.out, steps, epochs))
    for name in [f"step{s}" for s in sorted(steps)] + [f"epoch{e}" for e in sorted(epochs)]:
        fit(a, name, os.path.join(a.out, f"{name}.ckpt"), None)


if __name__ == "__main__":
    main()
