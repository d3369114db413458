"""A training-like job for the crash and concurrency tests, run as a subprocess.

Runs ``--epochs`` epochs through a StreamingDataLoader and, per batch, appends one JSON line
``{"epoch": e, "ids": [...], "bad": [...]}`` to ``--out`` (flushed, so a killed job leaves what
it consumed); ``bad`` lists ids whose bytes differ from :func:`payload`. Prints ``READY`` once
the first batch arrived (the SIGINT test waits for it); with ``--tell-batches``, also
``BATCH n`` after the n-th batch of the run is written (the kill trials kill at a batch).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from astream import StreamingDataLoader, StreamingDataset
from tests.reliability.conftest import payload


def collate(batch: list[dict[str, Any]]) -> tuple[list[int], list[int]]:
    ids = [int(s["id"]) for s in batch]
    return ids, [i for i, s in zip(ids, batch) if bytes(s["data"]) != payload(i)]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--remote")
    p.add_argument("--local")
    p.add_argument("--out", required=True)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--cache-limit", default=None)
    p.add_argument("--endpoint", default=None)
    p.add_argument("--shuffle", action="store_true")
    p.add_argument("--tell-batches", action="store_true")
    a = p.parse_args()
    opts = {"endpoint_url": a.endpoint} if a.endpoint else None
    ds = StreamingDataset(
        remote=a.remote,
        local=a.local,
        batch_size=a.batch,
        shuffle=a.shuffle,
        cache_limit=a.cache_limit,
        storage_options=opts,
        download_timeout=20,
    )
    loader = StreamingDataLoader(ds, batch_size=a.batch, num_workers=a.workers, collate_fn=collate)
    told = 0
    with open(a.out, "a") as f:
        for epoch in range(a.epochs):
            for n, (ids, bad) in enumerate(loader):
                f.write(json.dumps({"epoch": epoch, "ids": ids, "bad": bad}) + "\n")
                f.flush()
                if n == 0 and epoch == 0:
                    print("READY", flush=True)
                if a.tell_batches:
                    print(f"BATCH {told}", flush=True)
                    told += 1
    sys.exit(0)


if __name__ == "__main__":
    main()
