"""The planner's timing model (``astream.plan``'s docstring, 3): time to first batch and the
share of an epoch spent waiting for data, from the bytes each step downloads.

May import: stdlib, numpy.
"""

from __future__ import annotations

import bisect

import numpy as np
from numpy.typing import NDArray

__all__ = ["timeline"]

I64 = NDArray[np.int64]


def timeline(
    by_step: I64,
    bandwidth: float,
    latency: float,
    step: float,
    lookahead: int,
    limit: int | None = None,
    opening: int = 1,
) -> tuple[float, float]:
    """(time to first batch, stall share) of the model in the module docstring (3).

    The opening: at the start every consumer (DataLoader worker) asks for its first batch and
    announces its whole prefetch window at once, so the downloads of the node's steps
    ``0 .. opening-1`` -- as many, in step order, as the cache holds together (prefetches take
    free room only) -- are on the link together. They share it: step 0's shards come in with
    the rest, after one latency and all those bytes over the bandwidth."""
    need = np.flatnonzero(by_step)
    marks: list[int] = [0]  # steps whose start time is known exactly; between them, no stall
    starts: list[float] = [0.0]
    burst = 0  # bytes of the opening downloads
    opened = 0  # steps 0 .. opened-1 are in the opening
    for nbytes in by_step[: max(1, opening)].tolist():
        if limit is not None and burst and burst + nbytes > limit:
            break
        burst += nbytes
        opened += 1
    burst_done = latency + burst / bandwidth if burst else 0.0
    link = 0.0
    stall = 0.0
    first = 0.0

    def start_of(x: int) -> float:
        k = bisect.bisect_right(marks, x) - 1
        return starts[k] + (x - marks[k]) * step

    for u in need.tolist():
        if u < opened:
            ready = burst_done  # on the link together with the other opening downloads
        else:
            issue = start_of(u - lookahead) if u - lookahead > 0 else 0.0
            size = float(by_step[u]) / bandwidth
            ready = max(link + size, issue + latency + size)
        link = max(link, ready)
        due = start_of(u)
        if u == 0:
            first = ready
            marks[0], starts[0] = 0, ready
            continue
        if ready > due:
            stall += ready - due
            marks.append(u)
            starts.append(ready)
    total = start_of(len(by_step) - 1) + step if len(by_step) else 0.0
    return first, (stall / total if total > 0 else 0.0)
