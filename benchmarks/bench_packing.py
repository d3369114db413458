"""Benchmark token packing (``pack_to``): hot-cache throughput against the plain sample path.

    .venv/bin/python benchmarks/bench_packing.py [--docs 100000] [--seq-len 2048] [--reps 3]
                                                 [--workers 2] [--loader-bs 8]
                                                 [--only NAME,...] [--out results.json]

Writes ``--docs`` documents of 1..999 random int32 tokens (``ndarray:int32``, 8 MB shards) to
a temp directory, then, interleaved ``--reps`` times, times one epoch of each, num_workers=0:

- ``samples``: the sample path, reading ``len(sample["input_ids"])`` (the floor packing
  builds on);
- ``packed``: ``StreamingDataset(pack_to=seq_len)``, every sequence;
- ``packed_batches``: ``ds.batches()`` of packed sequences (batch_size 64: (64, seq_len));
- ``pack_in_memory``: ``astream.core.token_packer.pack_tokens`` over the same documents already in
  a list (the packer alone);

and with ``--workers`` DataLoader workers, batches of ``--loader-bs`` packed sequences (also
the dataset's ``batch_size``: the planned batches dealt to workers):

- ``loader_samples``: ``StreamingDataLoader(ds, batch_size=B, num_workers=W)``, the sample path:
  sequences collated by torch's ``default_collate`` in the worker, handed over by torch's own
  pickling (per-tensor shared memory);
- ``loader_ring``: ``batch_format="torch"``: each batch stacked in the worker's shared-memory
  ring and handed over as a handle (``astream.torch.shm``);
- ``loader_ring_numpy``: the same with ``batch_format="numpy"``;
- ``loader_pickled``: a plain ``DataLoader`` over ``ds.batch_view("torch",
  shared_memory=False)``: the same stacked batches, handed over by torch's pickling.

Reports medians (seconds, million tokens per second), the ratio packed / samples and the
ratios of the loader runs to ``loader_samples`` (tokens/s). Every
token is checked to come out once (non-padding tokens counted). The machine may be shared:
compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from astream import MDSWriter, StreamingDataLoader, StreamingDataset
from astream.core.token_packer import PackSpec, pack_tokens


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--docs", type=int, default=100_000)
    p.add_argument("--seq-len", type=int, default=2048)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--loader-bs", type=int, default=8)
    p.add_argument("--only", default=None, help="comma-separated run names (default: all)")
    p.add_argument("--out", default=None)
    a = p.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-packing-")
    rng = np.random.default_rng(0)
    total = 0
    with MDSWriter(out=tmp, columns={"input_ids": "ndarray:int32"}, size_limit="8mb") as w:
        for _ in range(a.docs):
            n = int(rng.integers(1, 1000))
            total += n
            w.write({"input_ids": rng.integers(0, 50_000, size=n, dtype=np.int32)})
    L = a.seq_len
    docs = [s["input_ids"] for s in StreamingDataset(local=tmp, batch_size=64)]  # warm cache

    def samples() -> int:
        return sum(len(s["input_ids"]) for s in StreamingDataset(local=tmp, batch_size=64))

    def packed() -> int:
        ds = StreamingDataset(local=tmp, batch_size=64, pack_to=L)
        return sum(int((s["segment_ids"] > 0).sum()) for s in ds)

    def packed_batches() -> int:
        ds = StreamingDataset(local=tmp, batch_size=64, pack_to=L)
        return sum(int((b["segment_ids"] > 0).sum()) for b in ds.batches())

    def pack_in_memory() -> int:
        spec = PackSpec(L, "input_ids", "pad", 0)
        out = pack_tokens(iter(docs), spec, np.dtype(np.int32))
        return sum(int((s["segment_ids"] > 0).sum()) for s, _ in out)

    W, B = a.workers, a.loader_bs

    def count(loader: Any) -> int:
        return sum(int((b["segment_ids"] > 0).sum()) for b in loader)

    def loader_samples() -> int:
        ds = StreamingDataset(local=tmp, batch_size=B, pack_to=L)
        return count(StreamingDataLoader(ds, batch_size=B, num_workers=W))

    def loader_ring() -> int:
        ds = StreamingDataset(local=tmp, batch_size=B, pack_to=L)
        return count(StreamingDataLoader(ds, batch_size=B, num_workers=W, batch_format="torch"))

    def loader_ring_numpy() -> int:
        ds = StreamingDataset(local=tmp, batch_size=B, pack_to=L)
        return count(StreamingDataLoader(ds, batch_size=B, num_workers=W, batch_format="numpy"))

    def loader_pickled() -> int:
        from torch.utils.data import DataLoader

        ds = StreamingDataset(local=tmp, batch_size=B, pack_to=L)
        view = ds.batch_view("torch", shared_memory=False)
        return count(DataLoader(view, batch_size=None, num_workers=W))

    runs: dict[str, Callable[[], int]] = {
        "samples": samples, "packed": packed, "packed_batches": packed_batches,
        "pack_in_memory": pack_in_memory, "loader_samples": loader_samples,
        "loader_ring": loader_ring, "loader_ring_numpy": loader_ring_numpy,
        "loader_pickled": loader_pickled,
    }  # fmt: skip
    if a.only:
        runs = {k: runs[k] for k in a.only.split(",")}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(a.reps):
        for name, fn in runs.items():
            t = time.perf_counter()
            n = fn()
            times[name].append(time.perf_counter() - t)
            assert n == total, (name, n, total)
    result: dict[str, Any] = {
        "docs": a.docs, "tokens": total, "seq_len": L, "reps": a.reps, "workers": W,
        "loader_batch_size": B, "times_s": times,
        "median_s": {k: statistics.median(v) for k, v in times.items()},
    }  # fmt: skip
    med = result["median_s"]
    result["mtok_per_s"] = {k: total / v / 1e6 for k, v in med.items()}
    if "packed" in med and "samples" in med:
        result["packed_over_samples_time"] = med["packed"] / med["samples"]
    if "loader_samples" in med:
        result["loader_speedup_over_samples"] = {
            k: med["loader_samples"] / v for k, v in med.items() if k.startswith("loader_")
        }
    print(json.dumps(result, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
