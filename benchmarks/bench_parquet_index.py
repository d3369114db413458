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

``--stores`` picks the servers: ``s3`` (moto), ``gcs`` (fake-gcs-server), ``azure`` (Azurite),
each behind its own proxy, and ``s3fast``: :mod:`benchmarks.fast_s3`, an in-memory stand-in for
S3's read path that answers after ``--latency-ms`` itself (no proxy, keep-alive), so that the
emulators' ceiling (moto: ~150-300 requests/s here) is not what is measured; its floor is the
same aiobotocore one as ``s3``'s. On a cold start over S3 or GCS the footers are read while the
listing runs, so ``cold_list_s`` is 0 there (astream's ``_list_all`` is not called).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
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

    try:
        from astream.parquet import io_index as parquet_index
    except ImportError:  # an older tree (--base): the index module's former place
        from astream.runtime import parquet_index  # type: ignore[no-redef]

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


async def _floor_gcs(endpoint: str, prefix: str) -> dict[str, Any]:
    """gcloud-aio-storage alone against the GCS emulator: the serial listing, the same key
    ranges listed concurrently (``startOffset``/``endOffset``), a suffix-range GET per object."""
    import aiohttp
    from gcloud.aio.storage import Storage

    out: dict[str, Any] = {}
    conn = aiohttp.TCPConnector(limit=64, limit_per_host=64)
    async with aiohttp.ClientSession(connector=conn) as session:
        st = Storage(session=session, api_root=endpoint)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        objs: list[tuple[str, int]] = []
        params = {"prefix": prefix + "/", "maxResults": str(PAGE)}
        while True:
            r = await st.list_objects(BUCKET, params=params)
            objs += [(o["name"], int(o["size"])) for o in r.get("items", [])]
            if not r.get("nextPageToken"):
                break
            params["pageToken"] = r["nextPageToken"]
        out["list_serial_s"] = time.perf_counter() - t0
        keys = sorted(k for k, _ in objs)
        bounds: list[str | None] = [None, *keys[PAGE - 2 :: PAGE - 2], None]
        sem = asyncio.Semaphore(16)

        async def rng(lo: str | None, hi: str | None) -> int:
            async with sem:
                p = {"prefix": prefix + "/", "maxResults": str(PAGE)}
                if lo is not None:
                    p["startOffset"] = lo  # inclusive
                if hi is not None:
                    p["endOffset"] = hi  # exclusive
                n = 0
                while True:
                    r = await st.list_objects(BUCKET, params=p)
                    n += len(r.get("items", []))
                    if not r.get("nextPageToken"):
                        return n
                    p["pageToken"] = r["nextPageToken"]

        t0 = time.perf_counter()
        seen = sum(await asyncio.gather(*(rng(a, b) for a, b in itertools.pairwise(bounds))))
        out["list_split_s"] = time.perf_counter() - t0
        assert seen == len(keys), (seen, len(keys))
        gsem = asyncio.Semaphore(64)

        async def tail(key: str) -> int:
            async with gsem:
                data = await st.download(BUCKET, key, headers={"Range": f"bytes=-{TAIL}"})
                return len(data)

        t0 = time.perf_counter()
        await asyncio.gather(*(tail(k) for k, _ in objs))
        out["get_tails_s"] = time.perf_counter() - t0
        out["objects"] = len(objs)
    return out


async def _floor_azure(conn_str: str, prefix: str) -> dict[str, Any]:
    """azure-storage-blob alone against Azurite: the serial listing (Azure cannot start a
    listing at a key, so there is no split listing) and a ranged GET of every object's tail."""
    from azure.storage.blob.aio import ContainerClient

    out: dict[str, Any] = {}
    async with ContainerClient.from_connection_string(conn_str, BUCKET) as cc:
        t0 = time.perf_counter()
        objs: list[tuple[str, int]] = []
        pages = cc.list_blobs(name_starts_with=prefix + "/", results_per_page=PAGE).by_page()
        async for page in pages:
            objs += [(b.name, int(b.size)) async for b in page]
        out["list_serial_s"] = time.perf_counter() - t0
        gsem = asyncio.Semaphore(64)

        async def tail(key: str, size: int) -> int:
            async with gsem:
                start = max(0, size - TAIL)
                dl = await cc.get_blob_client(key).download_blob(
                    offset=start, length=size - start, max_concurrency=1
                )
                return len(await dl.readall())

        t0 = time.perf_counter()
        await asyncio.gather(*(tail(k, s) for k, s in objs))
        out["get_tails_s"] = time.perf_counter() - t0
        out["objects"] = len(objs)
    return out


def side_floor(spec: dict[str, Any]) -> dict[str, Any]:
    store = spec.get("store", "s3")
    if store == "gcs":
        return asyncio.run(_floor_gcs(spec["endpoint"], spec["prefix"]))
    if store == "azure":
        return asyncio.run(_floor_azure(spec["conn"], spec["prefix"]))
    return asyncio.run(_floor(spec["endpoint"], spec["prefix"]))


# s3fast: benchmarks/fast_s3.py, an in-memory stand-in for S3's read path that keeps up (no
# emulator ceiling), answering after --latency-ms itself (no proxy in front)
STORES = ("s3", "gcs", "azure", "s3fast")
SIDES = {"astream-local": side_astream}
for _st in STORES:
    SIDES.update({f"astream-{_st}": side_astream, f"astream-{_st}-pub": side_astream})
    SIDES[f"floor-{_st}"] = side_floor
BASE_SIDES = {"base-local": "astream-local", **{f"base-{s}": f"astream-{s}" for s in STORES}}


def _median(rs: list[dict[str, Any]], key: str) -> float | None:
    v = [r[key] for r in rs if r.get("status") == "ok" and r.get(key) is not None]
    return statistics.median(v) if v else None


def _control(endpoint: str, what: str, **query: float) -> dict[str, Any]:
    """The shaping proxy's control endpoint (``benchmarks.proxy``): stats, reset, config."""
    import urllib.request

    qs = "&".join(f"{k}={v}" for k, v in query.items())
    url = f"{endpoint}/__bench__/{what}" + (f"?{qs}" if qs else "")
    req = urllib.request.Request(url, method="GET" if what == "stats" else "POST")
    with urllib.request.urlopen(req) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


class Rig:
    """One store's emulator behind its own shaping proxy: ``endpoint`` (through the proxy),
    ``direct`` (the emulator), the environment that points astream and the SDK at each, and
    how to upload a directory and publish an index there."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.direct = self.endpoint = ""
        self._stack: list[Any] = []

    def __enter__(self) -> Rig:
        from benchmarks.servers import S3Emulator, _spawn

        if self.store == "s3fast":
            fast, port = _spawn(["-m", "benchmarks.fast_s3", "--exit-with-parent"])
            self._stack.append(fast)
            self.direct = self.endpoint = f"http://127.0.0.1:{port}"
            return self
        if self.store == "s3":
            s3 = S3Emulator().__enter__()
            self._stack.append(s3)
            self.direct, self.endpoint = s3.direct, s3.endpoint
            return self
        from astream.testing.servers import AzuriteServer, FakeGcsServer

        srv = (FakeGcsServer() if self.store == "gcs" else AzuriteServer()).start(timeout=120)
        self._stack.append(srv)
        self.server = srv
        self.direct = srv.url
        proxy, port = _spawn(
            ["-m", "benchmarks.proxy", "--upstream", self.direct, "--exit-with-parent"]
        )
        self._stack.append(proxy)
        self.endpoint = f"http://127.0.0.1:{port}"
        srv.create_bucket(BUCKET)
        return self

    def __exit__(self, *exc: object) -> None:
        for thing in reversed(self._stack):
            if isinstance(thing, subprocess.Popen):
                thing.terminate()
                try:
                    thing.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    thing.kill()
            elif hasattr(thing, "stop"):
                thing.stop()
            else:
                thing.__exit__(None, None, None)

    def url(self, prefix: str) -> str:
        scheme = {"s3": "s3", "s3fast": "s3", "gcs": "gs", "azure": "az"}[self.store]
        return f"{scheme}://{BUCKET}/{prefix}"

    def env(self, direct: bool = False) -> dict[str, str]:
        """The variables that point astream (and the SDKs) at the proxy, or at the emulator."""
        at = self.direct if direct else self.endpoint
        if self.store in ("s3", "s3fast"):
            return {"S3_ENDPOINT_URL": at, "AWS_ENDPOINT_URL": at}
        if self.store == "gcs":
            return {"STORAGE_EMULATOR_HOST": at}
        from astream.testing.servers import AZURITE_ACCOUNT

        conn = self.server.connection_string(f"{at}/{AZURITE_ACCOUNT}")
        return {"AZURE_STORAGE_CONNECTION_STRING": conn}

    def floor_spec(self, prefix: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"store": self.store, "prefix": prefix, "endpoint": self.endpoint}
        if self.store == "azure":
            spec["conn"] = self.env()["AZURE_STORAGE_CONNECTION_STRING"]
        return spec

    def upload(self, prefix: str, local: Path) -> None:
        if self.store in ("s3", "s3fast"):
            from benchmarks.s3util import upload_dir

            upload_dir(self.direct, BUCKET, prefix, local)
            return
        from astream.storage import open_store

        opts: dict[str, Any] = (
            {"api_root": self.direct}
            if self.store == "gcs"
            else {"connection_string": self.env(direct=True)["AZURE_STORAGE_CONNECTION_STRING"]}
        )
        files = sorted(p for p in local.iterdir() if p.is_file())

        async def go() -> None:
            store = open_store(self.url(prefix), **opts)
            sem = asyncio.Semaphore(32)

            async def one(p: Path) -> None:
                async with sem:
                    await store.put(p.name, p.read_bytes())

            try:
                await asyncio.gather(*(one(p) for p in files))
            finally:
                await store.aclose()

        asyncio.run(go())

    def control(self, what: str, **query: float) -> dict[str, Any]:
        return _control(self.endpoint, what, **query)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", default="1000,10000")
    ap.add_argument("--stores", default="s3", help="comma list of s3, gcs, azure, s3fast")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--work", type=Path, default=ROOT / ".bench" / "parquet-work")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench" / "parquet-index-report")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--base", type=Path, help="another commit's source tree: base-* sides")
    ap.add_argument("--no-local", action="store_true", help="skip the astream-local side")
    ap.add_argument("--side", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        spec = json.loads(a.side)
        for k, v in spec.get("env", {}).items():
            os.environ[k] = v
        try:
            r = {"status": "ok", **SIDES[spec["side"]](spec)}
        except Exception as e:  # reported, never hidden
            import traceback

            traceback.print_exc()
            r = {"status": "error", "reason": f"{type(e).__name__}: {e}"[:500]}
        print("RESULT " + json.dumps(r), flush=True)
        return 0

    from benchmarks.bench_parquet import write_small_files

    def log(msg: str) -> None:
        print(f"[pqix {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    stores = [s for s in a.stores.split(",") if s]
    bad = [s for s in stores if s not in STORES]
    if bad:
        ap.error(f"--stores: unknown {bad} (known: {', '.join(STORES)})")
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
    all_sides: list[str] = []
    with contextlib.ExitStack() as stack:
        rigs = {s: stack.enter_context(Rig(s)) for s in stores}
        for st, rig in rigs.items():
            for n in counts:
                for prefix in (f"small-{n}", f"small-{n}-pub"):
                    t0 = time.perf_counter()
                    rig.upload(prefix, work / f"small-{n}")
                    log(f"{st}: uploaded {n} files to {prefix} in {time.perf_counter() - t0:.0f} s")
                t0 = time.perf_counter()
                subprocess.run(
                    [sys.executable, "-m", "astream", "index", rig.url(f"small-{n}-pub")],
                    cwd=ROOT, env={**env, **rig.env(direct=True)}, check=True,
                    capture_output=True,
                )  # fmt: skip
                log(f"{st}: published small-{n}-pub's index in {time.perf_counter() - t0:.0f} s")
            rig.control("config", latency_ms=a.latency_ms, bandwidth_mbps=0)
        # per store: astream (listing), the SDK floor, astream over the published index
        sides: list[tuple[str, str | None]] = []
        for st in stores:
            if a.base is not None:
                sides.append((f"base-{st}", st))
            sides += [(f"astream-{st}", st), (f"floor-{st}", st), (f"astream-{st}-pub", st)]
        if not a.no_local:
            sides.append(("astream-local", None))
            if a.base is not None:
                sides.append(("base-local", None))
        all_sides = [s for s, _ in sides]
        for rep in range(a.reps):
            for n in counts:
                for side, st in sides:
                    cache = work / "cache" / f"pqix-{side}"
                    shutil.rmtree(cache, ignore_errors=True)
                    rig = rigs[st] if st is not None else None
                    if rig is None:
                        spec = {"remote": str(work / f"small-{n}"), "cache": str(cache)}
                    elif side.startswith("floor-"):
                        spec = rig.floor_spec(f"small-{n}")
                    elif side.endswith("-pub"):
                        spec = {"remote": rig.url(f"small-{n}-pub"), "cache": str(cache),
                                "index_source": "published"}  # fmt: skip
                    else:
                        spec = {"remote": rig.url(f"small-{n}"), "cache": str(cache)}
                    if rig is not None:
                        spec["env"] = rig.env()
                        rig.control("reset")
                    r = run(side, spec)
                    if rig is not None:
                        after = rig.control("stats")
                        r["proxy_requests"] = after["requests"]
                        r["proxy_peak_in_flight"] = after.get("peak_in_flight")
                    records.append({"files": n, "side": side, "rep": rep, **r})
                    log(f"{n} {side} rep{rep}: {r}")
    (a.out / "results.json").write_text(
        json.dumps({"latency_ms": a.latency_ms, "records": records}, indent=1) + "\n"
    )
    summary: dict[str, Any] = {"latency_ms": a.latency_ms, "reps": a.reps, "files": {}}
    keys = ("cold_s", "warm_s", "cold_list_s", "warm_list_s", "cold_own_s", "warm_own_s",
            "list_serial_s", "list_split_s", "get_tails_s")  # fmt: skip
    for n in counts:
        row: dict[str, Any] = {}
        for side in all_sides:
            rs = [r for r in records if r["files"] == n and r["side"] == side]
            row[side] = {k: _median(rs, k) for k in keys if _median(rs, k) is not None}
            row[side]["errors"] = [r.get("reason") for r in rs if r.get("status") != "ok"]
        for st in stores:
            fl, ours = row[f"floor-{st}"], row[f"astream-{st}"]
            sfx = "" if st == "s3" else f"_{st}"  # s3's keys as before this file had stores
            if fl.get("list_serial_s") and fl.get("get_tails_s") and ours.get("cold_s"):
                floor = fl["list_serial_s"] + fl["get_tails_s"]
                row[f"cold_floor_s{sfx}"] = floor
                row[f"cold_overhead_s{sfx}"] = ours["cold_s"] - floor
            warm_floor = fl.get("list_split_s") or fl.get("list_serial_s")
            if warm_floor and ours.get("warm_s"):
                row[f"warm_floor_s{sfx}"] = warm_floor
                row[f"warm_overhead_s{sfx}"] = ours["warm_s"] - warm_floor
            base = row.get(f"base-{st}", {})
            for k in ("cold_s", "warm_s"):
                if base.get(k) and ours.get(k):
                    row[f"base_over_new_{st}_{k}"] = base[k] / ours[k]
        for k in ("cold_s", "warm_s"):
            lb = row.get("base-local", {}).get(k)
            lo = row.get("astream-local", {}).get(k)
            if lb and lo:
                row[f"base_over_new_local_{k}"] = lb / lo
        summary["files"][str(n)] = row
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
