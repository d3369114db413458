"""S3 helpers of the harness itself: upload a dataset, and the raw concurrent-GET limit.

Uses aiobotocore directly (the SDK alone, no library on top), with dummy credentials that the
emulator accepts.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from aiobotocore.session import get_session
from botocore.config import Config

CREDS = {"aws_access_key_id": "bench", "aws_secret_access_key": "bench"}
REGION = "us-east-1"


def _client(endpoint: str, pool: int = 32) -> Any:
    cfg = Config(max_pool_connections=pool, s3={"addressing_style": "path"})
    return get_session().create_client(
        "s3", endpoint_url=endpoint, region_name=REGION, config=cfg, **CREDS
    )


async def _upload(endpoint: str, bucket: str, prefix: str, local: Path) -> int:
    files = [p for p in sorted(local.rglob("*")) if p.is_file()]
    sem = asyncio.Semaphore(8)
    async with _client(endpoint) as s3:
        try:
            await s3.create_bucket(Bucket=bucket)
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass

        async def one(p: Path) -> None:
            async with sem:
                key = f"{prefix}/{p.relative_to(local).as_posix()}"
                await s3.put_object(Bucket=bucket, Key=key, Body=p.read_bytes())

        await asyncio.gather(*(one(p) for p in files))
    return len(files)


def upload_dir(endpoint: str, bucket: str, prefix: str, local: Path) -> int:
    """Upload every file under ``local`` to ``s3://bucket/prefix/``; return the file count."""
    return asyncio.run(_upload(endpoint, bucket, prefix, local))


async def _get_all(endpoint: str, bucket: str, prefix: str, concurrency: int) -> tuple[int, int]:
    async with _client(endpoint, pool=concurrency) as s3:
        keys: list[str] = []
        paginator = s3.get_paginator("list_objects_v2")
        async for page in paginator.paginate(Bucket=bucket, Prefix=prefix + "/"):
            keys.extend(o["Key"] for o in page.get("Contents", []))
        sem = asyncio.Semaphore(concurrency)

        async def one(key: str) -> int:
            async with sem:
                resp = await s3.get_object(Bucket=bucket, Key=key)
                async with resp["Body"] as body:
                    return len(await body.read())

        sizes = await asyncio.gather(*(one(k) for k in keys))
    return len(keys), sum(sizes)


def raw_get_all(endpoint: str, bucket: str, prefix: str, concurrency: int = 8) -> dict[str, float]:
    """GET every object under the prefix concurrently; the SDK-only throughput ceiling."""
    t0 = time.perf_counter()
    count, nbytes = asyncio.run(_get_all(endpoint, bucket, prefix, concurrency))
    dt = time.perf_counter() - t0
    return {"objects": count, "bytes": nbytes, "seconds": dt, "mb_per_s": nbytes / dt / 1e6}
