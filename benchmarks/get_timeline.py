"""The request timeline of cold astream epochs: when each GET of a shard ran, and when each
batch arrived, for astream trees side by side.

``python -m benchmarks.get_timeline --tree before=/tmp/before --tree after=. --reps 3
--latency-ms 40 --conn-mbps 50 --out benchmarks/results/tail-split``

The dataset is the harness's (``benchmarks.cold_ab`` writes it into ``--work``), behind the
harness proxy on moto, shaped as given, every answer closing its connection. Each run is the
harness's cold epoch scenario (``benchmarks.runners.astream``) in a fresh process, with a hook
run first (``benchmarks/timeline_hook.py``, by path) that records, in every process of the run
(DataLoader workers included), each ``stream_range`` call of the store (one GET of a shard:
its key, byte range asked, bytes it wrote, start and end) and the time of each batch the
consumer receives. The trees alternate (A B A B ...). Writes ``<name>-rep<k>.json`` (the raw
records) and ``timeline.md`` (per run: first batch, second batch, last batch, the GETs in
flight every 0.1 s, and each GET).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.cold_ab import epoch_spec
from benchmarks.s3util import upload_dir
from benchmarks.servers import S3Emulator

ROOT = Path(__file__).resolve().parent.parent


def _summary(name: str, rec: dict[str, Any]) -> list[str]:
    batches = rec["batches"]
    t0 = batches[0]
    gets = sorted(rec["gets"], key=lambda g: g["start"])
    end = batches[-1] - t0
    out = [
        f"### {name}",
        "",
        f"- first batch {batches[1] - t0:.3f} s, second {batches[2] - t0:.3f} s, last "
        f"{end:.3f} s ({len(batches) - 1} batches; times from the loader's first request)",
        f"- {len(gets)} GETs of shards, {sum(g['bytes'] for g in gets) / 1e6:.1f} MB; the "
        f"last ends at {max(g['end'] for g in gets) - t0:.3f} s",
        "- GETs running, every 0.1 s: "
        + " ".join(
            str(sum(1 for g in gets if g["start"] - t0 <= t / 10 < g["end"] - t0))
            for t in range(int(end * 10) + 1)
        ),
        "",
        "| shard | range asked (MiB) | bytes written | start s | end s | MB/s |",
        "|---|---|---|---|---|---|",
    ]
    for g in gets:
        dur = max(g["end"] - g["start"], 1e-9)
        out.append(
            f"| {g['key'].rsplit('/', 1)[-1]} | {g['lo'] / 2**20:.1f}-{g['hi'] / 2**20:.1f} "
            f"| {g['bytes']:,} | {g['start'] - t0:.3f} | {g['end'] - t0:.3f} "
            f"| {g['bytes'] / 1e6 / dur:.1f} |"
        )
    return [*out, ""]


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.get_timeline")
    ap.add_argument("--tree", action="append", required=True, help="NAME=DIR (repeatable)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workload", default="images")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--latency-ms", type=float, default=40.0)
    ap.add_argument("--conn-mbps", type=float, default=50.0)
    ap.add_argument("--shuffle-algo", default="py1e")
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "work")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    trees = dict(t.split("=", 1) for t in a.tree)
    data = a.work.resolve() / "data" / "astream" / a.workload
    if not (data / "index.json").exists():
        sys.exit(f"{data} has no dataset: run benchmarks.cold_ab once with --work {a.work}")
    a.out.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )
    lines = [
        "# Request timelines",
        "",
        f"`{' '.join(['python -m benchmarks.get_timeline', *sys.argv[1:]])}`",
        "",
    ]
    with S3Emulator() as s3:
        env.update(S3_ENDPOINT_URL=s3.endpoint, AWS_ENDPOINT_URL=s3.endpoint)
        upload_dir(s3.direct, "bench", f"astream/{a.workload}", data)
        s3.control(
            "config", latency_ms=a.latency_ms, bandwidth_mbps=0, conn_mbps=a.conn_mbps, close=1.0
        )
        for rep in range(a.reps):
            for name, tree in trees.items():
                cache = a.work.resolve() / "cache" / "timeline" / a.workload
                shutil.rmtree(cache, ignore_errors=True)
                rec_dir = a.out / f".{name}-rep{rep}"
                shutil.rmtree(rec_dir, ignore_errors=True)
                rec_dir.mkdir()
                spec = epoch_spec(
                    a.workload,
                    a.scale,
                    a.num_workers,
                    data,
                    f"s3://bench/astream/{a.workload}",
                    cache,
                    s3.endpoint,
                    a.shuffle_algo,
                )
                hook = ROOT / "benchmarks" / "timeline_hook.py"
                code = (
                    f"import runpy; runpy.run_path({str(hook)!r}); "
                    "runpy.run_module('benchmarks.runners.astream', run_name='__main__')"
                )
                p = subprocess.run(
                    [sys.executable, "-c", code, json.dumps(spec)],
                    cwd=tree,
                    env=dict(
                        env,
                        PYTHONPATH=str(Path(tree).resolve()),
                        ASTREAM_TIMELINE=str(rec_dir.resolve()),
                    ),
                    capture_output=True,
                    text=True,
                    check=False,
                )
                result = next(
                    (json.loads(x[7:]) for x in p.stdout.splitlines() if x.startswith("RESULT ")),
                    {"status": "error", "reason": p.stderr[-800:]},
                )
                rec: dict[str, Any] = {"tree": name, "rep": rep, "result": result, "gets": []}
                for f in sorted(rec_dir.iterdir()):
                    rows = [json.loads(x) for x in f.read_text().splitlines()]
                    if f.name == "batches":
                        rec["batches"] = rows
                    else:
                        rec["gets"] += rows
                shutil.rmtree(rec_dir)
                (a.out / f"{name}-rep{rep}.json").write_text(json.dumps(rec, indent=0))
                if result.get("status") != "ok" or "batches" not in rec:
                    print(f"{name} rep{rep}: {result}", flush=True)
                    continue
                lines += _summary(f"{name}, run {rep + 1}", rec)
                b = rec["batches"]
                print(
                    f"{name} rep{rep}: first batch {b[1] - b[0]:.3f} s, last {b[-1] - b[0]:.3f} s,"
                    f" {len(rec['gets'])} GETs",
                    flush=True,
                )
    (a.out / "timeline.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
