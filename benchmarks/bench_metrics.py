#!/usr/bin/env python
"""Hot-path cost of the metrics counters: a hot (fully cached, local) epoch, samples/s.

    .venv/bin/python benchmarks/bench_metrics.py --base /tmp/metrics-base [--n 20000] [--repeat 7]

``--base`` is a checkout of astream before the metrics counters (``git archive <commit> astream
| tar -x -C DIR``). Each repeat runs, in fresh subprocesses and alternating order: the base
code, this tree with metrics off, and this tree under ``Metrics(prometheus_port=0)``, over one
single-stream and one two-stream dataset (the only case that counts per stream in the loop).
Prints one JSON object: medians of samples/s per variant and dataset.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RUN = r"""
import sys, time
from astream import Stream, StreamingDataset
dirs, metrics = sys.argv[1].split(","), sys.argv[2] == "on"
streams = [Stream(local=d) for d in dirs]
ds = StreamingDataset(streams=streams, batch_size=32)
m = None
if metrics:
    from astream.metrics import Metrics
    m = Metrics(ds, prometheus_port=0)
sum(1 for _ in ds)  # warm: open shards once
t = time.perf_counter(); n = sum(1 for _ in ds); dt = time.perf_counter() - t
if m is not None:
    m.close()
print(n / dt)
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from astream import MDSWriter

    tmp = tempfile.mkdtemp(prefix="bench-metrics-")
    for name, first in (("a", 0), ("b", args.n // 2)):
        with MDSWriter(out=os.path.join(tmp, name), columns={"x": "int", "y": "str"}) as w:
            for i in range(first, first + args.n // 2):
                w.write({"x": i, "y": f"s{i}"})
    sets = {"one": os.path.join(tmp, "a"), "two": f"{tmp}/a,{tmp}/b"}
    variants = {"base": (args.base, "off"), "off": (ROOT, "off"), "on": (ROOT, "on")}
    res: dict[str, list[float]] = {f"{v}/{s}": [] for v in variants for s in sets}
    for r in range(args.repeat):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for v in order:
            path, flag = variants[v]
            for s, dirs in sets.items():
                env = dict(os.environ, PYTHONPATH=path, ASTREAM_RUNTIME_DIR=tmp + "/rt")
                out = subprocess.run(
                    [sys.executable, "-c", RUN, dirs, flag],
                    env=env, capture_output=True, text=True, check=True, cwd=tmp,
                )  # fmt: skip
                res[f"{v}/{s}"].append(float(out.stdout.strip()))
    med = {k: statistics.median(v) for k, v in res.items()}
    print(json.dumps({"n": args.n, "repeat": args.repeat, "median_samples_per_s": med,
                      "raw": res}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
