"""``StreamingCore``'s checkpoints: ``state_dict`` (the reference's keys, or without arguments
where this very consumer is) and ``load_state_dict`` (resume on this or any other World)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from astream.core.state import LoaderState
from astream.dataset.epochs import _Epochs
from astream.errors import ConfigError
from astream.runtime.config import DatasetConfig
from astream.runtime.placement import dataloader_worker as _worker
from astream.runtime.placement import detect


def _yielded(cursor: list[Any]) -> int:
    """Samples consumed so far, from an iteration's cursor (see ``Engine.iter_samples``)."""
    done, it, size = cursor
    return int(done) if it is None else int(done) + size - it.__length_hint__()


class _Checkpoints:
    """The part of ``StreamingCore`` that saves and loads where the job is."""

    # set by StreamingCore._build, or its other parts
    pack: Any
    cfg: DatasetConfig
    _epochs: _Epochs
    _current: tuple[int, int]
    _progress: list[Any]
    _plans: dict[tuple[int, int | None], Any]
    _worker_resume: dict[str, int] | None
    _worker_next: int | None
    plan: Callable[[int], Any]
    _normal: Callable[[int, int], tuple[int, int]]

    # -- checkpoints ---------------------------------------------------------------------------
    def _position(self) -> tuple[int, int]:
        """(epoch, start) of the iteration this process's checkpoints count from."""
        if _worker() is None:
            current = self._epochs.owner_current()  # workers of a plain DataLoader
            if current is not None:
                return current
        return self._current

    def state_dict(
        self, num_samples: int | None = None, from_beginning: bool = True
    ) -> dict[str, Any]:
        """Where the job is.

        With the reference's arguments: ``num_samples`` consumed by all ranks together, counted
        from the start of the epoch (``from_beginning``) or from where this iteration resumed.
        Keys are the reference's (:class:`~astream.core.state.LoaderState`).

        Without arguments (the stateful-iterable protocol of torchdata's
        ``StatefulDataLoader``): where *this* consumer is -- the process iterating with
        ``num_workers=0`` (counted in samples it yielded, times the ranks), or, inside a
        DataLoader worker, that worker (its own samples; resumable by the same worker of the
        same ``num_workers``).
        """
        if self.pack is not None:
            from astream.packing import owner_state

            if num_samples is not None:
                raise ConfigError(
                    "state_dict(num_samples=...) with pack_to: packed streams advance by "
                    "tokens, not samples; call state_dict() (or StreamingDataLoader.state_dict)"
                )
            return owner_state(self)
        epoch, start = self._position()
        world = detect(self.cfg.replication).world
        me = _worker()
        if num_samples is None:
            if me is not None:
                state = self._state(epoch, start, world)
                state["astream_worker"] = {
                    "worker": me[0],
                    "num_workers": me[1],
                    "yielded": _yielded(self._progress),
                }
                return state
            state = self._state(epoch, start + _yielded(self._progress) * world.num_ranks, world)
            # a state taken after the last sample resumes into that (finished) epoch, as the
            # iterator it describes would (torchdata): the next iteration is empty, then E+1
            state["astream_exact_end"] = True
            return state
        if isinstance(num_samples, bool) or not isinstance(num_samples, (int, np.integer)):
            raise ConfigError(f"num_samples must be an int, got {num_samples!r}")
        pos = int(num_samples) if from_beginning else start + int(num_samples)
        return self._state(epoch, pos, world)

    def _state(self, epoch: int, pos: int, world: Any) -> dict[str, Any]:
        return LoaderState(
            epoch=epoch,
            sample_in_epoch=pos,
            shuffle_seed=self.cfg.shuffle_seed,
            num_canonical_nodes=self.cfg.num_canonical_nodes,
            # kept from the checkpoint a reference algorithm resumed from, as the reference
            initial_physical_nodes=self.cfg.initial_physical_nodes or world.num_nodes,
            initial_ranks_per_node=world.ranks_per_node,
        ).to_dict()

    def load_state_dict(self, obj: dict[str, Any]) -> None:
        """Resume at ``obj`` (ours, or the reference's ``state_dict``) on the next iteration,
        on this or any other World, in this process and its DataLoader workers (with
        ``pack_to``: exact on the same World, else see docs/batches.md)."""
        if self.pack is not None:
            from astream.packing import load_state

            load_state(self, obj, self._load_position)
            return
        self._load_position(obj)

    def _load_position(self, obj: dict[str, Any]) -> None:
        ours = ("astream_worker", "astream_exact_end")
        worker_part = obj.get("astream_worker") if isinstance(obj, dict) else None
        exact_end = bool(obj.get("astream_exact_end")) if isinstance(obj, dict) else False
        state = LoaderState.from_dict(
            {k: v for k, v in obj.items() if k not in ours} if isinstance(obj, dict) else obj
        )
        changes: dict[str, Any] = {}
        for key in ("num_canonical_nodes", "shuffle_seed"):
            if getattr(state, key) != getattr(self.cfg, key):
                changes[key] = getattr(state, key)
        # kept, as the reference keeps it, for the checkpoints this run writes; a reference
        # algorithm also re-deals the order from it (astream's order never reads it)
        initial = state.initial_physical_nodes
        if initial != self.cfg.initial_physical_nodes:
            changes["initial_physical_nodes"] = initial
        if changes:
            planned = self.cfg.plan_kwargs()
            self.cfg = self.cfg.replace(**changes)
            if self.cfg.plan_kwargs() != planned:  # not initial_physical_nodes under "astream"
                self._plans.clear()
        if worker_part is not None:
            if _worker() is None:
                raise ConfigError(
                    "this state was saved inside DataLoader worker "
                    f"{worker_part.get('worker')}; load it in a worker (as torchdata's "
                    "StatefulDataLoader does), or save with num_workers=0"
                )
            self._worker_resume = {
                "epoch": state.epoch,
                "start": state.sample_in_epoch,
                "worker": int(worker_part["worker"]),
                "num_workers": int(worker_part["num_workers"]),
                "yielded": int(worker_part["yielded"]),
            }
            return
        if exact_end and state.sample_in_epoch >= self.plan(state.epoch).num_samples:
            self._epochs.reset(state.epoch, self.plan(state.epoch).num_samples, keep_end=True)
        else:
            self._epochs.reset(*self._normal(state.epoch, state.sample_in_epoch))
        self._worker_resume = self._worker_next = None
