"""Run first in a process of ``benchmarks.get_timeline`` (by path, so any astream tree can be
measured): records every ``stream_range`` of a store (one GET of a shard) and each batch the
harness's consumer receives, into ``$ASTREAM_TIMELINE`` (a line of JSON per event, a file per
process: DataLoader workers inherit the hook through fork)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from typing import Any

import benchmarks.runners.common as common
from astream.storage.retry import RetryingStore

_DIR = os.environ["ASTREAM_TIMELINE"]


def _write(name: str, row: Any) -> None:
    with open(os.path.join(_DIR, name), "a") as f:
        f.write(json.dumps(row) + "\n")


_stream_range = RetryingStore.stream_range


async def _timed_stream_range(
    self: RetryingStore, key: str, start: int, end: int, sink: Any, **kw: Any
) -> int:
    t0 = time.monotonic()
    at0 = getattr(sink, "at", None)
    try:
        return await _stream_range(self, key, start, end, sink, **kw)
    finally:
        at1 = getattr(sink, "at", None)
        row = {"key": key, "lo": start, "hi": end, "start": t0, "end": time.monotonic()}
        row["bytes"] = at1 - at0 if at0 is not None and at1 is not None else -1
        _write(f"gets.{os.getpid()}", row)


_consume = common._consume


def _timed_consume(batches: Iterable[Any], t0: float, ids: list[Any]) -> dict[str, float]:
    _write("batches", time.monotonic())

    def timed() -> Iterator[Any]:
        for b in batches:
            _write("batches", time.monotonic())
            yield b

    return _consume(timed(), t0, ids)


RetryingStore.stream_range = _timed_stream_range  # type: ignore[method-assign]
common._consume = _timed_consume
