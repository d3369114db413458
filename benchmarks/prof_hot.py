"""Where a hot epoch's time goes: cProfile with the CPU clock (so the time other processes
take from a loaded machine is not charged to whatever function was running), one process.

    python -m benchmarks.prof_hot DATA_DIR --out OUT_DIR

``DATA_DIR`` holds the harness's astream datasets (``images``, ``tokens``). Profiles:

- ``images_w0_torch``: the steady part (after the first batch) of a hot epoch of
  ``ds.batches(batch_format="torch", ragged="offsets")``, no DataLoader;
- ``tokens_w2_dicts_<handover>``: the main process of ``StreamingDataLoader(num_workers=2)``
  with the harness's collate over sample dicts, for ``handover="ring"`` (the default) and
  ``"torch"`` (torch's pickling): what the trainer's process spends per batch.

Each profile is written as text (top 30 functions by own CPU time) plus a line with the
epoch's wall and CPU seconds.

    python -m benchmarks.prof_hot cpu-w0 ASTREAM_TOKENS --lit LIT_TOKENS --tree now=. \
        --tree before=DIR --reps 3 --out OUT_DIR

``cpu-w0``: the CPU clock of whole hot epochs at ``num_workers=0`` as the main harness runs
them (a fresh process per epoch, timed from dataset construction to the last batch, the
shared collate for sample dicts): ``StreamingDataLoader(batch_format="torch",
ragged="offsets")`` (``batch``) and sample dicts (``dicts``) of each astream ``--tree``
(``name=dir`` holding an ``astream`` package), and litdata's loader from the peers' venv,
interleaved per repetition. Writes ``cpu_w0.json`` (every run) and ``cpu_w0.md`` (medians of
CPU and wall seconds, and CPU ratios to litdata): on a shared machine the CPU seconds of an
epoch are the steady figure, its wall seconds follow the load.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# the shuffled order every profile here runs, named (the dataset's default is the reference's
# py1e): astream's own block order, as in the profiles already reported; printed and recorded
ORDER = "astream"


def _stats(pr: cProfile.Profile, head: str) -> str:
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(30)
    return head + "\n" + buf.getvalue()


def images_w0(data: Path) -> str:
    from astream import StreamingDataset

    def epoch() -> Any:
        ds = StreamingDataset(
            local=str(data), shuffle=True, shuffle_seed=1234, batch_size=32, shuffle_algo=ORDER
        )
        return ds.batches(ragged="offsets", batch_format="torch")

    for _ in epoch():  # warm: imports, page cache
        pass
    it = epoch()
    next(it)
    pr = cProfile.Profile(time.process_time)
    t, c = time.perf_counter(), time.process_time()
    pr.enable()
    n = sum(len(b["label"]) for b in it)
    pr.disable()
    head = (
        f"images w0 batches (shuffle_algo={ORDER}): {n} samples after the first batch, "
        f"wall {time.perf_counter() - t:.3f} s, CPU {time.process_time() - c:.3f} s"
    )
    return _stats(pr, head)


def tokens_w2(data: Path, handover: str) -> str:
    from astream import StreamingDataLoader, StreamingDataset
    from benchmarks.collate import collate

    ds = StreamingDataset(
        local=str(data), shuffle=True, shuffle_seed=1234, batch_size=32, shuffle_algo=ORDER
    )
    ld = StreamingDataLoader(
        ds, batch_size=32, num_workers=2, collate_fn=collate, handover=handover
    )
    it = iter(ld)
    n = len(next(it)["id"])
    pr = cProfile.Profile(time.process_time)
    t, c = time.perf_counter(), time.process_time()
    pr.enable()
    for b in it:
        n += len(b["id"])
    pr.disable()
    head = (
        f"tokens w2 dicts handover={handover} (shuffle_algo={ORDER}): {n} samples, "
        f"wall {time.perf_counter() - t:.3f} s, "
        f"main-process CPU {time.process_time() - c:.3f} s"
    )
    return _stats(pr, head)


_CPU_CHILD = (
    f"ORDER = {ORDER!r}\n"
    + r"""
import json, sys, time
lib, mode, path = sys.argv[1], sys.argv[2], sys.argv[3]
from benchmarks.collate import collate  # imports torch
if lib == "lit":
    import litdata as ld
    c0, t0 = time.process_time(), time.perf_counter()  # imports excluded, as in the harness
    it = ld.StreamingDataLoader(
        ld.StreamingDataset(path, shuffle=True, seed=1234),
        batch_size=32, num_workers=0, collate_fn=collate,
    )
else:
    from astream import StreamingDataLoader, StreamingDataset
    import astream.torch.dataloader
    c0, t0 = time.process_time(), time.perf_counter()
    ds = StreamingDataset(local=path, shuffle=True, shuffle_seed=1234, batch_size=32,
                          shuffle_algo=ORDER)
    kw = {"collate_fn": collate}
    if mode == "batch":
        kw = {"batch_format": "torch", "ragged": "offsets"}
    it = StreamingDataLoader(ds, batch_size=32, num_workers=0, **kw)
