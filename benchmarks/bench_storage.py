"""Storage throughput: parallel ranged GETs vs one sequential GET, per backend, vs raw SDK.

Usage: .venv/bin/python benchmarks/bench_storage.py [--size MiB] [--parts N] [--runs R]

1. moto S3 behind the fault proxy adding 20 ms per request: one sequential GET of the object
   vs ``download_file`` (parallel ranged GETs). The issue asks for >= 4x.
2. Every emulator without the proxy: astream's parallel download MB/s, next to the emulator's
   raw ceiling measured with plain concurrent ranged GETs through the SDK/aiohttp alone
   (S3: aiobotocore; HTTP: aiohttp). Medians of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from astream.storage import ObjectStore, open_store
from astream.storage.transfer import download_file
from astream.testing import (
    AzuriteServer,
    FakeGcsServer,
    FaultProxy,
    MotoServer,
    StaticHttpServer,
)

MiB = 1 << 20


def median_time(fn: Callable[[], Awaitable[Any]], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        asyncio.run(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def seq_get(url: str, opts: dict[str, Any], path: str) -> None:
    store = open_store(url, **opts)
    try:
        await store.get_to_file("obj.bin", path)
    finally:
        await store.aclose()


async def par_get(url: str, opts: dict[str, Any], path: str, size: int, parts: int) -> None:
    store: ObjectStore = open_store(url, **opts)
    try:
        part = max(MiB, -(-size // parts))
        await download_file(store, "obj.bin", path, part_size=part, concurrency=parts, size=size)
    finally:
        await store.aclose()


async def raw_s3(endpoint: str, bucket: str, size: int, parts: int) -> None:
    import aiobotocore.session
    from aiobotocore.config import AioConfig

    part = -(-size // parts)
    session = aiobotocore.session.get_session()
    cfg = AioConfig(max_pool_connections=64)
    async with session.create_client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", config=cfg
    ) as c:

        async def one(a: int) -> int:
            r = await c.get_object(Bucket=bucket, Key="obj.bin", Range=f"bytes={a}-{a + part - 1}")
            return len(await r["Body"].read())

        got = await asyncio.gather(*(one(a) for a in range(0, size, part)))
        assert sum(got) == size


async def raw_http(url: str, size: int, parts: int) -> None:
    import aiohttp

    part = -(-size // parts)
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as s:

        async def one(a: int) -> int:
            h = {"Range": f"bytes={a}-{a + part - 1}"}
            async with s.get(f"{url}/obj.bin", headers=h) as r:
                return len(await r.read())

        got = await asyncio.gather(*(one(a) for a in range(0, size, part)))
        assert sum(got) == size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--size", type=int, default=32, help="object size in MiB (issue: 256)")
    ap.add_argument("--parts", type=int, default=16, help="parallel ranged GETs")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    size = args.size * MiB
    data = os.urandom(size)
    tmp = tempfile.mkdtemp(prefix="bench-storage-")
    out = os.path.join(tmp, "out.bin")
    mb = size / 1e6
    rows: list[tuple[str, float, float | None]] = []

    async def seed(url: str, opts: dict[str, Any]) -> None:
        store = open_store(url, **opts)
        try:
            await store.put("obj.bin", data)
        finally:
            await store.aclose()

    s3 = MotoServer().start()
    try:
        os.environ.update(s3.env())
        s3.create_bucket("bench")
        opts = s3.store_options()
        asyncio.run(seed("s3://bench", opts))
        with FaultProxy(s3.url, latency=0.020) as proxy:
            popts = {**opts, "endpoint_url": proxy.url}
            t_seq = median_time(lambda: seq_get("s3://bench", popts, out), args.runs)
            t_par = median_time(
                lambda: par_get("s3://bench", popts, out, size, args.parts), args.runs
            )
        print(
            f"S3 + 20 ms/request proxy, {args.size} MiB: sequential {mb / t_seq:.0f} MB/s, "
            f"parallel x{args.parts} {mb / t_par:.0f} MB/s, ratio {t_seq / t_par:.1f}x"
        )
        t_par = median_time(lambda: par_get("s3://bench", opts, out, size, args.parts), args.runs)
        t_raw = median_time(lambda: raw_s3(s3.url, "bench", size, args.parts), args.runs)
        rows.append(("s3 (moto)", mb / t_par, mb / t_raw))
    finally:
        s3.stop()

    for server_cls, scheme in ((FakeGcsServer, "gs"), (AzuriteServer, "az")):
        srv = server_cls().start()
        try:
            srv.create_bucket("bench")
            opts = srv.store_options()
            url = f"{scheme}://bench"
            asyncio.run(seed(url, opts))
            t_par = median_time(
                lambda u=url, o=opts: par_get(u, o, out, size, args.parts), args.runs
            )
            rows.append((f"{scheme} ({srv.name})", mb / t_par, None))
        finally:
            srv.stop()

    www = os.path.join(tmp, "www")
    os.makedirs(www)
    with open(os.path.join(www, "obj.bin"), "wb") as f:
        f.write(data)
    with StaticHttpServer(www) as http:
        t_par = median_time(lambda: par_get(http.url, {}, out, size, args.parts), args.runs)
        t_raw = median_time(lambda: raw_http(http.url, size, args.parts), args.runs)
        rows.append(("http (aiohttp static)", mb / t_par, mb / t_raw))

    print(f"\nparallel ranged download of {args.size} MiB, x{args.parts}, median of {args.runs}:")
    for name, ours, raw in rows:
        ceiling = f"raw SDK ceiling {raw:.0f} MB/s ({ours / raw:.0%})" if raw else "(no raw run)"
        print(f"  {name:24s} astream {ours:6.0f} MB/s   {ceiling}")


if __name__ == "__main__":
    main()
