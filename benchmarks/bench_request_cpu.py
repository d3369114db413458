"""CPU per request of astream's store paths against the bare SDK, per store (S3, GCS, Azure).

    python -m benchmarks.bench_request_cpu [--stores s3,gcs,azure] [--objects 1000] [--reps 3]

The footer index's cold start is one listing plus one tail GET per file, 64 in flight; on a
machine whose cores the client shares with the emulator (and a proxy), the client's CPU per
request bounds the rate. This measures that CPU alone: the emulator is reached directly (no
proxy, no added latency) and each case runs in a fresh process, which reports its own process
CPU time (``time.process_time``: user + system, this process only) and wall time for:

- ``sdk-get``: the store's SDK alone GETting each object's last 64 KiB (aiobotocore
  ``get_object``, gcloud-aio-storage ``download``, azure-storage-blob ``download_blob``), 64 in
  flight;
- ``astream-get``: astream's ``ObjectStore.get_range`` of the same bytes (retry layer, deadline,
  error mapping included);
- ``astream-footer``: astream's footer read of each object (that GET plus the footer's parse
  into a ``ParquetFile``) -- what a cold index start does per file;
- ``astream-get-sdk`` (S3 and Azure): ``astream-get`` with reads through the SDK
  (aiobotocore ``get_object`` with ``direct=False``; azure-storage-blob's ``download_blob``), as
  astream read before its direct GETs and still reads where only the SDK can sign;
- ``sdk-list`` / ``astream-list``: listing the N objects (pages of 1,000).

Modules are imported before the clock starts.

Per case: ``cpu_ms_per_req`` (CPU / requests), ``wall_s``. Rows of a store are interleaved per
rep. Objects: ``N`` one-row-group Parquet files of ~1 KiB (``bench_parquet.write_small_files``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_parquet_index import BUCKET, TAIL, Rig
from benchmarks.sides import side_result

ROOT = Path(__file__).resolve().parent.parent
CONC = 64
CASES = ("sdk-get", "astream-get", "astream-get-sdk", "astream-footer", "sdk-list", "astream-list")


async def _sdk(store: str, spec: dict[str, Any], what: str) -> int:
    """The SDK alone: list the prefix, or GET each object's tail; the number of requests."""
    prefix = spec["prefix"] + "/"
    sem = asyncio.Semaphore(CONC)
    if store == "s3":
        from benchmarks.s3util import _client

        async with _client(spec["endpoint"], pool=CONC) as s3:
            objs: list[tuple[str, int]] = []
            kw: dict[str, Any] = {"Bucket": BUCKET, "Prefix": prefix, "MaxKeys": 1000}
            pages = 0
            while True:
                r = await s3.list_objects_v2(**kw)
                pages += 1
                objs += [(o["Key"], int(o["Size"])) for o in r.get("Contents", [])]
                if not r.get("IsTruncated"):
                    break
                kw["ContinuationToken"] = r["NextContinuationToken"]
            if what == "list":
                return pages
            spec["t0"] = (time.process_time(), time.perf_counter())  # GETs only

            async def one(k: str, size: int) -> None:
                async with sem:
                    rng = f"bytes={max(0, size - TAIL)}-{size - 1}"
                    resp = await s3.get_object(Bucket=BUCKET, Key=k, Range=rng)
                    async with resp["Body"] as body:
                        await body.read()

            await asyncio.gather(*(one(k, s) for k, s in objs))
            return len(objs)
    if store == "gcs":
        import aiohttp
        from gcloud.aio.storage import Storage

        conn = aiohttp.TCPConnector(limit=CONC, limit_per_host=CONC)
        async with aiohttp.ClientSession(connector=conn) as session:
            st = Storage(session=session, api_root=spec["endpoint"])  # type: ignore[arg-type]
            objs = []
            params = {"prefix": prefix, "maxResults": "1000"}
            pages = 0
            while True:
                r = await st.list_objects(BUCKET, params=params)
                pages += 1
                objs += [(o["name"], int(o["size"])) for o in r.get("items", [])]
                if not r.get("nextPageToken"):
                    break
                params["pageToken"] = r["nextPageToken"]
            if what == "list":
                return pages
            spec["t0"] = (time.process_time(), time.perf_counter())

            async def one_g(k: str, size: int) -> None:
                async with sem:
                    rng = f"bytes={max(0, size - TAIL)}-{size - 1}"
                    await st.download(BUCKET, k, headers={"Range": rng})

            await asyncio.gather(*(one_g(k, s) for k, s in objs))
            return len(objs)
    from azure.storage.blob.aio import ContainerClient

    async with ContainerClient.from_connection_string(spec["conn"], BUCKET) as cc:
        objs = []
        pages = 0
        async for page in cc.list_blobs(name_starts_with=prefix, results_per_page=1000).by_page():
            pages += 1
            objs += [(b.name, int(b.size)) async for b in page]
        if what == "list":
            return pages
        spec["t0"] = (time.process_time(), time.perf_counter())

        async def one_a(k: str, size: int) -> None:
            async with sem:
                start = max(0, size - TAIL)
                dl = await cc.get_blob_client(k).download_blob(
                    offset=start, length=size - start, max_concurrency=1
                )
                await dl.readall()

        await asyncio.gather(*(one_a(k, s) for k, s in objs))
        return len(objs)


