#!/usr/bin/env python
"""Reproduce the soak findings of docs/results/reliability.md that are not test output.

Usage:  python scripts/reliability_figures.py [rss] [thrash] [--samples 4000] [--datasets 15]

``rss``: builds ``--datasets`` remote datasets in a row over a moto S3 emulator (the soak's
4,000 samples in ~200 KB shards), iterates each once, and prints the process RSS after the
first and the last (the per-remote-dataset store leak, fixed by shared stores); then the same
dataset iterated ``--datasets`` times, and a new local-only dataset per round, for contrast.

``thrash``: 4,000 samples of 40..2040 B (tests/reliability's payload) read from a local
directory used as the remote, one consumer, default shuffle: one epoch with
``cache_limit="3mb"`` (below the dataset, ~15 of 22 shards) and one without; prints shards and
bytes fetched and the epoch time of each.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
import warnings
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from astream import MDSWriter, StreamingDataset
from scripts.soak import payload as soak_payload
from scripts.soak import rss_mb
from tests.reliability.conftest import payload as small_payload


def write(path: str, n: int, payload: Any = soak_payload) -> str:
    with MDSWriter(
        out=path, columns={"data": "bytes", "id": "int"}, size_limit=200_000, hashes=["xxh64"]
    ) as w:
        for i in range(n):
            w.write({"id": i, "data": payload(i)})
    return path


def epoch(ds: StreamingDataset, n: int) -> None:
    ids = sorted(int(s["id"]) for s in ds)
    if ids != list(range(n)):
        raise SystemExit(f"wrong samples: {len(ids)} of {n}")


def rss(tmp: str, n: int, rounds: int) -> None:
    from astream.storage.sync import upload
    from astream.testing import MotoServer

    for k, v in {"AWS_ACCESS_KEY_ID": "fig", "AWS_SECRET_ACCESS_KEY": "fig"}.items():
        os.environ.setdefault(k, v)
    src = write(os.path.join(tmp, "src"), n)
    server = MotoServer().start()
    try:
        bucket = f"fig-{uuid.uuid4().hex[:8]}"
        server.create_bucket(bucket)
        url = f"s3://{bucket}/plain"
        upload(src, url, **server.store_options())
        seen = []
        for r in range(rounds):
            ds = StreamingDataset(
                remote=url,
                local=os.path.join(tmp, f"remote-{r}"),
                batch_size=8,
                storage_options=server.store_options(),
            )
            epoch(ds, n)
            del ds
            seen.append(rss_mb())
        print(
            f"rss: {rounds} remote datasets built and iterated: RSS {seen[0]:.0f} MB after the "
            f"first, {seen[-1]:.0f} MB after the last ({seen[-1] - seen[0]:+.1f} MB)"
        )
        ds = StreamingDataset(
            remote=url,
            local=os.path.join(tmp, "same"),
            batch_size=8,
            storage_options=server.store_options(),
        )
        epoch(ds, n)
        before = rss_mb()
        for _ in range(rounds):
            epoch(ds, n)
        print(f"rss: one remote dataset iterated {rounds} more times: {rss_mb() - before:+.1f} MB")
        before = rss_mb()
        for _ in range(rounds):
            epoch(StreamingDataset(local=src, batch_size=8), n)
        print(f"rss: {rounds} local-only datasets: {rss_mb() - before:+.1f} MB")
    finally:
        server.stop()


def thrash(tmp: str, n: int) -> None:
    src = write(os.path.join(tmp, "thrash-src"), n, small_payload)  # 40..2040 B samples
    shards = sum(1 for f in os.listdir(src) if f.startswith("shard."))
    size = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src))
    print(f"thrash: {n} samples in {shards} shards ({size / 1e6:.1f} MB)")
    for limit in ("3mb", None):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = StreamingDataset(
                remote=src,
                local=os.path.join(tmp, f"thrash-{limit}"),
                batch_size=8,
                shuffle=True,
                cache_limit=limit,
            )
        t0 = time.perf_counter()
        epoch(ds, n)
        dt = time.perf_counter() - t0
        st = ds.stats
        warned = "; warned: " + str(caught[0].message)[:80] + "..." if caught else ""
        print(
            f"thrash: cache_limit={limit}: {st.shards_fetched} shards, "
            f"{st.bytes_fetched / 1e6:.1f} MB fetched in {dt:.2f} s{warned}"
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("what", nargs="*", default=["rss", "thrash"], choices=["rss", "thrash"])
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--datasets", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="astream-fig-") as tmp:
        if "rss" in a.what:
            rss(tmp, a.samples, a.datasets)
        if "thrash" in a.what:
            thrash(tmp, a.samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
