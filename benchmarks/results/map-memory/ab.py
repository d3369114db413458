"""What ``map_memory`` costs and saves on a hot epoch: the dataset's default bound against no
bound (``map_memory=None``), same data, same order, interleaved, one fresh process per run.

    python benchmarks/results/map-memory/ab.py --data .bench/work/data/astream/tokens \
        --reps 5 --workers 0,2 --out benchmarks/results/map-memory/ab.json

Each run builds ``StreamingDataset(local=DATA, shuffle=True, shuffle_seed=1234, batch_size=32)``
at the dataset's default order (py1e) with the given ``map_memory``, reads one epoch through
``StreamingDataLoader`` with the benchmarks' shared collate (``--format dicts``) or as column
batches (``--format torch``), and reports samples/s, the CPU
seconds of its process tree per sample, the peak PSS of its process tree (sampled every 0.1 s
from a thread, ``benchmarks/runners/rss.py``) and ``shard_copies``. Medians close the output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

CHILD = r"""
import json, resource, sys, time
from astream import StreamingDataset
from astream.torch.dataloader import StreamingDataLoader
from benchmarks.collate import collate
from benchmarks.runners.rss import PeakRSS
data, mem, workers, fmt = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ds = StreamingDataset(local=data, shuffle=True, shuffle_seed=1234, batch_size=32, map_memory=mem)
if fmt == "dicts":
    loader = StreamingDataLoader(ds, batch_size=32, num_workers=workers, collate_fn=collate)
else:
    loader = StreamingDataLoader(ds, batch_size=32, num_workers=workers, batch_format=fmt,
                                 ragged="offsets")
with PeakRSS() as peak:
    c0 = time.process_time()
    t0 = time.perf_counter()
    n = 0
    for b in loader:
        n += len(b["id"])
    wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = time.process_time() - c0 + ru[1].ru_utime + ru[1].ru_stime
print("RESULT " + json.dumps({"samples": n, "samples_per_s": n / wall, "cpu_us_per_sample":
      cpu / n * 1e6, "peak_pss_mb": peak.peak_pss / 1e6, "shard_copies": ds.stats.shard_copies}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--workers", default="0")
    ap.add_argument(
        "--format",
        default="dicts",
        help="'dicts' (sample dicts through the shared "
        "collate) or a batch_format ('torch': column batches, ragged='offsets')",
    )
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    sides = {"default": "64 << 20", "none": "None"}
    runs = []
    for rep in range(a.reps):
        for w in (int(x) for x in a.workers.split(",")):
            for side, mem in (("default", 64 << 20), ("none", None)):
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, a.data, json.dumps(mem), str(w), a.format],
                    cwd=ROOT,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
                res = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[7:])
                runs.append({"rep": rep, "workers": w, "side": side, **res})
                print(json.dumps(runs[-1]), flush=True)
    print(f"\nmedians (map_memory: default = {sides['default']}, none = {sides['none']})")
    for w in sorted({r["workers"] for r in runs}):
        for side in sides:
            mine = [r for r in runs if r["workers"] == w and r["side"] == side]
            med = {
                k: statistics.median(r[k] for r in mine)
                for k in ("samples_per_s", "cpu_us_per_sample", "peak_pss_mb", "shard_copies")
            }
            print(f"w{w} {side}: " + ", ".join(f"{k} {v:,.2f}" for k, v in med.items()))
    if a.out is not None:
        a.out.write_text(json.dumps(runs, indent=1) + "\n")


if __name__ == "__main__":
    main()
