"""The physical limits beside the libraries, measured on the same files and objects.

- ``physical/seqread/<wl>``: a plain sequential read (16 MiB ``readinto``) of every file of a
  library's written copy, page cache warm: the ceiling for hot-cache epochs.
- ``physical/s3get/<wl>/<latency>``: aiobotocore alone GETs every object of the workload
  concurrently (8 at a time) through the same proxy as the cold runs; ``.../direct`` skips
  the proxy: the ceiling for cold streaming.
- ``compat/<wl>``: whether astream's and mosaic's written copies are byte-identical.
"""

from __future__ import annotations

import filecmp
import time
from pathlib import Path
from typing import Any


def _files(root: Path) -> list[Path]:
    return [p for p in sorted(root.rglob("*")) if p.is_file()]


def _read_all(files: list[Path], buf: bytearray) -> int:
    total = 0
    view = memoryview(buf)
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while n := f.readinto(view):
                total += n
    return total


def sequential_reads(h: Any) -> None:
    buf = bytearray(16 << 20)
    seen: set[Path] = set()
    for (lib, wl), root in sorted(h.data.items()):
        if root in seen:
            continue
        seen.add(root)
        files = _files(root)
        _read_all(files, buf)  # warm the page cache
        for rep in range(h.a.reps):
            t0 = time.perf_counter()
            n = _read_all(files, buf)
            dt = time.perf_counter() - t0
            h.records.append(
                {
                    "key": f"physical/seqread/{wl}",
                    "lib": lib,
                    "rep": rep,
                    "status": "ok",
                    "bytes": n,
                    "seconds": dt,
                    "mb_per_s": n / dt / 1e6,
                }
            )
    h.log("physical: sequential reads done")


def raw_get(h: Any, wl: str, label: str) -> None:
    from benchmarks.s3util import raw_get_all

    lib = (
        "mosaic" if ("mosaic", wl) in h.data else next((lb for (lb, w) in h.data if w == wl), None)
    )
    if lib is None:
        return
    for rep in range(h.a.reps):
        r = raw_get_all(h.s3.endpoint, "bench", f"{lib}/{wl}")
        h.records.append(
            {"key": f"physical/s3get/{wl}/{label}", "lib": "sdk", "rep": rep, "status": "ok", **r}
        )
        if label == "0ms":  # once per run, not again for the "-close" label
            d = raw_get_all(h.s3.direct, "bench", f"{lib}/{wl}")
            h.records.append(
                {
                    "key": f"physical/s3get/{wl}/direct",
                    "lib": "sdk",
                    "rep": rep,
                    "status": "ok",
                    **d,
                }
            )


def compare_bytes(h: Any) -> None:
    for wl in h.a.workloads:
        a, m = h.data.get(("astream", wl)), h.data.get(("mosaic", wl))
        if a is None or m is None or a == m:
            continue
        fa = [p.relative_to(a) for p in _files(a)]
        fm = [p.relative_to(m) for p in _files(m)]
        same = fa == fm and all(filecmp.cmp(a / p, m / p, shallow=False) for p in fa)
        h.records.append(
            {
                "key": f"compat/{wl}",
                "lib": "astream",
                "rep": 0,
                "status": "ok",
                "identical_to_mosaic": 1.0 if same else 0.0,
                "files": len(fa),
            }
        )
