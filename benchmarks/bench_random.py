"""Local random access, per item: p50/p99 of ``ds[i]`` in a fresh process, astream against
mosaicml-streaming, on one local dataset (no remote) of each kind.

    python benchmarks/bench_random.py --data /tmp/random-data \
        --out benchmarks/results/random-local/raw.json

Data (written once under ``--data`` by astream's writer; both libraries read the same files):
tokens, 50,000 uint16 arrays of 512-2,048 tokens; images, 5,000 samples of 100 kB of random
bytes; 64 MiB shards. Each run is a fresh process per library (imports and construction
outside the timing) reading the same 200 random indices once; the first read of each shard
is in them, which is where the tail is. Runs alternate between the libraries; the report is
the median over runs of each run's p50 and p99, and their ratio (the machine may be loaded:
compare the two libraries from the same run only).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

PEERS = str(Path(__file__).resolve().parent.parent / ".bench" / "peers-venv" / "bin" / "python")
READS = 200

CHILD = r"""
import json, sys, time
import numpy as np
lib, path, reads = sys.argv[1], sys.argv[2], int(sys.argv[3])
if lib == "astream":
    from astream import StreamingDataset
    ds = StreamingDataset(local=path, batch_size=1)
else:
    from streaming import StreamingDataset
    ds = StreamingDataset(local=path, batch_size=1)
idx = np.random.default_rng(0).integers(0, len(ds), reads).tolist()
ts = []
clock = time.perf_counter
for i in idx:
    t0 = clock()
    ds[i]
    ts.append(clock() - t0)
ms = np.array(ts) * 1e3
print(json.dumps({"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
                  "max_ms": float(ms.max()), "mean_ms": float(ms.mean()), "reads": reads}))
"""


def make_data(root: str) -> None:
    import numpy as np

    from astream import MDSWriter

    rng = np.random.default_rng(0)
    path = os.path.join(root, "tokens")
    if not os.path.exists(path):
        with MDSWriter(out=path, columns={"tokens": "ndarray:uint16"}, size_limit=64 << 20) as w:
            for _ in range(50_000):
                n = int(rng.integers(512, 2049))
                w.write({"tokens": rng.integers(0, 50_000, n, dtype=np.uint16)})
    path = os.path.join(root, "images")
    if not os.path.exists(path):
        cols = {"image": "bytes", "label": "int"}
        with MDSWriter(out=path, columns=cols, size_limit=64 << 20) as w:
            for i in range(5_000):
                w.write({"image": rng.bytes(100_000), "label": i})


def one(lib: str, path: str) -> dict[str, float]:
    python = sys.executable if lib == "astream" else PEERS
    env = dict(os.environ, PYTHONHASHSEED="0")
    out = subprocess.run(
        [python, "-c", CHILD, lib, path, str(READS)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def median(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[len(ys) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="/tmp/astream-random-data")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    make_data(args.data)
    report: dict[str, object] = {"reads_per_run": READS, "runs": args.runs, "kinds": {}}
    for kind in ("tokens", "images"):
        path = os.path.join(args.data, kind)
        runs: dict[str, list[dict[str, float]]] = {"astream": [], "mosaic": []}
        for r in range(args.runs):
            order = ("astream", "mosaic") if r % 2 == 0 else ("mosaic", "astream")
            for lib in order:
                runs[lib].append(one(lib, path))
        summary = {
            lib: {k: median([x[k] for x in rs]) for k in ("p50_ms", "p99_ms", "max_ms")}
            for lib, rs in runs.items()
        }
        ratio = {
            k: median([a[k] / m[k] for a, m in zip(runs["astream"], runs["mosaic"])])
            for k in ("p50_ms", "p99_ms")
        }
        report["kinds"][kind] = {"runs": runs, "median": summary, "astream_over_mosaic": ratio}  # type: ignore[index]
        print(kind, json.dumps(summary), "astream/mosaic", json.dumps(ratio), flush=True)
    report["when"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
