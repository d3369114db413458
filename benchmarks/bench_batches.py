"""Hot epochs with column batches beside sample dicts, mosaic and litdata, on the same data.

    python -m benchmarks.bench_batches --scale 0.25 --reps 3 --out benchmarks/results/DIR

Uses the main harness (``benchmarks/run.py``): each library writes the workloads (tokens,
images) in its own format, the page-cache-warm sequential read of those files is measured, then
for ``num_workers`` 0 and 2 one shuffled epoch per fresh process, interleaved per repetition:
``astream`` (sample dicts through the shared collate, as in the main harness, in astream's
block order), ``astream-batch`` (``StreamingDataLoader(batch_format="torch", ragged="offsets")``:
column batches, decoded in the worker's shared-memory slot with workers), ``mosaic`` and
``lit`` (their loaders with the shared collate), then at matched shuffle ``astream-py1e``
(sample dicts in the reference's order: the dataset's defaults), ``astream-batch-py1e`` and
``lit-full``. Every run reports samples/s, payload MB/s and the peak RSS and
PSS of its process tree (``benchmarks/runners/rss.py``). Writes ``results.json`` (every run and
the medians) and ``report.md`` (medians, ratios of astream-batch to each other loader, MB/s as a
share of the sequential read).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.report import summarize
from benchmarks.run import VARIANTS as RUN_VARIANTS
from benchmarks.run import Harness, parse_args

VARIANTS = (  # (name in the results, runner, extra spec)
    ("astream", "astream", {}),
    ("astream-batch", "astream", {"batch_format": "torch"}),
    ("mosaic", "mosaic", {}),
    ("lit", "lit", {}),
    # matched shuffle (benchmarks.run's --shuffle both): astream's sample dicts (its defaults)
    # and batches in the reference's own order (py1e at its default block, what mosaic
    # yields), litdata at its strongest
    ("astream-py1e", "astream", dict(RUN_VARIANTS["astream-py1e"][1])),
    ("astream-batch-py1e", "astream", {"batch_format": "torch", **RUN_VARIANTS["astream-py1e"][1]}),
    ("lit-full", "lit", dict(RUN_VARIANTS["lit-full"][1])),
)
METRICS = (
    ("samples_per_s", True),
    ("mb_per_s", True),
    ("peak_pss_mb", False),
    ("order_score", None),  # shuffle quality of the yielded ids: 0 index order, ~1 random
)


def run(a: argparse.Namespace) -> dict[str, Any]:
    h = Harness(
        parse_args(
            [
                f"--scale={a.scale}",
                f"--reps={a.reps}",
                f"--workloads={a.workloads}",
                f"--work={a.work}",
                f"--batch-size={a.batch_size}",
                "--libs=astream,mosaic,lit",
                "--scenarios=write,physical,hot",
            ]
        )
    )
    h.a.reps = 1  # one write per library; the epochs repeat
    t0 = time.perf_counter()
    h.prepare()
    h.do_write()
    h.do_physical()
    variants = [v for v in VARIANTS if v[0] in a.variants.split(",")]
    if a.before:  # the same runner over another astream source tree (the code before a change)
        variants += [
            (f"{name}-before", lib, {**extra, "_pythonpath": str(a.before.resolve())})
            for name, lib, extra in VARIANTS[:2]
        ]
    for wl in h.a.workloads:
        for w in (int(x) for x in a.workers.split(",")):
            key = f"hot/{wl}/w{w}"
            for rep in range(a.reps):
                for name, lib, extra in variants:
                    spec = h.spec_for(lib, {"scenario": "epoch", "workload": wl, "cold": False})
                    spec.update(num_workers=w, record_ids=True, **extra)
                    path = spec.pop("_pythonpath", None)
                    r = h.run_one(lib, spec) if path is None else _run_in(h, path, spec)
                    if "yielded_ids" in r:
                        r.update(h.shuffle_scores(lib, spec, r.pop("yielded_ids")))
                    h.records.append({"key": key, "lib": name, "rep": rep, **r})
                    h.log(f"{key} {name} rep{rep}: {r.get('samples_per_s', r.get('reason'))}")
    meta = {
        "scale": a.scale,
        "reps": a.reps,
        "workloads": h.a.workloads,
        "workers": a.workers,
        "variants": [v[0] for v in variants],
        "before": str(a.before) if a.before else None,
        "batch_size": a.batch_size,
        "wall_s": time.perf_counter() - t0,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    return {"meta": meta, **summarize(h.records), "records": h.records}


def _run_in(h: Harness, root: str, spec: dict[str, Any]) -> dict[str, Any]:
    """The astream runner with ``root`` as working directory and import path: its astream
    package, and a copy of this tree's benchmarks package (the same harness code)."""
    here = Path(__file__).resolve().parent
    shutil.copytree(here, Path(root) / "benchmarks", dirs_exist_ok=True)
    cmd = [str(h.python["astream"]), "-m", "benchmarks.runners.astream", json.dumps(spec)]
    env = {**h.env, "PYTHONPATH": root}
    p = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=900)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            out: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return out
    return {"status": "error", "reason": f"exit {p.returncode}: {p.stderr[-500:]}"}


