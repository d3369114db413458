"""What random access learns as it reads: the time a store takes per request and per byte
(:class:`StoreCosts`), and the samples it has read by range (:class:`SampleMemo`).

A ranged GET costs mostly its latency, a whole-shard download mostly its bytes, so the choice
between them (``random_access.py``) is made in time. Each store keeps two running estimates,
exponentially weighted so they follow a store that changes speed: the latency of one request
and the bandwidth of a whole-shard download. Before a store has been measured they are seeded
with ``SEED_LATENCY`` and ``SEED_BANDWIDTH``; the first ranged read replaces the latency seed,
the first whole-shard download the bandwidth seed.

The memo keeps the raw bytes of samples read by range, least recently used first out, within
``limit`` bytes (``random_memory``): a second read of one of them costs no request. It keeps
bytes, not decoded samples, so each read decodes a fresh sample the caller may change freely.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from astream.errors import ConfigError

__all__ = ["DEFAULT_MEMORY", "SampleMemo", "StoreCosts", "check_memory"]

SEED_LATENCY = 0.03  # seconds: an object store's first byte, before any request is measured
SEED_BANDWIDTH = 64 << 20  # bytes/s: a whole-shard download, before one is measured
_WEIGHT = 0.25  # of each new measurement in the running estimates
_MIN_SECONDS = 1e-6  # a duration never measured as zero (a clock's resolution)
DEFAULT_MEMORY = 64 << 20  # bytes of range-read samples random access keeps per process
_MAX_MEMORY = 1 << 46  # 64 TiB: a bound beyond any machine's memory, to catch unit mistakes


def check_memory(value: object, name: str = "random_memory", none: bool = False) -> Any:
    """``value`` as given, or :class:`ConfigError` naming the argument ``name``: an int of
    bytes in ``0..2**46``, or None where ``none`` allows it (no bound)."""
    if none and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MAX_MEMORY:
        also = " or None" if none else ""
        raise ConfigError(
            f"{name} must be an int of bytes in 0..{_MAX_MEMORY}{also}, got {value!r}"
        )
    return value


class StoreCosts:
    """The running estimates of one store: ``latency`` (seconds per request) and
    ``bandwidth`` (bytes per second of a whole-shard download)."""

    __slots__ = ("_bandwidth_seen", "_latency_seen", "bandwidth", "latency")

    def __init__(self) -> None:
        self.latency = SEED_LATENCY
        self.bandwidth = float(SEED_BANDWIDTH)
        self._latency_seen = False
        self._bandwidth_seen = False

    def ranged(self, nbytes: int, seconds: float) -> None:
        """One ranged read of ``nbytes`` took ``seconds``: its time less its bytes at the
        bandwidth is a latency. A read faster than the bandwidth allows proves the bandwidth
        at least ``nbytes / seconds``."""
        seconds = max(seconds, _MIN_SECONDS)
        if nbytes / seconds > self.bandwidth:
            self.bandwidth = nbytes / seconds
        lat = max(seconds - nbytes / self.bandwidth, 0.0)
        self.latency = _mix(self.latency, lat, self._latency_seen)
        self._latency_seen = True

    def whole(self, nbytes: int, seconds: float) -> None:
        """One whole-shard download of ``nbytes`` took ``seconds``: less one request's
        latency, its bytes give a bandwidth."""
        if nbytes <= 0:
            return
        moving = max(seconds - self.latency, seconds / 2, _MIN_SECONDS)
        self.bandwidth = _mix(self.bandwidth, nbytes / moving, self._bandwidth_seen)
        self._bandwidth_seen = True

    def price(self, nbytes: int, requests: int = 1) -> float:
        """Estimated seconds to download ``nbytes`` whole in ``requests`` objects (a split
        shard: its meta file and its data file): their latencies, then their bytes."""
        return requests * self.latency + nbytes / self.bandwidth


def _mix(old: float, new: float, seen: bool) -> float:
    return new if not seen else old + _WEIGHT * (new - old)


class SampleMemo:
    """Raw bytes of samples read by range, keyed by (shard, sample), at most ``limit`` bytes
    in all, least recently used out first; a sample larger than ``limit`` is not kept. Used
    from the caller's thread (``get``) and astream's loop thread (``aget``), under a lock."""

    __slots__ = ("_items", "_lock", "limit", "nbytes")

    def __init__(self, limit: int = DEFAULT_MEMORY) -> None:
        self.limit = limit
        self.nbytes = 0
        self._items: OrderedDict[tuple[int, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, s: int, li: int) -> bytes | None:
        if not self._items:
            return None
        with self._lock:
            data = self._items.get((s, li))
            if data is not None:
                self._items.move_to_end((s, li))
            return data

    def put(self, s: int, li: int, data: bytes) -> None:
        if len(data) > self.limit:
            return
        with self._lock:
            items = self._items
            old = items.pop((s, li), None)
            if old is not None:
                self.nbytes -= len(old)
            while items and self.nbytes + len(data) > self.limit:
                _, gone = items.popitem(last=False)
                self.nbytes -= len(gone)
            items[(s, li)] = data
            self.nbytes += len(data)

    def drop_shard(self, s: int) -> None:
        """Forget shard ``s``'s samples (it is in the cache now: read from there)."""
        with self._lock:
            for key in [k for k in self._items if k[0] == s]:
                self.nbytes -= len(self._items.pop(key))
