#!/usr/bin/env python
"""Core format speed: per-sample decode and writer MB/s, astream vs mosaicml-streaming.

    .venv/bin/python benchmarks/bench_core.py [--n 20000] [--peer-python /work/peervenv/bin/python]

Data: ``n`` samples of ``{"x": ndarray:int32:512, "y": int}`` (the issue's reference case), one
local dataset per library. Decode = ``ds[i]`` over every id through each library's
``LocalDataset`` (mosaic's runs in a subprocess under the peer venv, with a stub torchvision),
plus astream's bare core path (ShardView + SampleDecoder). Medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMNS = {"x": "ndarray:int32:512", "y": "int"}

PEER = r"""
import json, sys, time, shutil, numpy as np
from streaming import MDSWriter
from streaming.base.local import LocalDataset
out, n, repeat, comp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
comp = None if comp == "none" else comp
rng = np.random.default_rng(0)
rows = [{"x": rng.integers(0, 1 << 30, 512, dtype=np.int32), "y": i} for i in range(n)]
write = []
for r in range(repeat):
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    with MDSWriter(out=out, columns={"x": "ndarray:int32:512", "y": "int"}, compression=comp) as w:
        for s in rows: w.write(s)
    write.append(time.perf_counter() - t)
decode = []
if comp is None:
    ds = LocalDataset(out)
    for r in range(repeat):
        t = time.perf_counter()
        for i in range(n): ds[i]
        decode.append((time.perf_counter() - t) / n)
print(json.dumps({"write_s": write, "decode_s": decode}))
"""


def _rows(n: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(0)
    return [{"x": rng.integers(0, 1 << 30, 512, dtype=np.int32), "y": i} for i in range(n)]


def _astream(out: str, n: int, repeat: int, comp: str | None) -> dict[str, list[float]]:
    from astream.core.shard import SampleDecoder, ShardView
    from astream.local import LocalDataset
    from astream.writer.mds import MDSWriter

    rows = _rows(n)
    write = []
    for _ in range(repeat):
        t = time.perf_counter()
        with MDSWriter(out=out, columns=COLUMNS, compression=comp, exist_ok=True) as w:
            for s in rows:
                w.write(s)
        write.append(time.perf_counter() - t)
    decode, core = [], []
    if comp is None:
        for _ in range(repeat):
            ds = LocalDataset(out)
            t = time.perf_counter()
            for i in range(n):
                ds[i]
            decode.append((time.perf_counter() - t) / n)
        shard = ds.shards[0]
        with open(os.path.join(out, shard.raw_data.basename), "rb") as f:
            view = ShardView(f.read(), shard, "bench")
        dec = SampleDecoder(shard, False, "bench")
        for _ in range(repeat):
            t = time.perf_counter()
            for i in range(len(view)):
                dec.decode(view.sample_bytes(i))
            core.append((time.perf_counter() - t) / len(view))
    return {"write_s": write, "decode_s": decode, "core_s": core}


def _peer(peer: str, out: str, n: int, repeat: int, comp: str | None) -> dict[str, list[float]]:
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from gen_golden import _STUBS

    with tempfile.TemporaryDirectory() as stub:
        for rel, text in _STUBS.items():
            os.makedirs(os.path.dirname(os.path.join(stub, rel)), exist_ok=True)
            with open(os.path.join(stub, rel), "w") as f:
                f.write(text)
        env = dict(os.environ, PYTHONPATH=stub)
        res = subprocess.run(
            [peer, "-c", PEER, out, str(n), str(repeat), comp or "none"],
            env=env, capture_output=True, text=True, check=True,
        )  # fmt: skip
    result: dict[str, list[float]] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peer-python", default="/work/peervenv/bin/python")
    args = ap.parse_args()
    mb = args.n * (512 * 4 + 8) / 1e6
    med = statistics.median
    print(f"{args.n} samples of ndarray:int32:512 + int ({mb:.1f} MB), medians of {args.repeat}")
    print(f"{'metric':<34}{'astream':>12}{'mosaic':>12}{'ratio':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        for comp in (None, "zstd:3"):
            ours = _astream(os.path.join(tmp, "a"), args.n, args.repeat, comp)
            theirs = _peer(args.peer_python, os.path.join(tmp, "m"), args.n, args.repeat, comp)
            a, m = mb / med(ours["write_s"]), mb / med(theirs["write_s"])
            print(f"{'write MB/s (' + (comp or 'raw') + ')':<34}{a:>12.0f}{m:>12.0f}{a / m:>8.1f}x")
            if comp is None:
                a, m = med(ours["decode_s"]) * 1e6, med(theirs["decode_s"]) * 1e6
                print(f"{'LocalDataset ds[i] us/sample':<34}{a:>12.2f}{m:>12.2f}{m / a:>8.1f}x")
                c = med(ours["core_s"]) * 1e6
                print(f"{'core ShardView+decode us/sample':<34}{c:>12.2f}{m:>12.2f}{m / c:>8.1f}x")


if __name__ == "__main__":
    main()
