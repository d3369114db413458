"""The planner at scale: time and peak memory of one ``simulate_index`` on a synthetic index.

Run as a program (``python tests/plan/scale_run.py --samples 1e9 --shards 250000 --out F``) it
prints, and with ``--out`` writes, one JSON object: the settings, wall seconds, peak RSS of the
process (``ru_maxrss``) and the figures' totals. ``tests/plan/test_scale.py`` runs it in a
subprocess (so the RSS is this run's alone) and checks the bounds.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=float, default=1e9)
    ap.add_argument("--shards", type=int, default=250_000)
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--num-canonical-nodes", type=int, default=8)
    ap.add_argument("--cache-limit", default="50gb")
    ap.add_argument("--model", default="auto")
    ap.add_argument("--shuffles", default="none,astream", help="comma-separated")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    from astream.plan import simulate_index, synthetic_index

    t0 = time.perf_counter()
    index = synthetic_index(int(a.samples), a.shards)
    t1 = time.perf_counter()
    res = simulate_index(
        index,
        batch_size=a.batch_size,
        nodes=a.nodes,
        ranks_per_node=a.ranks,
        workers=a.workers,
        epochs=a.epochs,
        cache_limit=a.cache_limit,
        cache_policy=("next_use", "lru"),
        shuffles=a.shuffles.split(","),
        model=a.model,
        num_canonical_nodes=a.num_canonical_nodes,
        bandwidth_mbps=10_000,
        latency_ms=20,
        step_ms=100,
    )
    t2 = time.perf_counter()
    use = resource.getrusage(resource.RUSAGE_SELF)
    # VmHWM is this process's own high-water mark; ru_maxrss also counts the forked parent's
    # pages before exec (a large pytest process would be reported as ours)
    rss = _vm_hwm() or use.ru_maxrss * 1024  # Linux: KiB
    out = {
        "command": "python tests/plan/scale_run.py " + " ".join(argv or sys.argv[1:]),
        "machine": "shared 2-core machine, contended (8 helpers)",
        "settings": {k: v for k, v in vars(a).items() if k != "out"},
        "index_build_s": round(t1 - t0, 3),
        "simulate_s": round(t2 - t1, 3),
        "peak_rss_bytes": rss,
        "cpu_s": round(use.ru_utime + use.ru_stime, 3),  # the whole process, imports included
        "python": platform.python_version(),
        "results": [
            {
                "shuffle": r.shuffle,
                "policy": r.policy,
                "model": r.model,
                "bytes_per_epoch": [r.total("bytes", e) for e in range(a.epochs)],
                "downloads_per_epoch": [r.total("downloads", e) for e in range(a.epochs)],
                "max_high_water": max(f.high_water for f in r.epochs),
                "notes": r.notes,
            }
            for r in res
        ],
    }
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
