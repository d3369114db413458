"""``astream bench URL``: measure astream on your own dataset; ``--harness`` runs the
comparative benchmark harness (``python -m benchmarks.run``) of a source checkout.

Theory of operation
-------------------
The pass over ``URL`` runs in this process against a fresh, temporary cache directory (so the
first epoch is cold): time to build the dataset (index fetch), time to first batch, samples/s
and MB/s for up to ``--max-samples`` samples through ``StreamingDataLoader`` with
``--num-workers`` workers, then ``--random`` random-access reads (median latency). Fetched
bytes and cache counters come from :class:`astream.metrics.Metrics`, workers included.

``--harness`` forwards the remaining arguments to ``benchmarks/run.py`` in a subprocess. That
harness compares astream with mosaicml-streaming and litdata on generated workloads; it
exists only in a source checkout (it is not part of the installed package).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from astream.cli.common import is_local, join_split
from astream.errors import ConfigError

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    p = sub.add_parser("bench", help="measure streaming throughput on your dataset")
    p.add_argument("url", nargs="?", help="dataset directory or remote URL")
    p.add_argument("--split")
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-samples", type=int, default=20_000, help="stop the pass after this many")
    p.add_argument("--random", type=int, default=50, help="random-access reads to time")
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--harness",
        nargs=argparse.REMAINDER,
        help="run `python -m benchmarks.run` with the arguments that follow",
    )
    p.set_defaults(func=run)


def _listify(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return batch


def _nbytes(sample: dict[str, Any]) -> int:
    n = 0
    for v in sample.values():
        if isinstance(v, np.ndarray):
            n += v.nbytes
        elif isinstance(v, (bytes, str)):
            n += len(v)
        else:
            n += 8
    return n


def measure(
    url: str, num_workers: int, batch_size: int, max_samples: int, n_random: int
) -> dict[str, Any]:
    from astream import StreamingDataLoader, StreamingDataset
    from astream.metrics import Metrics

    tmp = tempfile.mkdtemp(prefix="astream-bench-")
    try:
        t0 = time.perf_counter()
        if is_local(url):
            ds = StreamingDataset(local=url, batch_size=batch_size, shuffle=True)
        else:
            ds = StreamingDataset(remote=url, local=tmp, batch_size=batch_size, shuffle=True)
        t_index = time.perf_counter() - t0
        with Metrics(ds, interval=0.5) as m:
            loader = StreamingDataLoader(
                ds,
                batch_size=batch_size,
                num_workers=num_workers,
                collate_fn=_listify,
                worker_init_fn=m.worker_init_fn if num_workers else None,
            )
            samples = nbytes = 0
            ttfb = float("nan")
            for batch in loader:
                if samples == 0:
                    ttfb = time.perf_counter() - t0
                samples += len(batch)
                nbytes += sum(_nbytes(s) for s in batch)
                if samples >= max_samples:
                    break
            dt = time.perf_counter() - t0
            del loader
            snap = m.snapshot()
        rng = np.random.default_rng(0)
        lat = []
        for i in rng.integers(0, ds.num_samples, size=n_random).tolist():
            t = time.perf_counter()
            ds[int(i)]
            lat.append(time.perf_counter() - t)
        return {
            "url": url,
            "shuffle_algo": ds.shuffle_algo,  # the dataset's default order: say which it was
            "samples": samples,
            "index_s": t_index,
            "ttfb_s": ttfb,
            "seconds": dt,
            "samples_per_s": samples / dt,
            "decoded_mb_per_s": nbytes / dt / 1e6,
            "fetched_mb_per_s": snap["bytes_fetched"] / dt / 1e6,
            "random_median_ms": float(np.median(lat)) * 1e3 if lat else float("nan"),
            "metrics": snap,
        }
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _harness(extra: list[str]) -> int:
    try:
        found = importlib.util.find_spec("benchmarks.run") is not None
    except ModuleNotFoundError:  # no `benchmarks` package at all
        found = False
    if not found:
        raise ConfigError(
            "--harness needs benchmarks/run.py from an astream source checkout: run "
            "`astream bench --harness ...` from the repository root"
        )
    return subprocess.call([sys.executable, "-m", "benchmarks.run", *extra])


def run(args: argparse.Namespace) -> int:
    if args.harness is not None:
        return _harness(args.harness)
    if not args.url:
        raise ConfigError("bench: give a dataset URL (or --harness ...)")
    if args.max_samples < 1 or args.random < 0:
        raise ConfigError("--max-samples must be >= 1 and --random >= 0")
    r = measure(
        join_split(args.url, args.split),
        args.num_workers,
        args.batch_size,
        args.max_samples,
        args.random,
    )
    if args.json:
        print(json.dumps(r, indent=1))
        return 0
    print(f"dataset         {r['url']}")
    print(f"index load      {r['index_s']:.3f} s")
    print(f"first batch     {r['ttfb_s']:.3f} s (cold cache)")
    print(
        f"epoch pass      {r['samples']} samples in {r['seconds']:.2f} s: "
        f"{r['samples_per_s']:.0f} samples/s, {r['decoded_mb_per_s']:.1f} MB/s decoded, "
        f"{r['fetched_mb_per_s']:.1f} MB/s fetched"
    )
    print(f"random access   median {r['random_median_ms']:.2f} ms per sample")
    m = r["metrics"]
    print(
        f"cache           hits {m['cache_hits']:.0f}, misses {m['cache_misses']:.0f}, "
        f"shards fetched {m['shards_fetched']:.0f}, waited {m['wait_seconds']:.2f} s"
    )
    print(f"order           shuffled, shuffle_algo={r['shuffle_algo']!r} (the default)")
    return 0
