"""Where one hot epoch's peak memory goes: the PSS of the runner's process tree by mapping,
sampled from outside the process.

    python -m benchmarks.pss_side --variants astream-batch,astream-batch-py1e --workers 0,2 \
        --reps 3 --work .bench/work --workload tokens --scale 0.25

Runs astream's sides of ``benchmarks.bench_batches`` (``astream``, ``astream-batch``,
``astream-batch-py1e``) and of ``benchmarks.run`` (``astream-py1e``: sample dicts at the
dataset's default order) as those harnesses do -- the astream runner in a fresh process, one
shuffled epoch of the hot dataset the harness wrote under ``--work`` -- interleaved per
repetition. While a run goes, this process reads ``/proc/PID/smaps_rollup`` and
``/proc/PID/smaps`` of the runner and of its DataLoader workers every ``--interval`` seconds
and keeps the sample with the highest PSS, split into:

- ``data``: mapped files under the dataset directory (shard pages read through a map);
- ``anon`` and ``shmem``: as in ``benchmarks/runners/rss.py``;
- ``lib``: the rest, the other mapped files (libraries, mostly torch's).

The runner samples its own tree too (``peak_pss_mb``, every 0.1 s, from inside); both are
printed, with its samples/s. Sampling from outside costs the measured process nothing but the
kernel's walk of its maps. Medians per side and worker count close the output.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_batches import VARIANTS
from benchmarks.run import ROOT, Harness, parse_args
from benchmarks.run import VARIANTS as RUN_VARIANTS
from benchmarks.runners.rss import _children

_ROLLUP = {"Pss:": "pss", "Pss_Anon:": "anon", "Pss_File:": "file", "Pss_Shmem:": "shmem"}


def _pids(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(_children(p))
    return out


def tree_parts(pid: int, data_dir: str) -> dict[str, int]:
    """PSS in bytes of ``pid`` and its descendants: ``pss`` (the sum over its maps in smaps),
    ``data`` (maps of files under ``data_dir``), ``anon`` and ``shmem`` (smaps_rollup, read
    right after) and ``lib``: the rest (mapped files other than the data). A process that
    unmaps between the two reads moves bytes into ``lib``, never into ``data``."""
    parts = dict.fromkeys(("pss", "data", "anon", "shmem", "lib"), 0)
    prefix = data_dir.rstrip("/") + "/"
    for p in _pids(pid):
        try:
            ours = False
            with open(f"/proc/{p}/smaps") as f:
                for line in f:
                    head = line.split(None, 5)
                    if not head[0].endswith(":"):  # a map's first line: its path, if any
                        ours = len(head) > 5 and head[5].startswith(prefix)
                    elif head[0] == "Pss:":
                        kb = int(head[1]) * 1024
                        parts["pss"] += kb
                        if ours:
                            parts["data"] += kb
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    key = _ROLLUP.get(line.split(None, 1)[0])
                    if key in ("anon", "shmem"):
                        parts[key] += int(line.split()[1]) * 1024
        except OSError:
            pass  # the process ended between the listing and the read
    parts["lib"] = max(0, parts["pss"] - parts["data"] - parts["anon"] - parts["shmem"])
    return parts


def run_side(
    h: Harness, name: str, workload: str, workers: int, data_dir: str, interval: float
) -> dict[str, Any]:
    sides = [*VARIANTS, *((n, lib, x) for n, (lib, x) in RUN_VARIANTS.items())]
    extra = next(x for n, lib, x in sides if n == name and lib == "astream")
    spec = h.spec_for("astream", {"scenario": "epoch", "workload": workload, "cold": False})
    spec.update(num_workers=workers, **extra)
    cmd = [sys.executable, "-m", "benchmarks.runners.astream", json.dumps(spec)]
    p = subprocess.Popen(cmd, cwd=ROOT, env=h.env, stdout=subprocess.PIPE, text=True)
    peak: dict[str, int] = {"pss": 0}
    while p.poll() is None:
        got = tree_parts(p.pid, data_dir)
        if got["pss"] > peak["pss"]:
            peak = got
        time.sleep(interval)
    out = p.stdout.read() if p.stdout is not None else ""
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    res: dict[str, Any] = json.loads(lines[-1][len("RESULT ") :]) if lines else {}
    return {
        "side": name,
        "workers": workers,
        "status": res.get("status", f"exit {p.returncode}"),
        "samples_per_s": res.get("samples_per_s"),
        "runner_peak_pss_mb": res.get("peak_pss_mb"),
        **{f"peak_{k}_mb": v / 1e6 for k, v in peak.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.pss_side")
    ap.add_argument("--variants", default="astream-batch,astream-batch-py1e")
    ap.add_argument("--workers", default="0")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workload", default="tokens")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--work", type=Path, default=Path(".bench/work"))
    ap.add_argument("--interval", type=float, default=0.02)
    ap.add_argument("--out", type=Path, help="write every run as JSON here")
    a = ap.parse_args()
    h = Harness(parse_args([f"--scale={a.scale}", f"--work={a.work}", "--libs=astream"]))
    data_dir = str((a.work / "data" / "astream" / a.workload).resolve())
    if not os.path.isdir(data_dir):
        raise SystemExit(f"{data_dir} is missing: run benchmarks.bench_batches once to write it")
    h.data[("astream", a.workload)] = Path(data_dir)
    runs = []
    for rep in range(a.reps):
        for w in (int(x) for x in a.workers.split(",")):
            for name in a.variants.split(","):
                r = run_side(h, name, a.workload, w, data_dir, a.interval)
                runs.append({"rep": rep, **r})
                print(json.dumps({k: round(v, 1) if isinstance(v, float) else v
                                  for k, v in runs[-1].items()}), flush=True)  # fmt: skip
    keys = ("samples_per_s", "runner_peak_pss_mb", "peak_pss_mb", "peak_data_mb",
            "peak_lib_mb", "peak_anon_mb", "peak_shmem_mb")  # fmt: skip
    print("\nmedians")
    for w in sorted({r["workers"] for r in runs}):
        for name in a.variants.split(","):
            mine = [r for r in runs if r["side"] == name and r["workers"] == w]
            med = {k: statistics.median(r[k] for r in mine if r.get(k) is not None)
                   for k in keys if any(r.get(k) is not None for r in mine)}  # fmt: skip
            print(f"w{w} {name}: " + ", ".join(f"{k} {v:,.1f}" for k, v in med.items()))
    if a.out is not None:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
