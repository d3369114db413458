"""Counters a trainer can read: what the loader fetched, hit, evicted and waited for.

One :class:`Stats` per process and dataset. Counters only ever grow; ``snapshot()`` returns a
plain dict that is cheap to log. DataLoader workers keep their own counters (they are separate
processes); the dataset exposes the counters of the process that asks.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass


@dataclass
class Stats:
    bytes_fetched: int = 0  # bytes received from remote stores
    shards_fetched: int = 0  # whole-shard downloads completed by this process
    range_requests: int = 0  # GETs issued (whole-shard parts and random-access ranges)
    cache_hits: int = 0  # shard opens served from the local cache
    cache_misses: int = 0  # shard opens that had to wait for a download
    integrity_retries: int = 0  # downloads redone after a hash mismatch
    retries: int = 0  # transient storage failures retried (5xx, resets, cut bodies, timeouts)
    samples: int = 0  # samples yielded or returned
    wait_seconds: float = 0.0  # time the consumer spent waiting for data to arrive

    def snapshot(self) -> dict[str, float]:
        return asdict(self)


class Stopwatch:
    """``with Stopwatch(stats): ...`` adds the elapsed time to ``stats.wait_seconds``."""

    __slots__ = ("_stats", "_t0")

    def __init__(self, stats: Stats) -> None:
        self._stats = stats
        self._t0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stats.wait_seconds += time.perf_counter() - self._t0
