"""Streaming Parquet: astream beside litdata's ParquetLoader, Hugging Face ``datasets`` streaming
and astream on the same data as MDS; and the footer-only index of many small files.

Usage:  python -m benchmarks.bench_parquet [--scale 0.05] [--reps 3] [--workers 2]
        [--group-mb MB] [--page-index] [--latency-ms 20] [--bandwidth-mbps 0]
        [--index-files 10000] [--out DIR]
        [--peer-python /work/peervenv/bin/python] [--hf-python .bench/hf-venv/bin/python]

Theory of operation
-------------------
Data: the ``tokens`` and ``images`` workloads of benchmarks/workloads.py (same samples, same
seed) are written once as a Parquet table (``id`` int64, ``label`` int64, ``payload``
``list<uint16>`` for tokens or ``binary`` for images; pyarrow's default snappy; row groups of
``shard_bytes(scale)`` -- 64 MiB at scale 1, scaled down like every other benchmark's shards --
or ``--group-mb``; four row groups per file; with ``--page-index``, with the page index that
Spark writes by default, whose offset index lets astream read a cold start's rows by pages)
and as MDS by astream's writer with the same shard size. Both go to moto behind the shaping
proxy (benchmarks/servers.py, benchmarks/proxy.py) with ``--latency-ms`` per request and,
with ``--bandwidth-mbps`` (MB/s; 0: unlimited), a cap on the bytes/s the proxy sends in all
(a node's link, shared by its processes).

The Hugging Face venv is made once by hand (``datasets`` conflicts with the peers' venv):
``python -m venv .bench/hf-venv && .bench/hf-venv/bin/pip install datasets s3fs torch==2.13.0``
(the project's CPU torch build). Without it the ``hf-parquet`` side is skipped and said so.

Sides, each a fresh process (astream in this python; litdata in the peers' venv, with polars and
pyarrow added; Hugging Face ``datasets`` in its own venv when ``--hf-python`` exists -- it does
not install cleanly into the peers' venv, see docs/parquet.md), run interleaved (A B C D A B C D
...) ``--reps`` times, each with a fresh cache:

- ``astream-parquet``: ``StreamingDataset(remote=..., format="parquet")``;
- ``astream-mds``: the MDS copy;
- ``lit-parquet``: litdata ``StreamingDataset(..., item_loader=ParquetLoader())`` over the
  table, indexed beforehand by ``litdata.index_parquet_dataset`` (untimed);
- ``hf-parquet``: ``datasets.load_dataset("parquet", data_files=..., streaming=True)`` over
  s3fs, ``.shuffle(buffer_size=1000)``.

Every side reads one shuffled epoch through a torch DataLoader with ``--workers`` workers, batch
32, the same collate (benchmarks/collate.py; a payload that a library returns as a Python list
becomes a uint16 array first). Figures: time to first batch (from the dataset's creation), MB/s
of payload over the epoch, and the stalls (gaps between batches over 1 s, and the longest),
reported apart so one slow peer does not hide in a median; for astream, also ``dataset_s``: the
part of the time to first batch spent building the dataset (listing, index, footers when cold).
The astream sides then read a second
epoch over the filled cache (the hot epoch). ``index`` builds the footer-only index of
``--index-files`` one-row-group Parquet objects: a dataset's construction with an empty cache
(cold: listing + every footer by a ranged GET) and again over the same cache (warm: the listing
only). Results: ``results.json`` (every run) and ``summary.json`` (medians, ratios) in ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.sides import side_result

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "pqbench"
GROUPS_PER_FILE = 4
STALL_S = 1.0
# the shuffled order of the astream sides, named (the dataset's default is the reference's
# py1e): astream's own block order, as in the figures already reported; recorded in the layout
ORDER = "astream"


# -- the sides (run in their own process, maybe another venv: stdlib + numpy at import) ------


def _pq_collate(batch: list[dict[str, Any]]) -> Any:
    from benchmarks.collate import collate

    for s in batch:
        if isinstance(s["payload"], list):
            s["payload"] = np.asarray(s["payload"], dtype=np.uint16)
    return collate(batch)


def _epoch(loader: Any, t0: float) -> dict[str, float]:
    ttfb = float("nan")
    samples = nbytes = 0
    gaps: list[float] = []
    last = t0
    ids: list[Any] = []
    for batch in loader:
        now = time.perf_counter()
        if samples == 0:
            ttfb = now - t0
        else:
            gaps.append(now - last)
        last = now
        ids.append(batch["id"].numpy().copy())
        samples += len(batch["id"])
        nbytes += int(batch["offsets"][-1])
    dt = time.perf_counter() - t0
    unique = len(np.unique(np.concatenate(ids))) if ids else 0
    return {
        "ttfb_s": ttfb,
        "seconds": dt,
        "samples": samples,
        "unique": unique,
        "bytes": nbytes,
        "mb_per_s": nbytes / dt / 1e6,
        "stalls": sum(g > STALL_S for g in gaps),
        "max_gap_s": max(gaps, default=0.0),
    }


def _s3_env() -> dict[str, str]:
    return {
        "endpoint": os.environ["S3_ENDPOINT_URL"],
        "key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
    }


def side_astream(spec: dict[str, Any]) -> dict[str, Any]:
    from astream import StreamingDataLoader, StreamingDataset

    def run() -> dict[str, float]:
        t0 = time.perf_counter()
        kw = {"format": "parquet"} if spec["side"] == "astream-parquet" else {}
        ds = StreamingDataset(
            remote=spec["remote"],
            local=spec["cache"],
            shuffle=True,
            shuffle_seed=spec["seed"],
            shuffle_algo=ORDER,
            batch_size=spec["batch"],
            **kw,
        )
        built = time.perf_counter() - t0  # listing + index (footers when cold): ttfb's share
        loader = StreamingDataLoader(
            ds, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=_pq_collate
        )
        return {**_epoch(loader, t0), "dataset_s": built}

    cold = run()
    hot = run()  # the same cache, now full
    return {**cold, **{f"hot_{k}": v for k, v in hot.items()}}


def _lit_allow_http(_worker: int = 0) -> None:
    """litdata's obstore fetcher refuses plain http unless told; a spawned DataLoader worker
    imports litdata afresh, so each worker is told again (``worker_init_fn``)."""
    import litdata.streaming.downloader as dl  # type: ignore[import-not-found]

    dl._OBSTORE_CLIENT_OPTIONS["allow_http"] = True


def side_lit(spec: dict[str, Any]) -> dict[str, Any]:
    import litdata  # type: ignore[import-not-found]  # the peers' venv only
    from litdata.streaming.item_loader import ParquetLoader  # type: ignore[import-not-found]

    _lit_allow_http()
    env = _s3_env()
    storage = {
        "endpoint_url": env["endpoint"],
        "aws_access_key_id": env["key"],
        "aws_secret_access_key": env["secret"],
        "region_name": "us-east-1",
    }
    if spec.get("index_only"):
        litdata.index_parquet_dataset(spec["remote"])  # a local copy (see the harness)
        return {}
    t0 = time.perf_counter()
    ds = litdata.StreamingDataset(
        spec["remote"],
        item_loader=ParquetLoader(),
        shuffle=True,
        seed=spec["seed"],
        cache_dir=spec["cache"],
        storage_options=storage,
    )
    # litdata refuses its ParquetLoader under fork (polars' thread pool): spawn, as it asks
    loader = litdata.StreamingDataLoader(
        ds,
        batch_size=spec["batch"],
        num_workers=spec["workers"],
        collate_fn=_pq_collate,
        multiprocessing_context="spawn" if spec["workers"] else None,
        worker_init_fn=_lit_allow_http,
    )
    return _epoch(loader, t0)


def side_hf(spec: dict[str, Any]) -> dict[str, Any]:
    import datasets  # type: ignore[import-not-found]  # the Hugging Face venv only
    import torch

    env = _s3_env()
    storage = {
        "key": env["key"],
        "secret": env["secret"],
        "client_kwargs": {"endpoint_url": env["endpoint"], "region_name": "us-east-1"},
    }
    t0 = time.perf_counter()
    ds = datasets.load_dataset(
        "parquet",
        data_files={"train": spec["remote"] + "/*.parquet"},
        split="train",
        streaming=True,
        storage_options=storage,
    )
    ds = ds.shuffle(seed=spec["seed"], buffer_size=1000)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=spec["batch"], num_workers=spec["workers"], collate_fn=_pq_collate
    )
    return _epoch(loader, t0)


def side_index(spec: dict[str, Any]) -> dict[str, Any]:
    from astream import StreamingDataset

    out: dict[str, Any] = {}
    for phase in ("cold", "warm"):
        t0 = time.perf_counter()
        ds = StreamingDataset(
            remote=spec["remote"], local=spec["cache"], format="parquet", batch_size=1
        )
        out[f"{phase}_s"] = time.perf_counter() - t0
        out["files"] = len({e.source.key for e in ds.catalog.entries})  # type: ignore[attr-defined]
        out["rows"] = len(ds)
    # the floor of a warm start: listing the prefix alone, with astream's store
    from astream import bridge
    from astream.storage import open_store

    async def listing() -> float:
        store = open_store(spec["remote"])
        t0 = time.perf_counter()
        try:
            async for _ in store.list(""):
                pass
            return time.perf_counter() - t0
        finally:
            await store.aclose()

    out["list_s"] = bridge.run(listing())
    return out


SIDES = {
    "astream-parquet": side_astream,
    "astream-mds": side_astream,
    "lit-parquet": side_lit,
    "hf-parquet": side_hf,
    "index": side_index,
}


def _side_main(spec: dict[str, Any]) -> None:
    import traceback

    try:
        result = {"status": "ok", **SIDES[spec["side"]](spec)}
    except Exception as e:  # reported, never hidden
        traceback.print_exc()
        result = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:500]}
    print("RESULT " + json.dumps(result), flush=True)


# -- the harness ------------------------------------------------------------------------------


def write_parquet(
    source: Any, kind: str, out: Path, group_bytes: int, page_index: bool = False
) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    n = len(source)
    avg = source.total_payload_bytes / n
    rows = max(8, int(group_bytes / avg))
    per_file = rows * GROUPS_PER_FILE
    for k, start in enumerate(range(0, n, per_file)):
        idx = range(start, min(n, start + per_file))
        if kind == "tokens":
            payload = pa.array([source.payload_of(i) for i in idx], pa.list_(pa.uint16()))
        else:
            payload = pa.array([source.payload_of(i) for i in idx], pa.binary())
        table = pa.table(
            {
                "id": pa.array(list(idx), pa.int64()),
                "label": pa.array([int(source.labels[i]) for i in idx], pa.int64()),
                "payload": payload,
            }
        )
        pq.write_table(
            table, out / f"part-{k:05d}.parquet", row_group_size=rows, write_page_index=page_index
        )
    size = sum(p.stat().st_size for p in out.glob("*.parquet"))
    files = len(list(out.glob("*.parquet")))
    return {"rows_per_group": rows, "files": files, "bytes": size, "page_index": page_index}


def write_mds(source: Any, kind: str, out: Path, shard: int) -> None:
    from astream import MDSWriter

    payload = "ndarray:uint16" if kind == "tokens" else "bytes"
    cols = {"id": "int", "label": "int", "payload": payload}
    with MDSWriter(out=str(out), columns=cols, size_limit=shard, exist_ok=True) as w:
        for i in range(len(source)):
            w.write(source[i])


def write_small_files(out: Path, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if out.exists() and len(list(out.glob("*.parquet"))) == n:
        return
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    for i in range(n):
        t = pa.table(
            {
                "id": pa.array(range(i * 4, i * 4 + 4), pa.int64()),
                "text": pa.array([f"row {j}" for j in range(4)]),
            }
        )
        pq.write_table(t, out / f"f-{i:05d}.parquet")


def _median(records: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in records if r.get("status") == "ok" and r.get(key) is not None]
    vals = [v for v in vals if v == v]  # no NaN
    return statistics.median(vals) if vals else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", type=float, default=0.05)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--bandwidth-mbps", type=float, default=0.0)
    ap.add_argument("--group-mb", type=float, default=0.0, help="row group target (0: scaled)")
    ap.add_argument("--page-index", action="store_true", help="write the Parquet page index")
    ap.add_argument("--index-files", type=int, default=10_000)
    ap.add_argument("--workloads", default="tokens,images")
    ap.add_argument("--sides", default="astream-parquet,astream-mds,lit-parquet,hf-parquet")
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "parquet-work")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "parquet-report")
    ap.add_argument("--peer-python", default="/work/peervenv/bin/python")
    ap.add_argument("--hf-python", default=str(ROOT / ".bench" / "hf-venv" / "bin" / "python"))
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        _side_main(json.loads(a.side))
        return 0

    from benchmarks.s3util import raw_get_all, upload_dir
    from benchmarks.servers import S3Emulator
    from benchmarks.workloads import WORKLOADS, Source, materialize, shard_bytes

    def log(msg: str) -> None:
        print(f"[pq {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    work = a.work.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    sides = [s for s in a.sides.split(",") if s]
    python = {
        "astream-parquet": sys.executable,
        "astream-mds": sys.executable,
        "index": sys.executable,
        "lit-parquet": a.peer_python,
        "hf-parquet": a.hf_python,
    }
    if "hf-parquet" in sides and not os.path.exists(a.hf_python):
        log(f"hf-parquet: no {a.hf_python}; skipped (reported n/a)")
        sides.remove("hf-parquet")
    group = int(a.group_mb * (1 << 20)) if a.group_mb else shard_bytes(a.scale)
    layout: dict[str, Any] = {
        "astream_shuffle_algo": ORDER,
        "scale": a.scale,
        "row_group_target_bytes": group,
        "latency_ms": a.latency_ms,
        "bandwidth_mbps": a.bandwidth_mbps,
        "page_index": a.page_index,
        "workers": a.workers,
        "batch": a.batch,
        "reps": a.reps,
        "workloads": {},
    }
    wls = [w for w in a.workloads.split(",") if w]
    for wl in wls:
        w = WORKLOADS[wl]
        src_dir = materialize(work / "src", w, a.scale, a.seed)
        source = Source(src_dir, w.payload_kind)
        pq_dir, mds_dir = work / "pq" / wl, work / "mds" / wl
        done = work / "pq" / f"{wl}.json"  # beside the table, not uploaded with it
        old = json.loads(done.read_text()) if done.exists() else {}
        if old.get("page_index", False) != a.page_index or old.get("group") != group:
            shutil.rmtree(pq_dir, ignore_errors=True)
            info = write_parquet(source, w.payload_kind, pq_dir, group, a.page_index)
            done.write_text(json.dumps({**info, "group": group}))
        if not (mds_dir / "index.json").exists():
            write_mds(source, w.payload_kind, mds_dir, group)
        info = json.loads(done.read_text())
        info["samples"] = len(source)
        info["payload_bytes"] = source.total_payload_bytes
        info["mds_bytes"] = sum(p.stat().st_size for p in mds_dir.iterdir())
        layout["workloads"][wl] = info
        log(f"{wl}: {info}")
    small = work / "small"
    if a.index_files:
        write_small_files(small, a.index_files)
    records: list[dict[str, Any]] = []
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        TOKENIZERS_PARALLELISM="false",
    )

    def run(side: str, spec: dict[str, Any]) -> dict[str, Any]:
        spec = {"side": side, "seed": a.seed, "batch": a.batch, "workers": a.workers, **spec}
        cmd = [python[side], "-m", "benchmarks.bench_parquet", "--side", json.dumps(spec)]
        r, stderr = side_result(cmd, env, a.timeout)
        if r["status"] != "ok" and stderr:  # the whole stderr kept beside the results
            errs = a.out / "errors"
            errs.mkdir(exist_ok=True)
            name = f"{side}-{spec.get('remote', '').rsplit('/', 1)[-1]}-{time.time():.0f}"
            (errs / f"{name}.txt").write_text(stderr)
            log(f"{side} failed: {stderr[-1500:]}")
        return r

    with S3Emulator() as s3:
        env.update(S3_ENDPOINT_URL=s3.endpoint, AWS_ENDPOINT_URL=s3.endpoint)
        for wl in wls:
            upload_dir(s3.direct, BUCKET, f"pq/{wl}", work / "pq" / wl)
            upload_dir(s3.direct, BUCKET, f"mds/{wl}", work / "mds" / wl)
            if "lit-parquet" in sides:  # a copy with litdata's own index.json (untimed)
                lit = work / "lit" / wl  # indexed locally: litdata's S3 indexer needs s3fs
                if not (lit / "index.json").exists():
                    shutil.rmtree(lit, ignore_errors=True)
                    shutil.copytree(work / "pq" / wl, lit)
                    r = run("lit-parquet", {"index_only": True, "remote": str(lit)})
                    log(f"lit index {wl}: {r}")
                upload_dir(s3.direct, BUCKET, f"lit/{wl}", lit)
        if a.index_files:
            t0 = time.perf_counter()
            upload_dir(s3.direct, BUCKET, "small", small)
            log(f"uploaded {a.index_files} small files in {time.perf_counter() - t0:.0f} s")
        s3.control("config", latency_ms=a.latency_ms, bandwidth_mbps=a.bandwidth_mbps)
        for rep in range(a.reps):
            for wl in wls:
                for side in sides:
                    prefix = {"astream-mds": "mds", "lit-parquet": "lit"}.get(side, "pq")
                    cache = work / "cache" / side
                    shutil.rmtree(cache, ignore_errors=True)
                    before = s3.control("stats")
                    r = run(side, {"remote": f"s3://{BUCKET}/{prefix}/{wl}", "cache": str(cache)})
                    after = s3.control("stats")
                    r["proxy_bytes"] = after["bytes_out"] - before["bytes_out"]
                    r["proxy_requests"] = after["requests"] - before["requests"]
                    records.append({"case": "epoch", "workload": wl, "side": side, "rep": rep, **r})
                    log(
                        f"{wl} {side} rep{rep}: "
                        + json.dumps(
                            {
                                k: r.get(k)
                                for k in (
                                    "status",
                                    "ttfb_s",
                                    "dataset_s",
                                    "mb_per_s",
                                    "hot_mb_per_s",
                                    "stalls",
                                    "unique",
                                    "reason",
                                )
                            }
                        )
                    )
            if a.index_files:
                cache = work / "cache" / "index"
                shutil.rmtree(cache, ignore_errors=True)
                r = run("index", {"remote": f"s3://{BUCKET}/small", "cache": str(cache)})
                records.append({"case": "index", "rep": rep, **r})
                log(f"index rep{rep}: {r}")
                # the emulator's own ceiling: the SDK alone GETs every (whole) small object
                raw = raw_get_all(s3.endpoint, BUCKET, "small", concurrency=64)
                records.append({"case": "index-raw-sdk", "rep": rep, "status": "ok", **raw})
                log(f"raw SDK GET of the {a.index_files} objects rep{rep}: {raw}")
    (a.out / "results.json").write_text(
        json.dumps({"layout": layout, "records": records}, indent=1) + "\n"
    )
    summary: dict[str, Any] = {"layout": layout, "epoch": {}, "index": {}}
    for wl in wls:
        row: dict[str, Any] = {}
        for side in sides:
            rs = [
                r
                for r in records
                if r["case"] == "epoch" and r["workload"] == wl and r["side"] == side
            ]
            row[side] = {
                k: _median(rs, k)
                for k in (
                    "ttfb_s",
                    "mb_per_s",
                    "hot_mb_per_s",
                    "hot_ttfb_s",
                    "dataset_s",
                    "hot_dataset_s",
                    "proxy_bytes",
                    "max_gap_s",
                )
            }
            row[side]["stalls_total"] = sum(r.get("stalls", 0) for r in rs)
            row[side]["errors"] = [r.get("reason") for r in rs if r.get("status") != "ok"]
            row[side]["unique"] = sorted({int(r["unique"]) for r in rs if r.get("status") == "ok"})
        ours = row.get("astream-parquet", {}).get("mb_per_s")
        for side in sides:
            theirs = row[side].get("mb_per_s")
            if ours and theirs and side != "astream-parquet":
                row[f"cold_ratio_vs_{side}"] = ours / theirs
        mds_hot = row.get("astream-mds", {}).get("hot_mb_per_s")
        pq_hot = row.get("astream-parquet", {}).get("hot_mb_per_s")
        if mds_hot and pq_hot:
            row["hot_ratio_parquet_vs_mds"] = pq_hot / mds_hot
        summary["epoch"][wl] = row
    ix = [r for r in records if r["case"] == "index"]
    raw_ix = [r for r in records if r["case"] == "index-raw-sdk"]
    summary["index"] = {
        "files": a.index_files,
        "cold_s": _median(ix, "cold_s"),
        "warm_s": _median(ix, "warm_s"),
        "list_only_s": _median(ix, "list_s"),
        "raw_sdk_get_all_s": _median(raw_ix, "seconds"),
        "errors": [r.get("reason") for r in ix if r.get("status") != "ok"],
    }
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