async def _astream(spec: dict[str, Any], what: str) -> int:
    from astream.parquet import arrow, io_footers
    from astream.storage import open_store

    store = open_store(spec["url"], **spec.get("options", {}))
    try:
        infos = [o async for o in store.list("")]
        if what == "list":
            return -(-len(infos) // 1000)
        if what == "footer":
            arrow.pyarrow_parquet()  # imported before the clock starts, as on a cold start
        spec["t0"] = (time.process_time(), time.perf_counter())
        sem = asyncio.Semaphore(CONC)

        async def one(o: Any) -> None:
            async with sem:
                if what == "footer":
                    await io_footers.read_footer(store, o)
                else:
                    await store.get_range(o.key, max(0, o.size - TAIL), o.size)

        await asyncio.gather(*(one(o) for o in infos))
        return len(infos)
    finally:
        await store.aclose()


def side(spec: dict[str, Any]) -> dict[str, Any]:
    case, store = spec["case"], spec["store"]
    # imports before the clock: only the requests' own CPU is measured
    import importlib

    for mod in {"s3": ("aiobotocore.session",), "gcs": ("gcloud.aio.storage",),
                "azure": ("azure.storage.blob.aio",)}[store]:  # fmt: skip
        importlib.import_module(mod)
    if case.startswith("astream-"):
        importlib.import_module(f"astream.storage.{store}")
        importlib.import_module("astream.parquet.io_index")
    if case == "astream-get-sdk" and store == "azure":  # reads through the SDK
        from astream.storage.azure import _Direct

        _Direct.of = classmethod(lambda cls, client: None)  # type: ignore[method-assign,assignment]
        case = "astream-get"
    elif case == "astream-get-sdk":  # S3: every request through aiobotocore
        importlib.import_module("astream.storage.s3sdk")
        spec["options"] = {"direct": False}
        case = "astream-get"
    t0 = (time.process_time(), time.perf_counter())
    spec["t0"] = t0  # a GET case moves it past its listing
    if case.startswith("sdk-"):
        n = asyncio.run(_sdk(store, spec, case[4:]))
    else:
        n = asyncio.run(_astream(spec, case[len("astream-") :]))
    c0, w0 = spec["t0"]
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return {"requests": n, "cpu_s": cpu, "wall_s": wall, "cpu_ms_per_req": 1e3 * cpu / n}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stores", default="s3,gcs,azure")
    ap.add_argument("--objects", type=int, default=1000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "parquet-work")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "request-cpu-report")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        spec = json.loads(a.side)
        os.environ.update(spec.get("env", {}))
        try:
            r = {"status": "ok", **side(spec)}
        except Exception as e:  # reported, never hidden
            import traceback

            traceback.print_exc()
            r = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:500]}
        print("RESULT " + json.dumps(r), flush=True)
        return 0
    from benchmarks.bench_parquet import write_small_files

    n = a.objects
    local = a.work.resolve() / f"small-{n}"
    write_small_files(local, n)
    a.out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT), AWS_ACCESS_KEY_ID="bench",
               AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1")  # fmt: skip
    cases = [c for c in a.cases.split(",") if c]
    records: list[dict[str, Any]] = []
    for st in [s for s in a.stores.split(",") if s]:
        with Rig(st) as rig:
            rig.upload(f"small-{n}", local)
            # straight to the emulator: the proxy's latency and CPU are not what is measured
            direct = rig.env(direct=True)
            spec0: dict[str, Any] = {"store": st, "prefix": f"small-{n}", "env": direct}
            spec0.update(url=rig.url(f"small-{n}"), endpoint=rig.direct)
            if st == "azure":
                spec0["conn"] = direct["AZURE_STORAGE_CONNECTION_STRING"]
            for rep in range(a.reps):
                for case in cases:
                    if case == "astream-get-sdk" and st == "gcs":
                        continue
                    cmd = [sys.executable, "-m", "benchmarks.bench_request_cpu", "--side"]
                    cmd.append(json.dumps({**spec0, "case": case}))
                    r, err = side_result(cmd, env, 600)
                    if r["status"] != "ok":
                        print(err[-1500:], file=sys.stderr)
                    records.append({"store": st, "case": case, "rep": rep, **r})
                    print(f"[cpu {time.strftime('%H:%M:%S')}] {st} {case} rep{rep}: {r}",
                          flush=True)  # fmt: skip
    summary: dict[str, Any] = {"objects": n, "reps": a.reps, "stores": {}}
    for st in sorted({r["store"] for r in records}):
        row: dict[str, Any] = {}
        for case in cases:
            rs = [
                r for r in records if r["store"] == st and r["case"] == case and r["status"] == "ok"
            ]
            if rs:
                row[case] = {k: statistics.median(r[k] for r in rs)
                             for k in ("cpu_ms_per_req", "wall_s")}  # fmt: skip
        if "astream-get-sdk" in row and "astream-get" in row:
            row["get_cpu_direct_over_sdk_path"] = (
                row["astream-get"]["cpu_ms_per_req"] / row["astream-get-sdk"]["cpu_ms_per_req"]
            )
        if "sdk-get" in row and "astream-get" in row:
            row["get_cpu_ratio"] = (
                row["astream-get"]["cpu_ms_per_req"] / row["sdk-get"]["cpu_ms_per_req"]
            )
        summary["stores"][st] = row
    (a.out / "results.json").write_text(json.dumps(records, indent=1) + "\n")
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