def _med(res: dict[str, Any], key: str, lib: str, metric: str) -> float | None:
    m = res["figures"].get(key, {}).get(lib, {}).get(metric)
    return None if m is None else float(m["median"])


def report(res: dict[str, Any]) -> str:
    meta = res["meta"]
    names = meta["variants"]
    lines = [
        "# Column batches beside sample dicts and the peers (hot, page cache warm)",
        "",
        f"scale {meta['scale']}, batch {meta['batch_size']}, medians of {meta['reps']} "
        f"interleaved repetitions, {meta['date']}. Ratios: astream-batch, astream-py1e (sample "
        "dicts at the dataset's defaults) or astream-batch-py1e / other, oriented so >1 means "
        "astream is better.",
        "",
    ]
    py1e, dicts = "astream-batch-py1e", "astream-py1e"
    mine = ("astream-batch", py1e, dicts)
    pairs = [("astream-batch", n) for n in names if n not in mine]
    for ours, peers in ((dicts, ("mosaic", "lit", "lit-full")), (py1e, ("mosaic", "lit-full"))):
        if ours in names:
            pairs += [(ours, n) for n in peers if n in names]
    short = {"astream-batch": "batch", py1e: "batch-py1e", dicts: "py1e"}
    head = ["case", "metric", *names, *[f"{short[a]} vs {n}" for a, n in pairs]]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(k for k in res["figures"] if k.startswith("hot/")):
        for metric, higher in METRICS:
            vals = {n: _med(res, key, n, metric) for n in names}
            fmt = "{:,.3f}" if higher is None else "{:,.1f}"
            row = [key, metric, *[fmt.format(v) if v is not None else "-" for v in vals.values()]]
            for a, n in pairs:
                b, o = vals.get(a), vals[n]
                ok = higher is not None and b is not None and o is not None and b > 0 and o > 0
                row.append(f"{(b / o if higher else o / b):.2f}x" if ok else "-")  # type: ignore[operator]
            lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Sequential read of each library's files (page cache warm), MB/s, and hot MB/s "
              "as a share of it:", ""]  # fmt: skip
    for key, by in sorted(res["figures"].items()):
        if not key.startswith("physical/seqread/"):
            continue
        wl = key.rsplit("/", 1)[1]
        for lib, m in sorted(by.items()):
            seq = m.get("mb_per_s", {}).get("median")
            if not seq:
                continue
            shares = []
            for w in meta["workers"].split(","):
                for n in names:
                    if n.split("-")[0] != lib:
                        continue
                    v = _med(res, f"hot/{wl}/w{w}", n, "mb_per_s")
                    if v is not None:
                        shares.append(f"{n} w{w} {100 * v / seq:.1f}%")
            lines.append(f"- {wl}, {lib}'s files: {seq:,.0f} MB/s; " + ", ".join(shares))
    bad = [
        f"- `{k}` {lib}: {st[:200]}"
        for k, by in sorted(res["status"].items())
        for lib, st in sorted(by.items())
        if st != "ok"
    ]
    if bad:
        lines += ["", "Runs that failed (not in the medians):", "", *bad]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.bench_batches")
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workloads", default="tokens,images")
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--variants", default=",".join(v[0] for v in VARIANTS))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--work", type=Path, default=Path(".bench/work"))
    ap.add_argument(
        "--before",
        type=Path,
        help="a directory holding another astream package (e.g. `git archive OLD astream`): "
        "adds astream-before and astream-batch-before, run from it",
    )
    ap.add_argument("--out", type=Path, default=Path(".bench/batches"))
    a = ap.parse_args()
    res = run(a)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "results.json").write_text(json.dumps(res, indent=1, sort_keys=True))
    text = report(res)
    (a.out / "report.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
