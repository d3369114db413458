"""Benchmark the sample order: speed at a billion samples, and shuffle quality vs the reference.

    .venv/bin/python benchmarks/bench_order.py [--peer-python /work/peervenv/bin/python]
                                               [--ref-samples 25000000] [--skip-ref]

1. *Scale* (issue 4): 1,000,000,000 samples over 250,000 shards, num_canonical_nodes 8, a World
   of 8 nodes x 8 ranks x 8 workers, per-device batch 32. Times building the plan (the
   index-side tables) and the first 10,000 ids of random workers at random resume positions;
   peak traced memory. Default block size and the reference's 262,144.
2. *Reference* timing: mosaicml-streaming's ``get_partitions('orig')`` + ``get_shuffle('py1e')``
   for the same shard size and world, at ``--ref-samples`` (it materialises the whole epoch, so
   1e9 samples would need tens of GB here), run in a subprocess of the peer interpreter.
3. *Reference algorithms in astream* (issue 17): ``plan_epoch(shuffle_algo=algo)`` for every
   reference algorithm at ``--ref-samples`` (same shard size, NCN 8, World 8x8x8, batch 32):
   time to the first 10,000 ids of one worker and peak traced memory. These orders are
   computed whole (as the reference does), so this grows linearly with the epoch.
4. *Quality* on the ANCHORS-like indexes (tokens: 200k samples in 8 shards; images: 20k samples
   in 32 shards), one node: ours (default block), ours (block 262,144), a full random
   permutation, every reference algorithm as astream computes it (``astream.core.refshuffle``,
   the reference's default block), and the reference itself (py1e) from the peer interpreter.

Medians of repeated runs; the machine is shared, so compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from pathlib import Path

import numpy as np

from astream.core.order import EpochPlan, StreamSpec, plan_epoch
from astream.core.quality import (
    displacement_score,
    index_order_score,
    max_live_shards,
    shards_per_window,
)
from astream.core.refshuffle import REFERENCE_ALGOS
from astream.core.world import World

STUB = {
    "torchvision/__init__.py": "",
    "torchvision/datasets/__init__.py": "class VisionDataset:\n    pass\n",
    "torchvision/transforms/__init__.py": "",
    "torchvision/transforms/functional.py": "def to_tensor(x):\n    return x\n",
}

REF_SCALE = """
import json, resource, sys, time
import numpy as np
from streaming.base.partition import get_partitions
from streaming.base.shuffle import get_shuffle
n_shards, per_shard, drop = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
sizes = np.full(n_shards, per_shard, np.int64)
t = time.perf_counter()
part = get_partitions("orig", int(sizes.sum()), 8, 8, 8, 8, 32, drop)
shuf = get_shuffle("py1e", sizes, 8, 17, 3, 262144)
worker = shuf[part[4, 5, 6].ravel()[:10000]]
print(json.dumps({"seconds": time.perf_counter() - t,
                  "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

REF_ORDER = """
import sys
import numpy as np
from streaming.base.partition import get_partitions
from streaming.base.shuffle import get_shuffle
sizes = np.load(sys.argv[1])
n = int(sizes.sum())
block = max(4_000_000 // 1, 1 << 18)
part = get_partitions("orig", n, 1, 1, 1, 1, 32)
ids = get_shuffle("py1e", sizes, 1, 17, 0, block)[part.ravel()]
np.save(sys.argv[2], ids[ids >= 0])
"""


def _scale_plan(sizes: np.ndarray, block: int | None) -> EpochPlan:
    return plan_epoch(
        [StreamSpec(sizes)],
        seed=17,
        epoch=3,
        num_canonical_nodes=8,
        batch_size=32,
        shuffle=True,
        shuffle_algo="astream",  # named: plan_epoch's default, astream's own order
        shuffle_block_size=block,
    )


def bench_scale(block: int | None) -> dict[str, float]:
    sizes = np.full(250_000, 4000, np.int64)
    world, rng = World(8, 8, 8), np.random.default_rng(0)
    builds = []
    for _ in range(3):
        t = time.perf_counter()
        plan = _scale_plan(sizes, block)
        builds.append(time.perf_counter() - t)
    gb = 32 * world.num_ranks
    firsts = []
    tracemalloc.start()
    for _ in range(7):
        start = int(rng.integers(0, plan.num_samples // 2)) // gb * gb
        rank, worker = int(rng.integers(64)), int(rng.integers(8))
        fresh = _scale_plan(sizes, block)
        t = time.perf_counter()
        got = 0
        for batch in fresh.worker_batches(world, rank, worker, start):
            got += len(batch)
            if got >= 10_000:
                break
        firsts.append(time.perf_counter() - t)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {
        "block_size": plan.block_size,
        "build_s_median": statistics.median(builds),
        "first_10k_s_median": statistics.median(firsts),
        "first_10k_s_max": max(firsts),
        "peak_traced_mb": peak / 1e6,
    }


def bench_reference_algos(samples: int) -> dict[str, dict[str, float]]:
    """First 10,000 ids of one worker under each reference algorithm, through plan_epoch."""
    sizes = np.full(samples // 4000, 4000, np.int64)
    world, out = World(8, 8, 8), {}
    for algo in sorted(REFERENCE_ALGOS):
        tracemalloc.start()
        t = time.perf_counter()
        plan = plan_epoch(
            [StreamSpec(sizes)], seed=17, epoch=3, num_canonical_nodes=8, batch_size=32,
            shuffle=True, shuffle_algo=algo, shuffle_block_size=262144,
        )  # fmt: skip
        got = 0
        for batch in plan.worker_batches(world, 37, 6, 0):
            got += len(batch)
            if got >= 10_000:
                break
        seconds = time.perf_counter() - t
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        out[algo] = {"first_10k_s": seconds, "peak_traced_mb": peak / 1e6}
    return out


def run_peer(peer: str, script: str, *args: str) -> str:
    with tempfile.TemporaryDirectory() as stub:
        for rel, text in STUB.items():
            path = Path(stub, rel)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        out = subprocess.run(
            [peer, "-c", textwrap.dedent(script), *args],
            check=True,
            capture_output=True,
            text=True,
            env={"PYTHONPATH": stub},
        )
        return out.stdout


def quality_row(name: str, ids: np.ndarray, bounds: np.ndarray) -> dict[str, object]:
    shards = np.searchsorted(bounds, ids, side="right")
    w32, w4k = shards_per_window(shards, 32), shards_per_window(shards, 4096)
    return {
        "order": name,
        "index_order_score": round(index_order_score(ids), 3),
        "displacement_score": round(displacement_score(ids), 3),
        "shards_per_batch32_mean": round(w32.mean, 2),
        "shards_per_4096_mean": round(w4k.mean, 2),
        "max_live_shards": max_live_shards(shards),
    }


def bench_quality(label: str, sizes: np.ndarray, peer: str | None) -> list[dict[str, object]]:
    bounds = np.cumsum(sizes)
    rows = []
    for name, block in (("astream default", None), ("astream block 262144", 262144)):
        plan = plan_epoch(
            [StreamSpec(sizes)],
            seed=17,
            epoch=0,
            num_canonical_nodes=1,
            batch_size=32,
            shuffle=True,
            shuffle_algo="astream",  # the "astream" rows: its own order, named
            shuffle_block_size=block,
        )
        ids = plan.global_ids(0, plan.num_samples)
        rows.append(quality_row(f"{name} (block {plan.block_size})", ids, bounds))
    perm = np.random.default_rng(0).permutation(int(sizes.sum()))
    rows.append(quality_row("full random permutation", perm, bounds))
    for algo in sorted(REFERENCE_ALGOS):
        plan = plan_epoch(
            [StreamSpec(sizes)], seed=17, epoch=0, num_canonical_nodes=1, batch_size=32,
            shuffle=True, shuffle_algo=algo,
        )  # fmt: skip
        ids = plan.global_ids(0, plan.num_samples)
        rows.append(quality_row(f"{algo} via astream (block {plan.block_size})", ids, bounds))
    if peer:
        with tempfile.TemporaryDirectory() as tmp:
            np.save(Path(tmp, "sizes.npy"), sizes)
            run_peer(peer, REF_ORDER, str(Path(tmp, "sizes.npy")), str(Path(tmp, "ids.npy")))
            ref = np.load(Path(tmp, "ids.npy"))
        rows.append(quality_row("reference py1e default", ref, bounds))
    for row in rows:
        row["index"] = label
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer-python", default="/work/peervenv/bin/python")
    ap.add_argument("--ref-samples", type=int, default=25_000_000)
    ap.add_argument("--skip-ref", action="store_true")
    ap.add_argument(
        "--ref-algos-only",
        type=int,
        metavar="REPS",
        default=0,
        help="only section 3 (and the reference's own time beside it), REPS repetitions",
    )
    args = ap.parse_args()
    peer = None if args.skip_ref or not Path(args.peer_python).exists() else args.peer_python
    report: dict[str, object] = {}
    if args.ref_algos_only:
        shards = args.ref_samples // 4000
        reps = []
        for _ in range(args.ref_algos_only):
            rep: dict[str, object] = dict(bench_reference_algos(args.ref_samples))
            if peer:
                drop = args.ref_samples // 2 // 2048 * 2048
                rep["reference"] = json.loads(
                    run_peer(peer, REF_SCALE, str(shards), "4000", str(drop))
                )
            reps.append(rep)
        report = {"samples": shards * 4000, "reps": reps}
        json.dump(report, sys.stdout, indent=1)
        print()
        return
    report["scale_shuffle_algo"] = "astream"  # the two scale rows: astream's own order
    report["scale_default_block"] = bench_scale(None)
    report["scale_block_262144"] = bench_scale(262144)
    if peer:
        shards = args.ref_samples // 4000
        drop = args.ref_samples // 2 // 2048 * 2048
        report["reference_scale"] = {
            "samples": shards * 4000,
            **json.loads(run_peer(peer, REF_SCALE, str(shards), "4000", str(drop))),
        }
    report["reference_algos_in_astream"] = {
        "samples": args.ref_samples // 4000 * 4000,
        **bench_reference_algos(args.ref_samples),
    }
    report["quality"] = bench_quality("tokens 200k/8 shards", np.full(8, 25_000), peer) + (
        bench_quality("images 20k/32 shards", np.full(32, 625), peer)
    )
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
