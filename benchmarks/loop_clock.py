"""How long one loop callback of an ``aiter`` epoch runs, at ten million samples.

Each run is a fresh interpreter (as a training program starts) that opens a local dataset of
``--samples`` one-int samples (4 MB shards, written once under ``--data``), reads a shuffled
epoch with ``aiter(batch_size=64)`` over planned batches of 25,000 samples, and prints the loop
clock of ``tests/engine/loopclock.py``: the longest callback's CPU time less the garbage
collections inside it (``own``), the full collections that ran (``full``) and the longest of
them (``pause``). ``--hogs 2`` runs two CPU-bound processes beside it (a 2-core machine fully
busy). ``--root`` reads astream from another checkout (say, the code before a change); the
clock is always this checkout's.

    .venv/bin/python -m benchmarks.loop_clock --runs 5 --out docs/results/loop_clock.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parents[1]

CHILD = """
import importlib.util, json, sys
sys.path.insert(0, sys.argv[2])
spec = importlib.util.spec_from_file_location("loopclock", sys.argv[3])
clock = sys.modules["loopclock"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(clock)
n = int(sys.argv[4])
print(json.dumps(clock.longest(clock.hot_epoch(sys.argv[1]), n).as_dict()))
"""


def _write(path: str, n: int) -> None:
    if os.path.exists(os.path.join(path, "index.json")):
        return
    sys.path.insert(0, str(HERE))
    from astream import MDSWriter

    with MDSWriter(out=path, columns={"x": "int"}, size_limit="4mb") as w:
        for i in range(n):
            w.write({"x": i})


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=10_000_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--hogs", type=int, default=0, help="CPU-bound processes beside each run")
    ap.add_argument("--data", default="/tmp/astream-loop-clock")
    ap.add_argument("--root", default=str(HERE), help="the checkout whose astream is read")
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", help="JSON file to add this series to")
    a = ap.parse_args(argv)
    data = f"{a.data}-{a.samples}"
    _write(data, a.samples)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.hogs)]
    runs: list[dict[str, Any]] = []
    try:
        for _ in range(a.runs):
            child = [CHILD, data, a.root, str(HERE / "tests/engine/loopclock.py"), str(a.samples)]
            got = subprocess.run([sys.executable, "-c", *child], capture_output=True, text=True)
            if got.returncode:
                raise SystemExit(got.stderr[-3000:])
            runs.append(json.loads(got.stdout.splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    own = sorted(r["own"] for r in runs)
    series = {
        "label": a.label,
        "samples": a.samples,
        "hogs": a.hogs,
        "runs": runs,
        "own_median_ms": round(1000 * own[len(own) // 2], 1),
        "own_max_ms": round(1000 * own[-1], 1),
    }
    print(json.dumps({k: v for k, v in series.items() if k != "runs"}))
    if a.out:
        out = Path(a.out)
        table = json.loads(out.read_text()) if out.exists() else []
        table.append(series)
        out.write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    main()
