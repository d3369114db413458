"""The decode paths alone: hot epochs of ``ds`` (sample dicts) and ``ds.batches()`` (columns)
in one process, no DataLoader, no collate; optionally beside another astream tree.

    python -m benchmarks.bench_batch_decode DATA [DATA ...] --before DIR --reps 3 --out OUT.json

Each (tree, path, dataset) runs in a fresh subprocess (interleaved, ``--reps`` rounds) that
times ``--epochs`` shuffled epochs and reports samples/s and shard maps (reopens included) of
each, with the process's CPU time (user + system) and minor page faults per epoch: on a
loaded machine the CPU time of an epoch moves much less than its wall time. The figure of a run
is its best epoch after the first (page faults and table builds of the first epoch excluded),
the figure of a case the median over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

# the shuffled order of every epoch, named (the dataset's default is the reference's py1e):
# astream's own block order, as in the figures this benchmark has reported; printed and recorded
ORDER = "astream"
CHILD = (
    f"ORDER = {ORDER!r}\n"
    + r"""
import json, resource, sys, time
from astream import StreamingDataset
from astream.runtime import reader
maps = [0]
init = reader.OpenShard.__init__
def counted(self, *a, **k):
    maps[0] += 1
    init(self, *a, **k)
reader.OpenShard.__init__ = counted  # shard maps, counted the same way in either tree
path, mode, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
ds = StreamingDataset(local=path, batch_size=32, shuffle=True, shuffle_seed=1234,
                      shuffle_algo=ORDER)
out = []
per_epoch = []
cpu = []
faults = []
for e in range(epochs):
    ds.set_epoch(0)
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c = time.process_time()
    t = time.perf_counter()
    m0 = maps[0]
    if mode == "dicts":
        k = sum(1 for _ in ds)
    else:
        k = sum(len(b["label"]) for b in ds.batches(ragged="offsets"))
    out.append(k / (time.perf_counter() - t))
    cpu.append(time.process_time() - c)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    per_epoch.append(maps[0] - m0)
print("MAPS " + json.dumps(per_epoch))
print("CPU " + json.dumps(cpu))
print("FAULTS " + json.dumps(faults))
print("RESULT " + json.dumps(out))
"""
)


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_batch_decode")
    ap.add_argument("data", nargs="+", type=Path, help="local MDS datasets")
    ap.add_argument("--before", type=Path, help="a directory holding another astream package")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    print(f"shuffle_algo={ORDER}")
    here = Path(__file__).resolve().parent.parent
    trees = {"now": here}
    if a.before:
        trees["before"] = a.before.resolve()
    runs: dict[str, list[list[float]]] = {}
    maps: dict[str, list[list[int]]] = {}  # shard files mapped in each epoch of each run
    cpu: dict[str, list[list[float]]] = {}  # CPU seconds of each epoch of each run
    faults: dict[str, list[list[int]]] = {}  # minor page faults of each epoch of each run
    for _rep in range(a.reps):
        for data in a.data:
            for mode in ("dicts", "batches"):
                for name, root in trees.items():
                    env = {**os.environ, "PYTHONPATH": str(root)}
                    cmd = [sys.executable, "-c", CHILD, str(data.resolve()), mode, str(a.epochs)]
                    p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
                    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
                    key = f"{data.name}/{mode}/{name}"
                    if not line:
                        print(key, "failed:", p.stderr[-300:])
                        continue
                    runs.setdefault(key, []).append(json.loads(line[-1][7:]))
                    got = [x for x in p.stdout.splitlines() if x.startswith("MAPS ")]
                    maps.setdefault(key, []).append(json.loads(got[-1][5:]))
                    for tag, into in (("CPU ", cpu), ("FAULTS ", faults)):
                        got = [x for x in p.stdout.splitlines() if x.startswith(tag)]
                        into.setdefault(key, []).append(json.loads(got[-1][len(tag) :]))
    medians = {k: statistics.median(max(r[1:] or r) for r in v) for k, v in runs.items()}
    cpu_ms = {k: 1e3 * statistics.median(min(r[1:] or r) for r in v) for k, v in cpu.items()}
    flt = {k: statistics.median(min(r[1:] or r) for r in v) for k, v in faults.items()}
    for k, v in medians.items():
        print(
            f"{k:32} {v:>10,.0f} samples/s  CPU {cpu_ms[k]:7.1f} ms/epoch  "
            f"faults {flt[k]:>8,.0f}  shard maps per epoch {maps[k][0]}"
        )
    a.out.parent.mkdir(parents=True, exist_ok=True)
    out = {
        "runs": runs,
        "medians": medians,
        "cpu_ms_median": cpu_ms,
        "faults_median": flt,
        "cpu_s": cpu,
        "faults": faults,
        "shard_maps": maps,
        "args": vars(a),
        "shuffle_algo": ORDER,
    }
    a.out.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
