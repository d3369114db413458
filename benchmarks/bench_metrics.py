#!/usr/bin/env python
"""Hot-path cost of the metrics: one hot (fully cached, local) epoch, per sample.

    .venv/bin/python benchmarks/bench_metrics.py [--n 20000] [--repeat 5] [--callgrind]
        [--out DIR]

Three variants of the same tree, each in fresh subprocesses:

- ``bare``: this tree with every metrics statement of the read path replaced by ``pass`` (the
  per-batch ``stats.samples`` add and per-stream count, the cache hit/miss adds, the prefetch
  gauges' weak references; see ``STRIP``) -- astream as if it had no metrics at all;
- ``off``: this tree as shipped, no :class:`~astream.metrics.Metrics` (the counters run);
- ``on``: this tree under ``Metrics(ds, prometheus_port=0, interval=0.1)`` -- the publisher
  thread writes the main record ten times a second and the HTTP endpoint is up.

Each runs over a single-stream and a two-stream dataset (the two-stream case also counts
samples per stream in the loop). Two measures:

- wall clock (always): samples/s of the hot epoch, ``--repeat`` reps, the variants interleaved
  and their order alternated rep by rep; medians;
- ``--callgrind``: instructions executed per sample of the hot epoch (valgrind's callgrind,
  deterministic, insensitive to the machine's load). The process starts uninstrumented, turns
  instrumentation on just before the measured epoch (``callgrind_control -i on``) and counts
  only inside ``functools.reduce``, which drives the measured epoch -- so the import, the
  warm-up epoch and other threads (the loop thread, the metrics publisher) are not counted:
  this is the consumer's own path. One run per variant and dataset.

Every variant runs ``gc.collect(); gc.freeze()`` after the warm-up epoch: with torch imported
the heap holds millions of objects and one full collection takes a few hundred milliseconds,
longer than the whole measured epoch; when it fell inside the epoch it made any variant look
several times slower (an earlier run without the freeze measured "on" at a tenth of "off" for
that reason alone: merely importing ``http.server`` moved the collection into the epoch).

Writes ``results.json`` (medians, raw values, the command, the commit) to ``--out`` and prints
it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (file under astream/, a statement of the read path that only serves metrics, its stand-in)
STRIP = (
    ("runtime/iterate.py", r"stats\.samples \+= size", "pass"),
    ("runtime/iterate.py", r"stats\.count_streams\(groups, self\.catalog\.shard_stream\)", "pass"),
    ("runtime/iterate.py", r"self\.multi = bool\(stats\.stream_samples\)", "self.multi = False"),
    ("runtime/iterate.py", r"stats\.live = \(weakref\.ref\(pf\), weakref\.ref\(la\)\).*", "pass"),
    ("runtime/reader.py", r"self\.stats\.cache_(hits|misses) \+= 1", "pass"),
)

RUN = r"""
import functools, gc, os, subprocess, sys, time
from astream import Stream, StreamingDataset
dirs, metrics, cg = sys.argv[1].split(","), sys.argv[2] == "on", sys.argv[3] == "cg"
ds = StreamingDataset(streams=[Stream(local=d) for d in dirs], batch_size=32)
m = None
if metrics:
    from astream.metrics import Metrics
    m = Metrics(ds, prometheus_port=0, interval=0.1)
for _ in ds:  # warm: open the shards once
    pass
gc.collect()  # a full collection of torch's heap takes ~0.3 s: keep it out of the epoch
gc.freeze()
if cg:
    subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], check=True,
                   capture_output=True)
t = time.perf_counter()
n = functools.reduce(lambda a, _: a + 1, iter(ds), 0)  # the measured epoch
dt = time.perf_counter() - t
if m is not None:
    m.close()