n = 0
for b in it:
    n += len(b["id"])
res = {"samples": n, "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0}
if lib != "lit":
    res["imported"] = astream.__file__  # the tree measured
print("RESULT " + json.dumps(res))
"""
)


def _cpu_run(python: str, root: str, args: list[str]) -> dict[str, Any]:
    import subprocess

    here = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": f"{root}:{here}"}  # as the main harness: os.environ
    p = subprocess.run(  # cwd: ``-c`` puts it first on sys.path, before PYTHONPATH
        [python, "-c", _CPU_CHILD, *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("RESULT "):
            out: dict[str, Any] = json.loads(line[len("RESULT ") :])
            return out
    return {"error": p.stderr[-800:]}


def cpu_w0(a: argparse.Namespace) -> None:
    import statistics

    trees = dict(t.split("=", 1) for t in a.tree)
    cases: list[tuple[str, str, str, str, str]] = []  # (name, python, root, lib, mode)
    for name, root in trees.items():
        for mode in ("batch", "dicts"):
            cases.append(
                (f"{name}/{mode}", sys.executable, str(Path(root).resolve()), "astream", mode)
            )
    if a.lit:
        cases.append(("lit/dicts", a.peer_python, str(Path(".").resolve()), "lit", "dicts"))
    runs: list[dict[str, Any]] = []
    for rep in range(a.reps):
        for name, python, root, lib, mode in cases:
            path = str(a.lit if lib == "lit" else a.data)
            r = _cpu_run(python, root, [lib, mode, path])
            runs.append({"case": name, "rep": rep, **r})
            print(name, rep, r, flush=True)
    med: dict[str, dict[str, float]] = {}
    for name, *_ in cases:
        ok = [r for r in runs if r["case"] == name and "cpu_s" in r]
        if ok:
            med[name] = {k: statistics.median(r[k] for r in ok) for k in ("cpu_s", "wall_s")}
            med[name]["samples"] = ok[0]["samples"]
    a.out.mkdir(parents=True, exist_ok=True)
    meta = {"data": str(a.data), "lit": str(a.lit), "trees": trees, "reps": a.reps,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv[1:],
            "shuffle_algo": ORDER}  # fmt: skip
    (a.out / "cpu_w0.json").write_text(json.dumps({"meta": meta, "medians": med, "runs": runs},
                                                  indent=1))  # fmt: skip
    lines = [
        f"# Hot {a.data.name}, num_workers=0: CPU seconds per epoch (fresh process, "
        "construction to last batch)",
        "",
        f"{meta['date']}, medians of {a.reps} interleaved repetitions; "
        f"`python -m benchmarks.prof_hot cpu-w0 {' '.join(meta['argv'][1:])}`",
        "",
        "| case | samples | CPU s | wall s | samples per CPU s | CPU vs litdata |",
        "|---|---|---|---|---|---|",
    ]
    lit = med.get("lit/dicts", {}).get("cpu_s")
    for name, m in med.items():
        ratio = f"{lit / m['cpu_s']:.2f}x" if lit else "-"
        lines.append(
            f"| {name} | {m['samples']:,.0f} | {m['cpu_s']:.3f} | {m['wall_s']:.3f} | "
            f"{m['samples'] / m['cpu_s']:,.0f} | {ratio} |"
        )
    bad = [r for r in runs if "error" in r]
    if bad:
        lines += ["", f"{len(bad)} runs failed (not in the medians)."]
    (a.out / "cpu_w0.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "cpu-w0":
        ap = argparse.ArgumentParser(prog="python -m benchmarks.prof_hot cpu-w0")
        ap.add_argument("data", type=Path, help="astream's tokens dataset")
        ap.add_argument("--lit", type=Path, help="litdata's tokens dataset (optional)")
        ap.add_argument("--peer-python", default=".bench/peers-venv/bin/python")
        ap.add_argument("--tree", action="append", default=[], help="name=dir (repeatable)")
        ap.add_argument("--reps", type=int, default=3)
        ap.add_argument("--out", type=Path, required=True)
        cpu_w0(ap.parse_args(sys.argv[2:]))
        return
    ap = argparse.ArgumentParser(prog="python -m benchmarks.prof_hot")
    ap.add_argument("data", type=Path, help="directory holding the images and tokens datasets")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    jobs: dict[str, Callable[[], str]] = {
        "images_w0_torch": lambda: images_w0(a.data / "images"),
        "tokens_w2_dicts_ring": lambda: tokens_w2(a.data / "tokens", "ring"),
        "tokens_w2_dicts_torch": lambda: tokens_w2(a.data / "tokens", "torch"),
    }
    for name, job in jobs.items():
        text = job()
        (a.out / f"prof_{name}.txt").write_text(text)
        print(text.splitlines()[0])


if __name__ == "__main__":
    main()
