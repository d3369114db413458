"""The epoch counter: which epoch (and resume position) each consumer's next iteration runs.

The process that builds the dataset (the *owner*) and its DataLoader workers share a small
array of int64 in anonymous shared memory (:class:`_Epochs`): the epoch (and resume position)
the next worker iteration starts from, and per worker slot the number of iterations that
worker has started since. Worker ``w``'s ``k``-th iteration runs epoch ``base + k`` (from the
resume position when ``k == 0``), so a plain ``DataLoader(ds, num_workers=N)`` -- fresh workers
each epoch or ``persistent_workers=True`` -- walks epochs 0, 1, 2... exactly as
:class:`StreamingDataLoader` and ``num_workers=0`` do. ``set_epoch``, ``load_state_dict`` and the
owner's own iterations rewrite the base and zero the slots. The memory dies with the job: a
killed run leaves nothing that shifts the next one's epochs.

:class:`_EpochPlans` is the part of ``StreamingCore`` that takes epochs from that array and
plans them.
"""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import numpy as np

from astream.errors import ConfigError
from astream.runtime.config import DatasetConfig, epoch_plan_kwargs
from astream.runtime.placement import dataloader_worker as _worker
from astream.runtime.placement import detect
from astream.shared import MAX_WORKERS, SharedInts, StaleIteration

_BASE, _START, _GEN, _KEEP_END, _OWNER, _ITER, _SLOTS = 0, 1, 2, 3, 4, 5, 6


class _Epochs(SharedInts):
    """Epoch bookkeeping shared by the owner process and its DataLoader workers (see the
    module docstring). Anonymous shared memory: forked workers inherit it, spawned ones get it
    through the worker's start arguments; any other copy (``copy.deepcopy``, ``pickle.dumps``)
    gets a private array with the same values."""

    SIZE = _SLOTS + MAX_WORKERS

    def reset(self, epoch: int, start: int, keep_end: bool = False) -> int:
        """The next iteration of every consumer runs ``epoch`` from ``start``; returns the
        generation this reset made (see :meth:`generation`). ``keep_end``: a ``start`` at the
        end of the epoch is an (empty) iteration of that epoch for the owner too, not the start
        of the next one (a no-argument state taken after the last sample)."""
        a = self._a
        a[_SLOTS:] = 0
        a[_BASE], a[_START], a[_KEEP_END] = epoch, start, int(keep_end)
        a[_GEN] += 1
        return int(a[_GEN])

    def keeps_end(self) -> bool:
        return bool(self._a[_KEEP_END]) and not int(self._a[_SLOTS:].max())

    def set_iteration(self, n: int, owner: int | None = None) -> None:
        """The StreamingDataLoader whose workers carry ``owner`` (a token it gives them when
        it starts them; None: the same as before) runs iteration ``n`` of them (0: the first
        after they start; persistent workers count on). A worker starting an earlier one --
        torch makes a persistent worker's iterator only after the worker acknowledges the
        iteration, so a slow worker can still be starting one the trainer left early when the
        next begins -- must not take that next iteration's position (nor a packed resume's
        cursors) for it."""
        if owner is not None:
            self._a[_OWNER] = owner
        self._a[_ITER] = n

    def iteration_of(self, owner: int | None) -> int:
        """The iteration set for the workers carrying ``owner``; -1 for any other worker (a
        plain DataLoader's: every iteration it starts is current)."""
        a = self._a
        return int(a[_ITER]) if owner is not None and int(a[_OWNER]) == owner else -1

    def generation(self) -> int:
        return int(self._a[_GEN])

    def owner_next(self) -> tuple[int, int]:
        """(epoch, start) the owner's next iteration runs: after whatever workers started."""
        k = int(self._a[_SLOTS:].max())
        base = int(self._a[_BASE])
        return (base, int(self._a[_START])) if k == 0 else (base + k, 0)

    def owner_current(self) -> tuple[int, int] | None:
        """(epoch, start) of the latest iteration workers started since the last reset."""
        k = int(self._a[_SLOTS:].max())
        if k == 0:
            return None
        return int(self._a[_BASE]) + k - 1, int(self._a[_START]) if k == 1 else 0

    def worker_take(self, worker: int) -> tuple[int, int]:
        """(epoch, start) of worker ``worker``'s next iteration; counts it."""
        if not 0 <= worker < MAX_WORKERS:
            raise ConfigError(f"num_workers: at most {MAX_WORKERS} DataLoader workers per rank")
        a = self._a
        k = int(a[_SLOTS + worker])
        a[_SLOTS + worker] = k + 1
        return int(a[_BASE]) + k, int(a[_START]) if k == 0 else 0


