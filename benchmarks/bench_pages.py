"""Parquet page reads at the start of a cold iteration: the same table with and without a page
index, streamed by astream through a 20 ms proxy, A/B interleaved.

Usage:  python -m benchmarks.bench_pages [--scale 0.25] [--group-mb 32] [--reps 3]
        [--backend gcs|s3] [--order off,on] [--out DIR]

Theory of operation
-------------------
The ``tokens`` workload (benchmarks/workloads.py) is written twice by
``bench_parquet.write_parquet`` (``list<uint16>`` payloads, row groups of ``--group-mb``, four per
file, pyarrow's default 1 MB pages): once plain (``off``), once with the page index
(``on``, ``write_page_index=True``, what Spark writes by default). With the index, astream
reads a cold iteration's first batch by pages when every row group of that batch needs at most
``page_share`` (a quarter) of its bytes (``parquet/io_pages.py``); without it, by whole
row groups.

Both tables go to one emulator behind a ``FaultProxy`` with 20 ms per request: by default
fake-gcs-server, which serves a ranged GET of a large object in ~1-3 ms. moto (``--backend
s3``) reads the whole object for every ranged GET (134-149 ms for 1 KB of the 130 MB object
here), so there any page read of a large file costs what reading the file costs, which no real
object store does. Each run first times five 1 KB ranged GETs of the
largest object straight to the emulator (``range_probe_s`` in the results).

Each run: a fresh cache, a ``StreamingDataLoader`` over one shuffled epoch; recorded: time to
first batch (from the dataset's creation), the epoch's time and MB/s of payload, stalls (gaps
between batches over 1 s), and the requests and MB the proxy served before the first batch
and in all. Two settings: 2 workers x batch 32 (each worker's first batch then touches every
row group on most of its pages: read whole) and ``num_workers=0`` x batch 8 (a few pages).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ((2, 32), (0, 8))
# the shuffled order every run reads in, named (the dataset's default is the reference's py1e):
# astream's own block order, as in the figures already reported; recorded in the layout
ORDER = "astream"


def _count(batch: list[Any]) -> int:
    return len(batch)


def _tables(work: Path, scale: float, group: int, seed: int) -> dict[str, Path]:
    from benchmarks.bench_parquet import write_parquet
    from benchmarks.workloads import WORKLOADS, Source, materialize

    w = WORKLOADS["tokens"]
    source = Source(materialize(work / "src", w, scale, seed), w.payload_kind)
    out = {}
    for v in ("off", "on"):
        d = work / v
        done = work / f"{v}.json"
        want = {"group": group, "scale": scale, "seed": seed}
        if not done.exists() or json.loads(done.read_text()).get("want") != want:
            info = write_parquet(source, "tokens", d, group, page_index=(v == "on"))
            done.write_text(json.dumps({"want": want, **info}))
        out[v] = d
    return out


def _range_probe(url: str, opts: dict[str, Any], table: Path) -> list[float]:
    """Seconds for five 1 KB ranged GETs of the table's largest object, without the proxy:
    what the emulator itself costs per ranged GET of a large object."""
    from astream import bridge
    from astream.storage.registry import open_store

    big = max(table.glob("*.parquet"), key=lambda p: p.stat().st_size)
    store = open_store(url, **opts)
    out = []
    try:
        for _ in range(5):
            t = time.perf_counter()
            bridge.run(store.get_range(f"on/{big.name}", 1000, 2000))
            out.append(round(time.perf_counter() - t, 4))
    finally:
        bridge.run(store.aclose())
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--group-mb", type=float, default=32.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--backend", choices=("gcs", "s3"), default="gcs")
    ap.add_argument("--order", default="off,on", help="the sides' order within a rep")
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "pages-work")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "pages-report")
    a = ap.parse_args()

    import torch  # noqa: F401  (imported before timing, as a training job has it)

    from astream import StreamingDataLoader, StreamingDataset
    from astream.storage.sync import upload
    from astream.testing import FaultProxy
    from astream.testing.servers import FakeGcsServer, MotoServer

    def log(msg: str) -> None:
        print(f"[pages {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    tables = _tables(a.work.resolve(), a.scale, int(a.group_mb * (1 << 20)), a.seed)
    payload_mb = sum(p.stat().st_size for p in tables["off"].glob("*.parquet")) / 1e6
    srv: Any = FakeGcsServer() if a.backend == "gcs" else MotoServer()
    srv.start()
    os.environ.update(srv.env())
    bucket = "pg" + uuid.uuid4().hex[:8]
    srv.create_bucket(bucket)
    scheme = "gs" if a.backend == "gcs" else "s3"
    up_opts = srv.store_options() if a.backend == "gcs" else {"endpoint_url": srv.url}
    for v, d in tables.items():
        upload(str(d), f"{scheme}://{bucket}/{v}", **up_opts)
    probe = _range_probe(f"{scheme}://{bucket}", up_opts, tables["on"])
    log(f"1 KB ranged GETs of the largest object, straight to the emulator: {probe} s")
    proxy = FaultProxy(srv.url, latency=a.latency_ms / 1000).start()
    opts = {"api_root": proxy.url} if a.backend == "gcs" else {"endpoint_url": proxy.url}
    a.out.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, Any]] = []
    try:
        for rep in range(a.reps):
            for workers, batch in SETTINGS:
                for v in a.order.split(","):
                    proxy.reset_stats()
                    cache = f"/tmp/astream-pages-{uuid.uuid4().hex[:8]}"
                    t0 = time.perf_counter()
                    ds = StreamingDataset(
                        remote=f"{scheme}://{bucket}/{v}", local=cache, format="parquet",
                        shuffle=True, shuffle_seed=a.seed, batch_size=batch,
                        storage_options=opts, shuffle_algo=ORDER,
                    )  # fmt: skip
                    ld = StreamingDataLoader(
                        ds, batch_size=batch, num_workers=workers, collate_fn=_count
                    )
                    n, first, last, stalls = 0, None, 0.0, 0
                    req_first = mb_first = 0.0
                    for k in ld:
                        now = time.perf_counter() - t0
                        if first is None:
                            first = now
                            req_first = len(proxy.stats.ranges)
                            mb_first = proxy.stats.total_bytes / 1e6
                        elif now - last > 1.0:
                            stalls += 1
                        last = now
                        n += k
                    r = {
                        "rep": rep, "workers": workers, "batch": batch, "page_index": v,
                        "ttfb_s": first, "epoch_s": last, "mb_per_s": payload_mb / last,
                        "samples": n, "stalls": stalls, "requests_before_first": req_first,
                        "mb_before_first": mb_first, "requests": len(proxy.stats.ranges),
                        "mb": proxy.stats.total_bytes / 1e6,
                    }  # fmt: skip
                    log(json.dumps(r))
                    records.append(r)
                    del ld, ds
                    shutil.rmtree(cache, ignore_errors=True)  # runs leave no cache behind
    finally:
        proxy.stop()
        srv.stop()
    summary = []
    for workers, batch in SETTINGS:
        row: dict[str, Any] = {"workers": workers, "batch": batch}
        for v in ("off", "on"):
            rs = [r for r in records if r["workers"] == workers and r["page_index"] == v]
            for key in ("ttfb_s", "epoch_s", "mb_before_first", "stalls"):
                row[f"{v}_{key}"] = statistics.median(r[key] for r in rs) if rs else None
        if row["off_ttfb_s"] and row["on_ttfb_s"] is not None:
            row["ttfb_on_over_off"] = row["on_ttfb_s"] / row["off_ttfb_s"]
        summary.append(row)
    layout = {
        "backend": a.backend, "scale": a.scale, "group_mb": a.group_mb, "reps": a.reps,
        "latency_ms": a.latency_ms, "order": a.order, "table_mb": payload_mb,
        "python": sys.version.split()[0], "range_probe_s": probe, "shuffle_algo": ORDER,
    }  # fmt: skip
    (a.out / "results.json").write_text(
        json.dumps({"layout": layout, "records": records, "summary": summary}, indent=1)
    )
    for row in summary:
        log(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
