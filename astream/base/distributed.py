"""The reference's ``streaming.base.distributed`` helpers: who this process is in a torchrun
job, and the collectives a conversion or training script calls around a dataset.

The rank getters read torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``), as the reference does; without them, a process group the script
initialised answers ``get_rank``/``get_world_size``, as astream's own placement does, so the two
never disagree about a rank. The collectives act only when a process group is initialised and
otherwise do nothing (one process has nobody to wait for). torch is never imported here: a
script with a process group has imported it already.
"""

from __future__ import annotations

import os
import sys
from typing import Any, TypeVar

__all__ = [
    "all_gather",
    "all_gather_object",
    "barrier",
    "broadcast",
    "get_local_rank",
    "get_local_world_size",
    "get_rank",
    "get_world_size",
]

T = TypeVar("T")


def _group() -> Any:
    """``torch.distributed`` when this process is in an initialised process group, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist
    return None


def _env(name: str, default: int) -> int:
    value = os.environ.get(name, "")
    return int(value) if value != "" else default


def get_rank() -> int:
    """The global rank: ``RANK``, else the process group's rank, else 0."""
    group = _group()
    return _env("RANK", group.get_rank() if group is not None else 0)


def get_world_size() -> int:
    """The number of ranks: ``WORLD_SIZE``, else the process group's size, else 1."""
    group = _group()
    return _env("WORLD_SIZE", group.get_world_size() if group is not None else 1)


def get_local_rank() -> int:
    """The rank within this node: ``LOCAL_RANK``, else 0."""
    return _env("LOCAL_RANK", 0)


def get_local_world_size() -> int:
    """The ranks on this node: ``LOCAL_WORLD_SIZE``, else 1."""
    return _env("LOCAL_WORLD_SIZE", 1)


def barrier() -> None:
    """Wait for every rank of the process group; nothing without one."""
    group = _group()
    if group is not None:
        group.barrier()


def broadcast(tensor: Any, src: int) -> None:
    """Send ``tensor`` from rank ``src`` into every rank's ``tensor``; nothing without a group."""
    group = _group()
    if group is not None:
        group.broadcast(tensor, src)


def all_gather(tensor_list: list[Any], tensor: Any) -> None:
    """Fill ``tensor_list`` with every rank's ``tensor``; nothing without a group."""
    group = _group()
    if group is not None:
        group.all_gather(tensor_list, tensor)


def all_gather_object(obj: T) -> list[T]:
    """Every rank's ``obj``, indexed by rank. One process gets ``[obj]``; a ``WORLD_SIZE`` above
    1 with no process group is a RuntimeError, because the other ranks' objects cannot be had."""
    group = _group()
    if group is not None:
        gathered: list[Any] = [None] * group.get_world_size()
        group.all_gather_object(gathered, obj)
        return gathered
    size = get_world_size()
    if size == 1:
        return [obj]
    raise RuntimeError(
        f"all_gather_object: WORLD_SIZE={size} but no torch.distributed process group is "
        "initialised; call torch.distributed.init_process_group first"
    )
