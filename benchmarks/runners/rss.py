"""Peak memory (RSS and PSS) of a process tree, sampled from /proc.

A daemon thread wakes every ``interval`` seconds (``Event.wait``, so ``stop`` ends it at once),
sums VmRSS and PSS over the process and all its descendants (DataLoader workers included) and keeps
the maximum. Sampling can miss a short spike; the figure is a lower bound on the true peak.

At the sample with the highest PSS it also keeps that PSS split by kind of page, summed over the
tree (``peak_parts``: ``anon`` -- heaps, Python objects, thread stacks; ``file`` -- mapped files:
libraries and shard pages read through a map; ``shmem`` -- shared memory such as the workers'
batch rings), which is where to look first when a peak moves.
"""

from __future__ import annotations

import os
import threading


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except OSError:
        pass
    return out


def _mem_bytes(pid: int, path: str, field: str) -> int:
    try:
        with open(f"/proc/{pid}/{path}") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


_PARTS = {"Pss:": "pss", "Pss_Anon:": "anon", "Pss_File:": "file", "Pss_Shmem:": "shmem"}


def _rollup(pid: int) -> dict[str, int]:
    """PSS and its parts (bytes) from ``/proc/PID/smaps_rollup``; empty if it is gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key = _PARTS.get(line.split(None, 1)[0])
                if key is not None:
                    out[key] = int(line.split()[1]) * 1024
    except OSError:
        pass
    return out


def tree_usage(pid: int) -> tuple[int, dict[str, int]]:
    """(RSS, {"pss", "anon", "file", "shmem"}) in bytes summed over ``pid`` and every
    descendant."""
    rss = 0
    parts = dict.fromkeys(_PARTS.values(), 0)
    todo = [pid]
    while todo:
        p = todo.pop()
        rss += _mem_bytes(p, "status", "VmRSS:")
        for k, v in _rollup(p).items():
            parts[k] += v
        todo.extend(_children(p))
    return rss, parts


def tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over ``pid`` and every descendant.

    RSS counts pages shared between the processes (torch's libraries, a fork's copy-on-write
    pages) once per process; PSS splits each shared page between its sharers, so the PSS sum
    is the tree's real footprint.
    """
    rss, parts = tree_usage(pid)
    return rss, parts["pss"]


class PeakRSS:
    def __init__(self, interval: float = 0.1, pid: int | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.interval = interval
        self.peak_rss, self.peak_parts = tree_usage(self.pid)
        self.peak_pss = self.peak_parts["pss"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        rss, parts = tree_usage(self.pid)
        self.peak_rss = max(self.peak_rss, rss)
        if parts["pss"] > self.peak_pss:
            self.peak_pss, self.peak_parts = parts["pss"], parts

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
