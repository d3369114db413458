"""The footer-only Parquet index at N files: astream's cold and warm construction against the
emulator-bound floor (the SDK alone doing the same requests), on moto and on a local directory.

    python -m benchmarks.bench_parquet_index [--files 1000,10000] [--reps 3] \
        [--latency-ms 20] [--out DIR] [--base DIR]

Per rep and per N, interleaved, each in a fresh process:

- ``astream-s3``: ``StreamingDataset(remote="s3://.../small-N", format="parquet")`` with an
  empty cache (``cold_s``: list + one tail GET per file), then again over that cache
  (``warm_s``: the listing only -- on S3 the key ranges cut at the cached keys, concurrently).
  ``cold_list_s``/``warm_list_s``: the listing's wall time inside them (astream's
  ``_list_all``, timed by wrapping it); ``warm_own_s``: the rest of the warm start, astream's
  own work.
- ``astream-s3-pub``: ``index_source="published"`` over a copy of the files with an index
  published next to them (``astream index``, before the reps): ``cold_s`` (an empty cache:
  one HEAD and one GET of the published index, its validating parse), ``warm_s`` (one HEAD).
- ``astream-local``: the same as ``astream-s3`` over the local directory (its own cache).
- with ``--base DIR`` (a source tree of another commit, e.g. ``git archive``): ``base-s3`` and
  ``base-local``, the ``astream-s3``/``astream-local`` sides (this file's side code) run with
  that tree's ``astream`` package, in the same reps -- a before/after measured interleaved
  (each record names the ``astream`` it imported: ``astream_from``).
- ``floor-s3``: aiobotocore alone: the serial listing (``list_serial_s``), the same key
  ranges listed concurrently with ``StartAfter`` (``list_split_s``), and a ranged GET of every
  object's last 64 KiB at concurrency 64 (``get_tails_s``). The cold floor is
  ``list_serial_s + get_tails_s``, the warm floor ``list_split_s``; astream's own overhead is
  what it takes above them.

Each record also has the requests the proxy saw and the most it served at once
(``proxy_peak_in_flight``: the cold start's concurrency, against the floor's 64).

The objects are ``N`` one-row-group Parquet files (4 rows, ~1 KiB each), through the harness's
shaping proxy at ``--latency-ms`` per request (as ``bench_parquet``'s index case).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.sides import side_result

ROOT = Path(__file__).resolve().parent.parent
BUCKET = "bench-pqix"
TAIL = 64 << 10
PAGE = 1000  # S3 list page (astream's default list_page_size)


def side_astream(spec: dict[str, Any]) -> dict[str, Any]:
    t0 = time.perf_counter()
    import astream
    from astream import StreamingDataset
    from astream.runtime import parquet_index

    out: dict[str, Any] = {"import_s": time.perf_counter() - t0, "astream_from": astream.__file__}
    # the listing's own wall time (astream's _list_all, in this tree and older ones), so that
    # a start splits into the listing and astream's own work around it
    listed = [0.0]
    real_list = parquet_index._list_all

    async def timed_list(*args: Any, **kw: Any) -> Any:
        t = time.perf_counter()
        try:
            return await real_list(*args, **kw)
        finally:
            listed[0] += time.perf_counter() - t

    parquet_index._list_all = timed_list  # type: ignore[assignment]
    for phase in ("cold", "warm"):
        listed[0] = 0.0
        t0 = time.perf_counter()
        kw = {"index_source": spec["index_source"]} if spec.get("index_source") else {}
        ds = StreamingDataset(
            remote=spec["remote"], local=spec["cache"], format="parquet", batch_size=1, **kw
        )
        out[f"{phase}_s"] = time.perf_counter() - t0
        out[f"{phase}_list_s"] = listed[0]
        out[f"{phase}_own_s"] = out[f"{phase}_s"] - listed[0]
        out["rows"] = len(ds)
    return out


async def _floor(endpoint: str, prefix: str) -> dict[str, Any]:
    from benchmarks.s3util import _client

    out: dict[str, Any] = {}
    async with _client(endpoint, pool=64) as s3:
        t0 = time.perf_counter()
        objs: list[tuple[str, int]] = []
        kw: dict[str, Any] = {"Bucket": BUCKET, "Prefix": prefix + "/", "MaxKeys": PAGE}
        while True:
            r = await s3.list_objects_v2(**kw)
            objs += [(o["Key"], int(o["Size"])) for o in r.get("Contents", [])]
            if not r.get("IsTruncated"):
                break
            kw["ContinuationToken"] = r["NextContinuationToken"]
        out["list_serial_s"] = time.perf_counter() - t0
        keys = [k for k, _ in objs]
        width = PAGE - 2
        uptos: list[str | None] = list(keys[width - 1 :: width])
        afters: list[str | None] = [None, *uptos]
        uptos.append(None)
        sem = asyncio.Semaphore(16)

        async def rng(after: str | None, upto: str | None) -> int:
            async with sem:
                kw = {"Bucket": BUCKET, "Prefix": prefix + "/", "MaxKeys": PAGE}
                if after is not None:
                    kw["StartAfter"] = after
                n = 0
                while True:
                    r = await s3.list_objects_v2(**kw)
                    for o in r.get("Contents", []):
                        if upto is not None and o["Key"] > upto:
                            return n
                        n += 1
                    if not r.get("IsTruncated"):
                        return n
                    kw["ContinuationToken"] = r["NextContinuationToken"]

        t0 = time.perf_counter()
        seen = sum(await asyncio.gather(*(rng(a, u) for a, u in zip(afters, uptos))))
        out["list_split_s"] = time.perf_counter() - t0
        assert seen == len(keys), (seen, len(keys))
        gsem = asyncio.Semaphore(64)

        async def tail(key: str, size: int) -> int:
            async with gsem:
                start = max(0, size - TAIL)
                resp = await s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-")
                async with resp["Body"] as body:
                    return len(await body.read())

        t0 = time.perf_counter()
        await asyncio.gather(*(tail(k, s) for k, s in objs))
        out["get_tails_s"] = time.perf_counter() - t0
        out["objects"] = len(objs)
    return out


def side_floor(spec: dict[str, Any]) -> dict[str, Any]:
    return asyncio.run(_floor(spec["endpoint"], spec["prefix"]))


SIDES = {
    "astream-s3": side_astream,
    "astream-s3-pub": side_astream,
    "astream-local": side_astream,
    "floor-s3": side_floor,
}
BASE_SIDES = {"base-s3": "astream-s3", "base-local": "astream-local"}


def _median(rs: list[dict[str, Any]], key: str) -> float | None:
    v = [r[key] for r in rs if r.get("status") == "ok" and r.get(key) is not None]
    return statistics.median(v) if v else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="1000,10000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "parquet-work")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "parquet-index-report")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--base", type=Path, help="another commit's source tree: base-* sides")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        spec = json.loads(a.side)
        try:
            r = {"status": "ok", **SIDES[spec["side"]](spec)}
        except Exception as e:  # reported, never hidden
            import traceback

            traceback.print_exc()
            r = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:500]}
        print("RESULT " + json.dumps(r), flush=True)
        return 0

    from benchmarks.bench_parquet import write_small_files
    from benchmarks.s3util import upload_dir
    from benchmarks.servers import S3Emulator

    def log(msg: str) -> None:
        print(f"[pqix {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    counts = [int(x) for x in a.files.split(",") if x]
    work = a.work.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    for n in counts:
        write_small_files(work / f"small-{n}", n)
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
    )

    def run(side: str, spec: dict[str, Any]) -> dict[str, Any]:
        if side in BASE_SIDES:  # that tree's astream, this file's side code (-P: no cwd)
            launch = (
                f"import sys; sys.path.insert(0, {str(a.base.resolve())!r}); import astream; "
                f"sys.path.insert(0, {str(ROOT)!r}); "
                "from benchmarks.bench_parquet_index import main; raise SystemExit(main())"
            )
            cmd = [sys.executable, "-P", "-c", launch, "--side"]
            cmd.append(json.dumps({"side": BASE_SIDES[side], **spec}))
            r, stderr = side_result(cmd, {**env, "PYTHONPATH": ""}, a.timeout)
        else:
            cmd = [sys.executable, "-m", "benchmarks.bench_parquet_index", "--side"]
            cmd.append(json.dumps({"side": side, **spec}))
            r, stderr = side_result(cmd, env, a.timeout)
        if r["status"] != "ok" and stderr:
            log(f"{side} failed: {stderr[-1500:]}")
        return r

    records: list[dict[str, Any]] = []
    with S3Emulator() as s3:
        env.update(S3_ENDPOINT_URL=s3.endpoint, AWS_ENDPOINT_URL=s3.endpoint)
        for n in counts:
            for prefix in (f"small-{n}", f"small-{n}-pub"):
                t0 = time.perf_counter()
                upload_dir(s3.direct, BUCKET, prefix, work / f"small-{n}")
                log(f"uploaded {n} files to {prefix} in {time.perf_counter() - t0:.0f} s")
            t0 = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "astream", "index", f"s3://{BUCKET}/small-{n}-pub"],
                cwd=ROOT, env={**env, "S3_ENDPOINT_URL": s3.direct}, check=True,
                capture_output=True,
            )  # fmt: skip
            log(f"published small-{n}-pub's index in {time.perf_counter() - t0:.0f} s")
        s3.control("config", latency_ms=a.latency_ms, bandwidth_mbps=0)
        sides = ["astream-s3", "floor-s3", "astream-s3-pub", "astream-local"]
        if a.base is not None:
            sides = ["base-s3", *sides, "base-local"]
        for rep in range(a.reps):
            for n in counts:
                for side in sides:
                    cache = work / "cache" / f"pqix-{side}"
                    shutil.rmtree(cache, ignore_errors=True)
                    if side in ("astream-s3", "base-s3"):
                        spec = {"remote": f"s3://{BUCKET}/small-{n}", "cache": str(cache)}
                    elif side == "astream-s3-pub":
                        spec = {"remote": f"s3://{BUCKET}/small-{n}-pub", "cache": str(cache),
                                "index_source": "published"}  # fmt: skip
                    elif side in ("astream-local", "base-local"):
                        spec = {"remote": str(work / f"small-{n}"), "cache": str(cache)}
                    else:
                        spec = {"endpoint": s3.endpoint, "prefix": f"small-{n}"}
                    s3.control("reset")
                    r = run(side, spec)
                    after = s3.control("stats")
                    r["proxy_requests"] = after["requests"]
                    r["proxy_peak_in_flight"] = after.get("peak_in_flight")
                    records.append({"files": n, "side": side, "rep": rep, **r})
                    log(f"{n} {side} rep{rep}: {r}")
    (a.out / "results.json").write_text(
        json.dumps({"latency_ms": a.latency_ms, "records": records}, indent=1) + "\n"
    )
    summary: dict[str, Any] = {"latency_ms": a.latency_ms, "reps": a.reps, "files": {}}
    for n in counts:
        row: dict[str, Any] = {}
        for side in sides:
            rs = [r for r in records if r["files"] == n and r["side"] == side]
            keys = ("cold_s", "warm_s", "cold_list_s", "warm_list_s", "warm_own_s",
                    "list_serial_s", "list_split_s", "get_tails_s")  # fmt: skip
            row[side] = {k: _median(rs, k) for k in keys if _median(rs, k) is not None}
            row[side]["errors"] = [r.get("reason") for r in rs if r.get("status") != "ok"]
        fl = row["floor-s3"]
        ours = row["astream-s3"]
        if fl.get("list_serial_s") and fl.get("get_tails_s") and ours.get("cold_s"):
            floor = fl["list_serial_s"] + fl["get_tails_s"]
            row["cold_floor_s"] = floor
            row["cold_overhead_s"] = ours["cold_s"] - floor
        if fl.get("list_split_s") and ours.get("warm_s"):
            row["warm_floor_s"] = fl["list_split_s"]
            row["warm_overhead_s"] = ours["warm_s"] - fl["list_split_s"]
        base = row.get("base-s3", {})
        for k in ("cold_s", "warm_s"):
            if base.get(k) and ours.get(k):
                row[f"base_over_new_s3_{k}"] = base[k] / ours[k]
            lb, lo = row.get("base-local", {}).get(k), row["astream-local"].get(k)
            if lb and lo:
                row[f"base_over_new_local_{k}"] = lb / lo
        summary["files"][str(n)] = row
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
