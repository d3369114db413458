"""Counters a trainer can read: what the loader fetched, hit, evicted and waited for.

One :class:`Stats` per process and dataset. Counters only ever grow; ``snapshot()`` returns a
plain dict that is cheap to log. DataLoader workers keep their own counters (they are separate
processes); the dataset exposes the counters of the process that asks.

Beside the counters of ``snapshot()``, a Stats keeps what :mod:`astream.metrics` labels by
stream: bytes fetched per remote root (:meth:`add_bytes`, on the fetch path), samples per
stream (:meth:`count_streams`, one add per shard group of a batch, and only for datasets of
two or more streams: a single stream's figures are the totals), and ``live``, the running
iteration's prefetcher and lookahead, read for the prefetch-depth gauges. All of it is plain
int adds; none of it runs per sample.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Stats:
    bytes_fetched: int = 0  # bytes received from remote stores
    shards_fetched: int = 0  # whole-shard downloads completed by this process
    range_requests: int = 0  # GETs issued (whole-shard parts and random-access ranges)
    cache_hits: int = 0  # shard opens served from the local cache
    cache_misses: int = 0  # shard opens that had to wait for a download
    shard_maps: int = 0  # shard files mapped (first opens plus reopens after the LRU closed them)
    shard_drops: int = 0  # open shards whose pages were unmapped (no lookahead batch reads them)
    shard_copies: int = 0  # shards read by copy, not through their map (past map_memory)
    integrity_retries: int = 0  # downloads redone after a hash mismatch
    retries: int = 0  # transient storage failures retried (5xx, resets, cut bodies, timeouts)
    samples: int = 0  # samples yielded or returned
    wait_seconds: float = 0.0  # time the consumer spent waiting for data to arrive

    def __post_init__(self) -> None:
        self.stream_samples: list[int] = []  # per stream (sized by the engine when 2+ streams)
        self.stream_bytes: dict[str, int] = {}  # bytes fetched per remote root
        self.live: Any = None  # weak refs to the running iteration's (Prefetcher, Lookahead)
        self._stream_of: tuple[Any, list[int]] | None = None  # (shard_stream, as a list)

    def snapshot(self) -> dict[str, float]:
        return asdict(self)

    def add_bytes(self, remote: str | None, n: int) -> None:
        """``n`` bytes received from ``remote`` (a stream's root URL)."""
        self.bytes_fetched += n
        key = remote or ""
        self.stream_bytes[key] = self.stream_bytes.get(key, 0) + n

    def count_streams(self, groups: Sequence[Any], shard_stream: Any) -> None:
        """Add a decoded batch's samples to their streams (``groups``: ``batch_groups``).
        ``shard_stream`` (the catalog's array) is read through a plain list made once: a
        numpy scalar per group cost more than the rest of the count."""
        table = self._stream_of
        if table is None or table[0] is not shard_stream:
            table = self._stream_of = (shard_stream, list(map(int, shard_stream)))
        of, per = table[1], self.stream_samples
        for s, positions, _ in groups:
            per[of[s]] += len(positions)


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
