"""How long astream holds an asyncio program's loop, and whether prefetch overlaps its steps.

Usage:  .venv/bin/python -m benchmarks.bench_async [--reps 3] [--hot-samples 500000]
                                                   [--out docs/results/async.json]

Starts moto's S3 server and a latency proxy on 127.0.0.1, writes the datasets, then measures,
each ``--reps`` times, with a heartbeat task that wakes every 5 ms beside astream and records
the longest gap between its wake-ups (``max_gap_ms``; 5 ms is the heartbeat's own period):

- ``open``: ``await AsyncStreamingDataset.open`` against S3 behind 200 ms per request, and, for
  comparison, the blocking constructor called from the same coroutine;
- ``cold``: an epoch from S3 behind 20 ms per request (``io="thread"`` and ``io="loop"``);
- ``hot``: an epoch of ``--hot-samples`` small samples from a local dataset; ``hot_gc_frozen``
  the same after ``gc.freeze()`` (Python's full collections, triggered by the epoch's
  allocations, otherwise scan every object of the process: ~100 ms each here);
- ``random``: 200 ``aget`` of uncached samples from S3 behind 20 ms;
- ``overlap``: an epoch from S3 behind 20 ms and 8 MB/s (so that downloading the ~50 MB takes
  about as long as the steps: only overlap hides it) with a 12 ms step per batch of 32, blocking
  (``time.sleep``) or awaited (``asyncio.sleep``), for ``aiter(io="thread")``,
  ``aiter(io="loop")`` and the synchronous path (``for s in StreamingDataset``,
  ``num_workers=0``); the figure is the epoch's wall time, ``ratio_to_sync`` = async / sync.

astream only: neither mosaicml-streaming nor litdata has an asyncio path to compare with.
Raw results go to ``--out`` (JSON: every repetition, plus medians); docs/results/async.md
quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from astream import MDSWriter, StreamingDataset
from astream.aio import AsyncStreamingDataset
from astream.storage.sync import upload
from astream.testing import MotoServer
from astream.testing.faultproxy import FaultProxy

HEARTBEAT_S = 0.005
# the shuffled order every epoch here runs, named (the dataset's default is the reference's
# py1e): astream's own block order, as in the figures docs/results/async.md quotes; recorded in
# settings
ORDER = "astream"


class Heartbeat:
    def __init__(self) -> None:
        self.beats: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.beats.append(time.perf_counter())
            await asyncio.sleep(HEARTBEAT_S)

    async def __aenter__(self) -> Heartbeat:
        self._task = asyncio.get_running_loop().create_task(self._run())
        await asyncio.sleep(0.02)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        assert self._task is not None
        self._task.cancel()
        self.beats.append(time.perf_counter())

    @property
    def max_gap_ms(self) -> float:
        return float(np.diff(self.beats).max() * 1000)


def write(path: str, n: int, payload: int) -> None:
    rng = np.random.default_rng(0)
    with MDSWriter(out=path, columns={"x": "int", "tokens": "bytes"}, size_limit="8mb") as w:
        blob = rng.bytes(payload)
        for i in range(n):
            w.write({"x": i, "tokens": blob})


async def m_open(remote: str, opts: dict[str, Any], work: str) -> dict[str, float]:
    async with Heartbeat() as hb:
        t = time.perf_counter()
        ds = await AsyncStreamingDataset.open(
            remote=remote, local=os.path.join(work, uuid.uuid4().hex), storage_options=opts
        )
        took = time.perf_counter() - t
        await ds.aclose()
    async with Heartbeat() as hb2:
        StreamingDataset(
            remote=remote, local=os.path.join(work, uuid.uuid4().hex), storage_options=opts
        )
    return {"open_s": took, "max_gap_ms": hb.max_gap_ms, "blocking_ctor_gap_ms": hb2.max_gap_ms}


async def m_epoch(
    remote: str | None, local: str, opts: dict[str, Any], io: str
) -> dict[str, float]:
    ds = await AsyncStreamingDataset.open(
        remote=remote,
        local=local,
        storage_options=opts,
        batch_size=32,
        shuffle=True,
        shuffle_algo=ORDER,
    )
    async with Heartbeat() as hb:
        t = time.perf_counter()
        n = 0
        async for _ in ds.aiter(io=io):
            n += 1
        took = time.perf_counter() - t
    await ds.aclose()
    return {"samples": n, "samples_per_s": n / took, "max_gap_ms": hb.max_gap_ms}


async def m_random(remote: str, opts: dict[str, Any], work: str, n: int) -> dict[str, float]:
    ds = await AsyncStreamingDataset.open(
        remote=remote, local=os.path.join(work, uuid.uuid4().hex), storage_options=opts
    )
    ids = np.random.default_rng(1).choice(ds.num_samples, 200, replace=False).tolist()
    async with Heartbeat() as hb:
        t = time.perf_counter()
        await ds.aget_many(ids, concurrency=8)
        took = time.perf_counter() - t
    await ds.aclose()
    return {"reads_per_s": len(ids) / took, "max_gap_ms": hb.max_gap_ms}


async def m_overlap_async(
    remote: str, local: str, opts: dict[str, Any], io: str, awaited: bool
) -> float:
    ds = await AsyncStreamingDataset.open(
        remote=remote,
        local=local,
        storage_options=opts,
        batch_size=32,
        shuffle=True,
        shuffle_algo=ORDER,
    )
    t = time.perf_counter()
    async for _ in ds.aiter(32, io=io):
        if awaited:
            await asyncio.sleep(0.012)
        else:
            time.sleep(0.012)
    took = time.perf_counter() - t
    await ds.aclose()
    return took


def m_overlap_sync(remote: str, local: str, opts: dict[str, Any]) -> float:
    ds = StreamingDataset(
        remote=remote,
        local=local,
        storage_options=opts,
        batch_size=32,
        shuffle=True,
        shuffle_algo=ORDER,
    )
    t = time.perf_counter()
    for k, _ in enumerate(ds, 1):
        if k % 32 == 0:
            time.sleep(0.012)
    return time.perf_counter() - t


def med(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--hot-samples", type=int, default=500_000)
    ap.add_argument("--cold-samples", type=int, default=20_000)
    ap.add_argument("--out", default="docs/results/async.json")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="astream-bench-async-")
    results: dict[str, Any] = {"settings": {**vars(a), "shuffle_algo": ORDER}, "runs": {}}
    with MotoServer() as s3:
        os.environ.update(s3.env())
        s3.create_bucket("bench")
        cold_src = os.path.join(work, "cold-src")
        write(cold_src, a.cold_samples, 2500)  # ~2.5 KB token rows, ~50 MB
        remote = "s3://bench/cold"
        upload(cold_src, remote)
        hot = os.path.join(work, "hot")
        write(hot, a.hot_samples, 16)
        slow, fast = (
            FaultProxy(s3.url, latency=0.2).start(),
            FaultProxy(s3.url, latency=0.02).start(),
        )
        narrow = FaultProxy(s3.url, latency=0.02, bandwidth=8e6).start()
        slow_opts, opts = {"endpoint_url": slow.url}, {"endpoint_url": fast.url}
        narrow_opts = {"endpoint_url": narrow.url}
        runs: dict[str, list[Any]] = {}

        def add(name: str, value: Any) -> None:
            runs.setdefault(name, []).append(value)
            print(name, value, flush=True)

        for _ in range(a.reps):
            add("open_200ms", asyncio.run(m_open(remote, slow_opts, work)))
            for io in ("thread", "loop"):
                local = os.path.join(work, uuid.uuid4().hex)
                add(f"cold_20ms_{io}", asyncio.run(m_epoch(remote, local, opts, io)))
            add("hot", asyncio.run(m_epoch(None, hot, {}, "thread")))
            gc.freeze()  # the process's objects so far leave the collector's full passes
            add("hot_gc_frozen", asyncio.run(m_epoch(None, hot, {}, "thread")))
            gc.unfreeze()
            add("random_20ms", asyncio.run(m_random(remote, opts, work, 200)))
            sync_t = m_overlap_sync(remote, os.path.join(work, uuid.uuid4().hex), narrow_opts)
            row: dict[str, float] = {"sync_blocking_s": sync_t}
            for io in ("thread", "loop"):
                for awaited in (False, True):
                    local = os.path.join(work, uuid.uuid4().hex)
                    took = asyncio.run(m_overlap_async(remote, local, narrow_opts, io, awaited))
                    kind = "awaited" if awaited else "blocking"
                    row[f"{io}_{kind}_s"] = took
                    row[f"{io}_{kind}_ratio_to_sync"] = took / sync_t
            add("overlap_8MBps_20ms_12ms_step", row)
        slow.stop()
        fast.stop()
        narrow.stop()
        results["runs"] = runs
        results["medians"] = {k: med(v) for k, v in runs.items()}
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print(json.dumps(results["medians"], indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
