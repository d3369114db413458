"""Who am I in the job: nodes, ranks and DataLoader workers, read from torchrun and torch.

torch is never imported here: only a program that imported it can have a process group or
DataLoader workers, so those are asked only when ``torch`` is already in ``sys.modules``. An
asyncio trainer without torch is a single rank with no workers unless torchrun's variables say
otherwise, and pays neither torch's import time (1-2 s) nor its memory.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``; without them a
process group the *user* initialised is asked (we never create or destroy one); without either
this is a single process. The DataLoader's ``get_worker_info()`` gives the worker.

A rank's part of the epoch is dealt once, by astream: :func:`resharding_error` is the check a
dataset makes, on several ranks, that no trainer wrapper on the call stack (accelerate's,
transformers') splits that part between the ranks a second time. It reads the stack only and
imports neither package.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from astream.core.world import World
from astream.errors import ConfigError

__all__ = [
    "Placement",
    "dataloader_worker",
    "rank_readers",
    "detect",
    "detect_resharding",
    "resharding_error",
]


@dataclass(frozen=True)
class Placement:
    world: World
    rank: int  # global rank
    worker: int  # DataLoader worker id within the rank (0 without workers)


def dataloader_worker() -> tuple[int, int] | None:
    """(worker id, num_workers) when this process is a torch DataLoader worker. Never imports
    torch: a program that has not imported it has no workers."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    info = data.get_worker_info()
    return None if info is None else (int(info.id), int(info.num_workers))


def rank_readers() -> int:
    """The processes that read this rank's iteration: its DataLoader's workers, or 1 (the
    main process alone). A per-rank budget is split among them."""
    me = dataloader_worker()
    return me[1] if me is not None and me[1] > 0 else 1


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from None


def _ranks() -> tuple[int, int, int]:
    """(global rank, world size, ranks per node)."""
    rank, size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or size is None:
        dist = sys.modules.get("torch.distributed")
        if dist is not None and dist.is_available() and dist.is_initialized():
            rank, size = dist.get_rank(), dist.get_world_size()
    if rank is None or size is None:
        return 0, 1, 1
    local = _env_int("LOCAL_WORLD_SIZE") or size
    if size % local:
        raise ConfigError(f"WORLD_SIZE={size} is not a multiple of LOCAL_WORLD_SIZE={local}")
    if not 0 <= rank < size:
        raise ConfigError(f"RANK={rank} is outside WORLD_SIZE={size}")
    return rank, size, local


def detect(replication: int | None = None) -> Placement:
    """This process's place. ``replication`` groups that many consecutive ranks into one
    replica that sees the same samples (tensor/sequence parallelism)."""
    rank, size, local = _ranks()
    workers, worker = 1, 0
    data = sys.modules.get("torch.utils.data")
    if data is not None:
        info = data.get_worker_info()
        if info is not None:
            workers, worker = info.num_workers, info.id
    if replication is not None and replication > 1:
        if local % replication:
            raise ConfigError(f"replication={replication} must divide the ranks per node ({local})")
        return Placement(
            World(size // local, local // replication, workers), rank // replication, worker
        )
    return Placement(World(size // local, local, workers), rank, worker)


# (module prefix, class name) of the wrappers that split an IterableDataset between ranks again.
_RESHARDERS = {
    ("accelerate", "DataLoaderDispatcher"),
    ("accelerate", "IterableDatasetShard"),
    ("transformers", "IterableDatasetShard"),
}


def detect_resharding() -> str | None:
    """The name of an accelerate/transformers wrapper on the call stack that splits an iterable
    dataset between ranks (and so would split astream's per-rank stream a second time), or None.
    Imports nothing; cheap enough to call once per epoch from ``__iter__``."""
    f: Any = sys._getframe(0)
    while f is not None:
        # only iterator frames and those packages' frames are asked for their locals (reading
        # ``f_locals`` snapshots a frame's variables, which would keep the caller's objects alive)
        code = f.f_code
        asked = code.co_name == "__iter__" or any(
            pkg in code.co_filename for pkg in ("accelerate", "transformers")
        )
        me = f.f_locals.get("self") if asked else None
        if me is not None:
            cls = type(me)
            root = cls.__module__.split(".", 1)[0]
            if (root, cls.__name__) in _RESHARDERS:
                return f"{cls.__module__}.{cls.__name__}"
        f = f.f_back
    return None


def resharding_error() -> ConfigError | None:
    """The error for a StreamingDataset iterated under a wrapper that splits it between ranks
    again (see :func:`detect_resharding`; called by the dataset when it runs on several ranks),
    or None."""
    found = detect_resharding()
    if found is None:
        return None
    return ConfigError(
        f"StreamingDataset is being split between ranks a second time by {found}: astream "
        "already gives each rank its own part of the epoch, so this rank would see only part "
        "of it (the Hugging Face Trainer passes iterable datasets through accelerate this way). "
        "Use astream.integrations.hf.StreamingTrainer (or StreamingTrainerMixin) instead of "
        "transformers.Trainer"
    )