class _EpochPlans:
    """``StreamingCore``'s epochs: the plan of each, and which one an iteration runs."""

    # set by StreamingCore._build
    cfg: DatasetConfig
    stream_specs: list[Any]
    _epochs: _Epochs
    _plans: dict[tuple[int, int | None], Any]
    _pack_shared: Any
    _current: tuple[int, int]
    _worker_resume: dict[str, int] | None
    _worker_next: int | None
    _iters: tuple[int, int]
    _loader_token: int | None
    engine: Any  # the dataset's Engine (astream.runtime.engine)

    @property
    def epoch_size(self) -> int:
        """Samples in one epoch over all ranks, after mixing and ``epoch_size`` (no padding)."""
        return int(self.plan(self._epochs.owner_next()[0]).num_samples)

    @property
    def next_epoch(self) -> int:
        """The epoch the next iteration of this dataset starts (or resumes)."""
        return self._epochs.owner_next()[0]

    @next_epoch.setter
    def next_epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    # -- the plan ------------------------------------------------------------------------------
    def plan(self, epoch: int) -> Any:
        """The epoch plan (cached for the latest epoch; the constructor's checks leave epoch
        0's there)."""
        kwargs = epoch_plan_kwargs(self.cfg, detect(self.cfg.replication).world.num_ranks)
        key = (epoch, kwargs.get("global_batch_size"))
        plan = self._plans.get(key)
        if plan is None:
            from astream.core.order import plan_epoch

            if self.cfg.batch_size is None:
                warnings.warn(
                    "StreamingDataset(batch_size=None): assuming 1; pass the per-device batch "
                    "size so resumption and the worker split match the DataLoader",
                    stacklevel=3,
                )
            plan = plan_epoch(self.stream_specs, epoch=epoch, **kwargs)
            self._plans = {key: plan}
        return plan

    def _warn_replication(self, start: int, me: tuple[int, int] | None) -> None:
        """Replicas see the same samples, yet ``state_dict(num_samples)`` counts the samples
        of all ranks: a count that forgets the replication resumes at the wrong sample. Said
        at each epoch's start by each node's first rank (its first DataLoader worker), as the
        reference says it."""
        rep = self.cfg.replication
        if rep is not None and rep > 1 and (me is None or me[0] == 0):
            place = detect()  # the ranks themselves, not the replicas
            if place.rank % place.world.ranks_per_node == 0:
                logging.getLogger(__name__).warning(
                    "replication=%d: each sample goes to %d consecutive ranks; this epoch "
                    "starts at sample %d: count replicas in state_dict(num_samples) or "
                    "training resumes at the wrong sample",
                    rep, rep, start,
                )  # fmt: skip

    def _normal(self, epoch: int, start: int) -> tuple[int, int]:
        """A position at (or past) the end of an epoch is the start of the next one; the start
        of an empty epoch is that epoch (the reference runs it, yielding nothing, so the
        epoch a state names after it is the same). The end is that of the epoch as this World
        deals it: a reference plan may lay out more positions than the epoch's samples
        (``device_per_stream`` pads each stream to whole global batches), and a position
        inside that padding resumes the epoch's last batches, as the reference resumes them."""
        if start <= 0:
            return epoch, start
        plan = self.plan(epoch)
        end = plan.num_samples
        if plan.reference:
            try:
                end = max(end, plan.dealt_span(detect(self.cfg.replication).world, 0)[1])
            except ConfigError:
                pass  # a World this plan refuses: iterating says so
        if start >= end:
            return epoch + 1, 0
        return epoch, start

    def _plan_and_warm(self, epoch: int, start: int) -> None:
        """The epoch's plan, the shuffle blocks of its first positions, and this process's
        engine parts (cache accounting, lease files, fetcher: file I/O) (see aiter)."""
        self.engine.prepare()
        plan = self.plan(epoch)
        ncn = plan.num_canonical_nodes
        if self.cfg.shuffle and start < plan.num_samples:
            plan.global_ids(start, min(start + ncn, plan.num_samples))

    def _next_position(self) -> tuple[int, int]:
        """(epoch, start) the owner's next iteration runs."""
        epoch, start = self._epochs.owner_next()
        return (epoch, start) if self._epochs.keeps_end() else self._normal(epoch, start)

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration (of this process or of its DataLoader workers, persistent
        or not) run ``epoch`` from its start."""
        if isinstance(epoch, bool) or not isinstance(epoch, (int, np.integer)) or epoch < 0:
            raise ConfigError(f"epoch must be an int >= 0, got {epoch!r}")
        self._epochs.reset(int(epoch), 0)
        self._worker_resume = self._worker_next = None
        if self._pack_shared is not None:
            self._pack_shared.clear()

    def _worker_iteration(self) -> None:
        """Count this DataLoader worker's iterations; raise ``StaleIteration`` when the one
        starting now is one its loader has already left (see ``_Epochs.set_iteration``)."""
        pid, n = self._iters
        n = n if pid == os.getpid() else 0
        self._iters = (os.getpid(), n + 1)
        if n < self._epochs.iteration_of(self._loader_token):
            raise StaleIteration

    def _take_epoch(self) -> tuple[int, int]:
        """Epoch and start of the iteration beginning now in this process (see module doc)."""
        me = _worker()
        if me is not None:
            self._worker_iteration()
        if me is None:
            epoch, start = self._next_position()
            self._epochs.reset(epoch + 1, 0)
        elif self._worker_next is not None:
            epoch, start = self._worker_next, 0
            self._worker_next += 1
            self._epochs.worker_take(me[0])
        else:
            epoch, start = self._epochs.worker_take(me[0])
        self._current = (epoch, start)
        self._warn_replication(start, me)
        return epoch, start
