"""Hot local time to first batch: dataset construction plus the first batch of a
``StreamingDataLoader``, in a fresh process per run, astream (one or more source trees) beside
mosaicml-streaming and litdata on the same samples.

    python benchmarks/bench_first_batch.py --data /tmp/first-data --runs 9 \
        --tree now=. [--tree before=DIR] --out benchmarks/results/first-batch/raw.json

Data (written once under ``--data``): tokens, 50,000 uint16 arrays of 512-2,048 tokens, 64 MiB
shards; astream's writer makes the MDS copy that astream and mosaic read, ``litdata.optimize``
(in the peers' venv, ``.bench/peers-venv``) the copy litdata reads. Each run imports the
library, numpy and torch first (outside the timing), then times construction (shuffled,
batch 32) and ``next(iter(loader))`` with ``num_workers`` 0 or 2 and a collate that returns
the list (no tensor work). The wall and the process's CPU seconds (``time.process_time``:
the main process only; workers are not counted) are recorded. Runs alternate between the
libraries (A B C A B C ...). The report is each library's median and range over runs, and the
ratio of medians to the faster peer: on a loaded machine, compare within one run only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PEERS = ROOT / ".bench" / "peers-venv" / "bin" / "python"
SAMPLES = 50_000

CHILD = r"""
import json, sys, time
lib, path, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
import numpy as np
import torch
if lib == "lit":
    import litdata
else:
    mod = __import__("astream" if lib == "astream" else "streaming")
    Dataset, Loader = mod.StreamingDataset, mod.StreamingDataLoader
def collate(batch):
    return batch
c0, t0 = time.process_time(), time.perf_counter()
if lib == "lit":
    ds = litdata.StreamingDataset(path, shuffle=True, seed=42)
    loader = litdata.StreamingDataLoader(ds, batch_size=32, num_workers=workers, collate_fn=collate)
else:
    ds = Dataset(local=path, shuffle=True, batch_size=32)
    loader = Loader(ds, batch_size=32, num_workers=workers, collate_fn=collate)
batch = next(iter(loader))
t1, c1 = time.perf_counter(), time.process_time()
assert len(batch) == 32
print("RESULT " + json.dumps({"wall_s": t1 - t0, "cpu_s": c1 - c0}))
"""

LIT_WRITE = r"""
import sys
import numpy as np
import litdata

class Item:
    def __call__(self, i):
        rng = np.random.default_rng(i)
        return {"tokens": rng.integers(0, 50_000, int(rng.integers(512, 2049)), dtype=np.uint16)}

if __name__ == "__main__":
    litdata.optimize(fn=Item(), inputs=list(range(int(sys.argv[2]))), output_dir=sys.argv[1],
                     chunk_bytes=64 << 20, num_workers=1, mode="overwrite", verbose=False)
"""


def make_data(root: Path) -> tuple[str, str]:
    """(MDS directory, litdata directory) of the same samples, written once."""
    import numpy as np

    from astream import MDSWriter

    mds, lit = root / "mds-tokens", root / "lit-tokens"
    if not (mds / "index.json").exists():
        with MDSWriter(
            out=str(mds), columns={"tokens": "ndarray:uint16"}, size_limit=64 << 20
        ) as w:
            for i in range(SAMPLES):
                rng = np.random.default_rng(i)
                n = int(rng.integers(512, 2049))
                w.write({"tokens": rng.integers(0, 50_000, n, dtype=np.uint16)})
    if not (lit / "index.json").exists():
        script = root / "lit_write.py"
        script.write_text(LIT_WRITE)
        subprocess.run([str(PEERS), str(script), str(lit), str(SAMPLES)], check=True)
    return str(mds), str(lit)


def one(python: str, lib: str, path: str, workers: int, tree: str | None) -> dict[str, float]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: modules load from bytecode
    if tree is not None:
        env["PYTHONPATH"] = tree
    out = subprocess.run(
        [python, "-c", CHILD, lib, path, str(workers)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree or str(ROOT),
        timeout=300,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{lib} failed: {out.stderr[-2000:]}")
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT "))
    got: dict[str, float] = json.loads(line[len("RESULT ") :])
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/tmp/astream-first-data")
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--tree", action="append", default=[], help="NAME=DIR of an astream tree")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    root = Path(a.data)
    root.mkdir(parents=True, exist_ok=True)
    mds, lit = make_data(root)
    trees = [t.split("=", 1) for t in a.tree] or [["astream", str(ROOT)]]
    sides: list[tuple[str, str, str, str, str | None]] = [
        (f"astream-{name}" if len(trees) > 1 else "astream", sys.executable, "astream", mds,
         str(Path(d).resolve()))
        for name, d in trees
    ]  # fmt: skip
    sides += [("mosaic", str(PEERS), "mosaic", mds, None), ("lit", str(PEERS), "lit", lit, None)]
    workers = [int(w) for w in a.workers.split(",")]
    raw: dict[str, dict[str, list[dict[str, float]]]] = {}
    for w in workers:
        for _ in range(a.runs):
            for name, python, lib, path, tree in sides:
                got = one(python, lib, path, w, tree)
                raw.setdefault(f"w{w}", {}).setdefault(name, []).append(got)
    report: dict[str, Any] = {}
    for case, by in raw.items():
        med = {n: statistics.median(r["wall_s"] for r in runs) for n, runs in by.items()}
        best_peer = min(med["mosaic"], med["lit"])
        report[case] = {
            n: {
                "wall_s_median": med[n],
                "wall_s_range": [min(r["wall_s"] for r in runs), max(r["wall_s"] for r in runs)],
                "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
                "vs_faster_peer": med[n] / best_peer,
            }
            for n, runs in by.items()
        }
        for n, r in report[case].items():
            print(
                f"{case} {n:16s} wall {r['wall_s_median'] * 1e3:7.1f} ms "
                f"({r['wall_s_range'][0] * 1e3:.1f}-{r['wall_s_range'][1] * 1e3:.1f}) "
                f"cpu {r['cpu_s_median'] * 1e3:6.1f} ms  {r['vs_faster_peer']:.2f}x faster peer"
            )
    if a.out:
        out = Path(a.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"runs": a.runs, "samples": SAMPLES, "raw": raw, "report": report}
        out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
