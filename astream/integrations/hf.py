"""The Hugging Face ``Trainer`` on an astream ``StreamingDataset``: every sample once per epoch
on any number of ranks, and exact resumption from astream's own state.

Theory of operation
-------------------
Sharding. A plain ``Trainer`` hands its training DataLoader to accelerate, which treats an
``IterableDataset`` as one stream for all ranks: either rank 0 iterates and dispatches slices of
its batches (``dispatch_batches=True``, the default), or every rank iterates and keeps every
``world_size``-th batch (``IterableDatasetShard``). astream already deals each rank its own
part of the epoch, so the first sees only rank 0's part and the second splits it twice.
:class:`StreamingTrainerMixin` builds a :class:`~astream.StreamingDataLoader` itself and does not
pass it through ``accelerator.prepare``: rank sharding happens once, in astream, whatever the
dispatch setting. The Trainer still moves each batch to the device (``_prepare_inputs``).

Resumption. ``Trainer.train(resume_from_checkpoint=...)`` normally replays the batches of the
interrupted epoch (``skip_first_batches``: every sample read and decoded again). The mixin saves
the loader's ``state_dict()`` as ``astream_loader_state.json`` in every checkpoint folder
(written by the process that saves the checkpoint; the state is the same on every rank), loads
it into the new loader when training resumes, and turns the replay into a no-op for that loader
only: the Trainer keeps its own step bookkeeping and the loader starts at the next unseen batch.

A checkpoint folder without the state file (written by a plain ``Trainer``) is refused with a
``ConfigError`` rather than replayed: the replay would bypass the astream loader.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from astream.errors import ConfigError
from astream.runtime.placement import detect_resharding, resharding_error

__all__ = [
    "STATE_FILE",
    "StreamingTrainer",  # noqa: F822 - built on first use (module __getattr__)
    "StreamingTrainerMixin",
    "detect_resharding",
    "resharding_error",
]

STATE_FILE = "astream_loader_state.json"


def _read_state(checkpoint: str) -> dict[str, Any]:
    path = os.path.join(checkpoint, STATE_FILE)
    if not os.path.isfile(path):
        raise ConfigError(
            f"resume_from_checkpoint={checkpoint!r}: no {STATE_FILE} in it (it was not written by "
            "an astream StreamingTrainer), so the position in the epoch is unknown; resume from "
            "a checkpoint a StreamingTrainer saved"
        )
    with open(path) as f:
        state = json.load(f)
    if not isinstance(state, dict):
        raise ConfigError(f"{path}: expected a JSON object, got {type(state).__name__}")
    return state


def _write_state(folder: str, state: dict[str, Any]) -> None:
    path = os.path.join(folder, STATE_FILE)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(state, f)
    os.replace(tmp, path)


class StreamingTrainerMixin:
    """Mix into a ``transformers.Trainer`` subclass (before it) to train on an astream
    ``StreamingDataset``. Any other ``train_dataset`` gets the Trainer's own behaviour.

    (The methods reach the Trainer's attributes through ``t: Any = self``: the mixin itself
    does not know them.)"""

    _astream_loader: Any = None
    _astream_state: dict[str, Any] | None = None

    def train(
        self, resume_from_checkpoint: str | bool | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        from astream.torch.dataset import StreamingDataset

        t: Any = self
        path = resume_from_checkpoint
        if isinstance(path, bool):
            from transformers import trainer_utils

            last: Any = trainer_utils.get_last_checkpoint
            path = last(t.args.output_dir) if path else None
        streaming = isinstance(t.train_dataset, StreamingDataset)
        self._astream_state = _read_state(path) if path and streaming else None
        try:
            return super().train(resume_from_checkpoint, *args, **kwargs)  # type: ignore[misc]
        finally:
            self._astream_state = None

    def get_train_dataloader(self) -> Any:
        from astream.torch.dataloader import StreamingDataLoader
        from astream.torch.dataset import StreamingDataset

        t: Any = self
        ds = t.train_dataset
        if not isinstance(ds, StreamingDataset):
            return super().get_train_dataloader()  # type: ignore[misc]
        a = t.args
        params: dict[str, Any] = {
            "batch_size": t._train_batch_size,
            "collate_fn": t._get_collator_with_removed_columns(
                t.data_collator, description="Training"
            ),
            "num_workers": a.dataloader_num_workers,
            "pin_memory": a.dataloader_pin_memory,
            "persistent_workers": a.dataloader_persistent_workers,
            "prefetch_factor": a.dataloader_prefetch_factor,
            "drop_last": a.dataloader_drop_last,
        }
        if a.dataloader_multiprocessing_context is not None:
            params["multiprocessing_context"] = a.dataloader_multiprocessing_context
        if not getattr(a, "dataloader_in_order", True):
            params["in_order"] = False
        loader = StreamingDataLoader(ds, **params)
        if self._astream_state is not None:
            loader.load_state_dict(self._astream_state)
        self._astream_loader = loader
        return loader

    def _inner_training_loop(self, *args: Any, **kwargs: Any) -> Any:
        # The Trainer replays the interrupted epoch's batches through accelerate's
        # skip_first_batches (looked up in transformers.trainer's namespace at call time).
        # For our loader, positioned by load_state_dict, the replay is a no-op.
        import transformers.trainer

        hf_trainer: Any = transformers.trainer
        replay: Callable[..., Any] = hf_trainer.skip_first_batches
        mine = self

        def skip_first_batches(dataloader: Any, num_batches: int = 0) -> Any:
            if dataloader is not None and dataloader is mine._astream_loader:
                return dataloader
            return replay(dataloader, num_batches)

        hf_trainer.skip_first_batches = skip_first_batches
        try:
            return super()._inner_training_loop(*args, **kwargs)  # type: ignore[misc]
        finally:
            hf_trainer.skip_first_batches = replay

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)  # type: ignore[misc]
        t: Any = self
        loader = self._astream_loader
        if loader is None or not t.args.should_save:
            return
        from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

        folder = os.path.join(
            t._get_output_dir(trial=trial), f"{PREFIX_CHECKPOINT_DIR}-{t.state.global_step}"
        )
        _write_state(folder, loader.state_dict())


def __getattr__(name: str) -> Any:
    # StreamingTrainer subclasses transformers.Trainer: built on first use, so importing this
    # module (for the mixin or detect_resharding) does not import transformers.
    if name == "StreamingTrainer":
        from transformers import Trainer

        cls = type(
            "StreamingTrainer",
            (StreamingTrainerMixin, Trainer),
            {
                "__module__": __name__,
                "__doc__": "``transformers.Trainer`` with :class:`StreamingTrainerMixin`.",
            },
        )
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
