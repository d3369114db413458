"""Peak memory (RSS and PSS) of a process tree, sampled from /proc.

A daemon thread wakes every ``interval`` seconds (``Event.wait``, so ``stop`` ends it at once),
sums VmRSS and PSS over the process and all its descendants (DataLoader workers included) and keeps
the maximum. Sampling can miss a short spike; the figure is a lower bound on the true peak.
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


def tree_memory(pid: int) -> tuple[int, int]:
    """(RSS, PSS) in bytes summed over ``pid`` and every descendant.

    RSS counts pages shared between the processes (torch's libraries, a fork's copy-on-write
    pages) once per process; PSS splits each shared page between its sharers, so the PSS sum
    is the tree's real footprint.
    """
    rss = pss = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        rss += _mem_bytes(p, "status", "VmRSS:")
        pss += _mem_bytes(p, "smaps_rollup", "Pss:")
        todo.extend(_children(p))
    return rss, pss


class PeakRSS:
    def __init__(self, interval: float = 0.1, pid: int | None = None) -> None:
        self.pid = os.getpid() if pid is None else pid
        self.interval = interval
        self.peak_rss, self.peak_pss = tree_memory(self.pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="peak-rss", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        rss, pss = tree_memory(self.pid)
        self.peak_rss = max(self.peak_rss, rss)
        self.peak_pss = max(self.peak_pss, pss)

    def __enter__(self) -> PeakRSS:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
