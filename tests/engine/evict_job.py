"""One epoch of a training-like job for the eviction tests (run as a subprocess, per rank).

Reads RANK/WORLD_SIZE/LOCAL_WORLD_SIZE like any torchrun job; iterates epoch ``--epoch``
through a StreamingDataLoader with ``--workers`` workers and writes the labels it got, one
JSON list per batch, to ``--out``.<rank>. ``--sync``: a gloo process group (MASTER_ADDR/PORT
from the environment) and a barrier after every batch, so the ranks advance in lockstep like
data-parallel training (whose gradient all-reduce has the same effect). ``--step-ms``: a sleep
per batch (a training step's compute); ``--max-batches``: stop after that many batches. Timing
goes to ``--out``.<rank>.timing.json: the wait for the first batch (from ``iter(loader)``), the
waits for the later ones, and the epoch's seconds, all ``time.perf_counter``; and
``time.monotonic()`` when ``iter(loader)`` was called (``iter_monotonic``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from astream import StreamingDataLoader, StreamingDataset


def collate(batch: list[dict[str, Any]]) -> list[int]:
    return [int(s["label"]) for s in batch]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--remote", required=True)
    p.add_argument("--cache-dir", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--epoch", type=int, default=0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--cache-limit", type=int, default=None)
    p.add_argument("--cache-policy", default="next_use")
    p.add_argument("--block", type=int, default=None)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--sync", action="store_true", help="gloo barrier after every batch")
    p.add_argument("--step-ms", type=float, default=0.0, help="sleep per batch (compute)")
    p.add_argument("--max-batches", type=int, default=None)
    a = p.parse_args()
    if a.sync:  # ranks in lockstep, as data-parallel training keeps them
        import torch.distributed as dist

        dist.init_process_group("gloo")
    ds = StreamingDataset(
        remote=a.remote,
        local=a.cache_dir,
        batch_size=a.batch,
        shuffle=True,
        shuffle_algo="astream",  # the order the plans these runs are checked against simulate
        shuffle_block_size=a.block,
        cache_limit=a.cache_limit,
        cache_policy=a.cache_policy,
        storage_options={"endpoint_url": a.endpoint} if a.endpoint else None,
    )
    ds.set_epoch(a.epoch)
    loader = StreamingDataLoader(ds, batch_size=a.batch, num_workers=a.workers, collate_fn=collate)
    out = f"{a.out}.{os.environ.get('RANK', '0')}"
    waits: list[float] = []
    t0 = time.perf_counter()
    began = time.monotonic()  # the same clock in every process: tests compare it across them
    with open(out, "w") as f:
        it = iter(loader)
        while a.max_batches is None or len(waits) < a.max_batches:
            t = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            waits.append(time.perf_counter() - t)
            f.write(json.dumps(batch) + "\n")
            if a.step_ms:
                time.sleep(a.step_ms / 1e3)
            if a.sync:
                dist.barrier()
        del it
    timing = {
        "first_batch_s": waits[0] if waits else None,
        "later_waits_s": sum(waits[1:]),
        "seconds": time.perf_counter() - t0,
        "batches": len(waits),
        "iter_monotonic": began,
    }
    with open(out + ".timing.json", "w") as f:
        json.dump(timing, f)
    if a.sync:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
