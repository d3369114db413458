"""Small pieces the ways of iterating share: where the consumer's DataLoader batch size comes
from, the ids of the batches an override is served, the resume skip, the resharding check."""

from __future__ import annotations

import collections
import sys
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from astream.runtime.placement import detect, resharding_error


def check_resharding(replication: int | None) -> None:
    """On several ranks, refuse a wrapper (accelerate) that would split each rank's part of
    the order again (:func:`~astream.runtime.placement.resharding_error`)."""
    if detect(replication).world.num_ranks > 1:
        err = resharding_error()
        if err is not None:
            raise err


def _bridge_run(coro: Any) -> Any:
    from astream import bridge

    return bridge.run(coro)


def _loader_batch_size() -> tuple[bool, int | None]:
    """(found, batch_size) of the torch DataLoader iterating us, read from its iterator on the
    call stack (in the main process, or in a forked worker whose stack still holds the parent's
    frames). ``found`` is False when no DataLoader iterator is on the stack (spawned workers)."""
    mod = sys.modules.get("torch.utils.data.dataloader")
    if mod is None:
        return False, None
    base = mod._BaseDataLoaderIter
    f: Any = sys._getframe(1)
    while f is not None:
        # only a loader iterator's __init__ (torch's, torchdata's) is asked for its locals:
        # reading ``f_locals`` snapshots a frame's variables, keeping the caller's objects alive
        code = f.f_code
        asked = code.co_name == "__init__" and "dataloader" in code.co_filename.lower()
        me = f.f_locals.get("self") if asked else None
        if isinstance(me, base):
            sampler = getattr(me, "_index_sampler", None)
            bs = getattr(sampler, "batch_size", None)
            return True, bs if isinstance(bs, int) else None
        f = f.f_back
    return False, None


def _recorded(
    batches: Iterable[np.ndarray[Any, Any]], ids: collections.deque[int]
) -> Iterator[Any]:
    for b in batches:
        ids.extend(b.tolist())
        yield b


def _skip(batches: Iterator[np.ndarray[Any, Any]], n: int) -> Iterator[np.ndarray[Any, Any]]:
    """``batches`` less their first ``n`` samples."""
    for b in batches:
        if n >= len(b):
            n -= len(b)
            continue
        yield b[n:]
        n = 0
        break
    yield from batches