print(n, dt)
"""


def make_bare(dst: str) -> str:
    """A copy of this tree's ``astream`` package with the statements of ``STRIP`` replaced."""
    shutil.copytree(os.path.join(ROOT, "astream"), os.path.join(dst, "astream"))
    for rel, pattern, stand_in in STRIP:
        path = os.path.join(dst, "astream", rel)
        with open(path) as f:
            src = f.read()
        new, k = re.subn(rf"(?m)^(\s*){pattern}$", rf"\g<1>{stand_in}", src)
        if k == 0:
            raise SystemExit(f"bench_metrics: {pattern!r} not found in astream/{rel}: update STRIP")
        with open(path, "w") as f:
            f.write(new)
    return dst


def run(path: str, dirs: str, flag: str, tmp: str, cg_out: str | None) -> tuple[int, float, int]:
    """(samples, seconds, instructions or 0) of one measured epoch in a fresh process."""
    env = dict(os.environ, PYTHONPATH=path, ASTREAM_RUNTIME_DIR=tmp + "/rt", PYTHONHASHSEED="0")
    cmd = [sys.executable, "-c", RUN, dirs, flag, "cg" if cg_out else "wall"]
    if cg_out:
        cmd = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no",
            "--toggle-collect=functools_reduce", f"--callgrind-out-file={cg_out}", *cmd,
        ]  # fmt: skip
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp)
    if out.returncode != 0:
        raise SystemExit(f"bench_metrics: {cmd[-3:]} failed:\n{out.stderr[-3000:]}")
    n_text, dt_text = out.stdout.split()
    ir = 0
    if cg_out:
        with open(cg_out) as f:
            m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        assert m is not None, "no totals in the callgrind output"
        ir = int(m.group(1))
    return int(n_text), float(dt_text), ir


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--callgrind", action="store_true")
    ap.add_argument("--sets", default="one,two", help="datasets to run: one, two or both")
    ap.add_argument("--out", default=None, help="directory for results.json")
    args = ap.parse_args()
    sys.path.insert(0, ROOT)
    from astream import MDSWriter

    commit = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())

    tmp = tempfile.mkdtemp(prefix="bench-metrics-")
    for name, first in (("a", 0), ("b", args.n // 2)):
        with MDSWriter(out=os.path.join(tmp, name), columns={"x": "int", "y": "str"}) as w:
            for i in range(first, first + args.n // 2):
                w.write({"x": i, "y": f"s{i}"})
    sets = {"one": os.path.join(tmp, "a"), "two": f"{tmp}/a,{tmp}/b"}
    sets = {k: v for k, v in sets.items() if k in args.sets.split(",")}
    bare = make_bare(os.path.join(tmp, "bare"))
    variants = {"bare": (bare, "off"), "off": (ROOT, "off"), "on": (ROOT, "on")}
    sizes = {"one": args.n // 2, "two": args.n}
    sizes = {k: v for k, v in sizes.items() if k in sets}
    wall: dict[str, list[float]] = {f"{v}/{s}": [] for v in variants for s in sets}
    for r in range(args.repeat):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for v in order:
            path, flag = variants[v]
            for s, dirs in sets.items():
                n, dt, _ = run(path, dirs, flag, tmp, None)
                assert n == sizes[s], (v, s, n)
                wall[f"{v}/{s}"].append(n / dt)
    result: dict[str, object] = {
        "command": " ".join(["benchmarks/bench_metrics.py", *sys.argv[1:]]),
        "commit": commit,
        "date": date,
        "samples": sizes,
        "repeat": args.repeat,
        "median_samples_per_s": {k: statistics.median(v) for k, v in wall.items()},
        "raw_samples_per_s": wall,
    }
    if args.callgrind:
        ir: dict[str, float] = {}
        for v, (path, flag) in variants.items():
            for s, dirs in sets.items():
                n, _, total = run(path, dirs, flag, tmp, os.path.join(tmp, f"cg.{v}.{s}"))
                assert n == sizes[s], (v, s, n)
                ir[f"{v}/{s}"] = total / n
        result["instructions_per_sample"] = ir
        result["instructions_vs_bare"] = {
            k: ir[k] / ir[f"bare/{k.split('/')[1]}"] for k in ir if not k.startswith("bare/")
        }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            f.write(text + "\n")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
