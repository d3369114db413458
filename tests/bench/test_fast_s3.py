"""The benchmarks' fast S3 stand-in (benchmarks/fast_s3.py), in its own process: what the SDK
uploads is what astream's S3 store lists and reads back, byte for byte; ranges, conditions,
listing pages and the latency behave as S3's do for a reading client."""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from astream.errors import ObjectChangedError
from astream.storage import open_store
from benchmarks.fast_s3 import decode_aws_chunked, parse_range
from benchmarks.s3util import raw_get_all, upload_dir
from benchmarks.servers import _spawn

BLOBS = {
    "p/a.bin": random.Random(1).randbytes(300_000),
    "p/b&c <d>.bin": b"escaped key",
    "p/sub/z.bin": b"",
    "p/\u00e9t\u00e9.bin": b"utf-8 key",
    "other/x.bin": b"not under p",
}


@pytest.fixture(scope="module")
def fast(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    d: Path = tmp_path_factory.mktemp("objs")
    for key, data in BLOBS.items():
        path = d / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    proc, port = _spawn(["-m", "benchmarks.fast_s3", "--exit-with-parent"])
    try:
        url = f"http://127.0.0.1:{port}"
        assert upload_dir(url, "bench", "up", d) == len(BLOBS)  # the SDK's own PUTs
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _control(url: str, what: str, **query: float) -> dict[str, Any]:
    qs = "&".join(f"{k}={v}" for k, v in query.items())
    req = urllib.request.Request(
        f"{url}/__bench__/{what}" + (f"?{qs}" if qs else ""),
        method="GET" if what == "stats" else "POST",
    )
    with urllib.request.urlopen(req) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def _store(url: str, monkeypatch: pytest.MonkeyPatch, **opts: Any) -> Any:
    monkeypatch.setenv("S3_ENDPOINT_URL", url)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "bench")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "bench")
    return open_store("s3://bench/up/p", **opts)


def test_astream_lists_and_reads_what_the_sdk_uploaded(
    fast: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def go() -> tuple[list[tuple[str, int]], dict[str, bytes], bytes, bytes, bytes]:
        store = _store(fast, monkeypatch, list_page_size=3)  # two pages: a token followed
        try:
            listed = [(o.key, o.size) async for o in store.list("")]
            whole = {k: await store.get_range(k) for k, _ in listed}
            mid = await store.get_range("a.bin", 1000, 2500)
            tail = await store.get_range("a.bin", 299_990, 300_000)
            past = await store.get_range("a.bin", 300_000, 300_010)
            return listed, whole, mid, tail, past
        finally:
            await store.aclose()

    listed, whole, mid, tail, past = asyncio.run(go())
    under = {k.removeprefix("p/"): v for k, v in BLOBS.items() if k.startswith("p/")}
    # every key under the prefix once, in byte order (as S3 lists), with its size
    assert listed == sorted(((k, len(v)) for k, v in under.items()), key=lambda kv: kv[0].encode())
    assert whole == under
    a = BLOBS["p/a.bin"]
    assert (mid, tail, past) == (a[1000:2500], a[299_990:], b"")


def test_a_condition_on_another_etag_is_refused(fast: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go(etag: str) -> bytes:
        store = _store(fast, monkeypatch)
        try:
            data: bytes = await store.get_range("a.bin", 0, 10, etag=etag)
            return data
        finally:
            await store.aclose()

    import hashlib

    good = hashlib.md5(BLOBS["p/a.bin"]).hexdigest()
    assert asyncio.run(go(f'"{good}"')) == BLOBS["p/a.bin"][:10]
    with pytest.raises(ObjectChangedError, match=r"a\.bin"):
        asyncio.run(go('"0123456789abcdef0123456789abcdef"'))
    # refused by the server itself (astream also compares the answer's ETag)
    req = urllib.request.Request(f"{fast}/bench/up/p/a.bin", headers={"If-Match": '"0"'})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req)
    assert e.value.code == 412


def test_counts_requests_and_waits_its_latency(fast: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _control(fast, "reset")
    r = raw_get_all(fast, "bench", "up/p", concurrency=1)
    assert (r["objects"], r["bytes"]) == (4, sum(len(v) for k, v in BLOBS.items() if k[:2] == "p/"))
    assert _control(fast, "stats")["requests"] == 5  # one listing page, four GETs

    async def go() -> tuple[float, float]:
        store = _store(fast, monkeypatch)
        try:
            await store.get_range("a.bin", 0, 1)  # the session's first connection
            t0 = time.perf_counter()
            for _ in range(4):
                await store.get_range("a.bin", 0, 1)
            serial = time.perf_counter() - t0
            _control(fast, "reset")
            t0 = time.perf_counter()
            await asyncio.gather(*(store.get_range("a.bin", i, i + 1) for i in range(4)))
            return serial, time.perf_counter() - t0
        finally:
            await store.aclose()

    _control(fast, "config", latency_ms=120)
    try:
        serial, together = asyncio.run(go())
    finally:
        _control(fast, "config", latency_ms=0)
    assert serial >= 4 * 0.120
    assert together < 2 * 0.120  # the four waits overlap (an asyncio sleep each)
    assert _control(fast, "stats")["peak_in_flight"] == 4


def test_ranges_and_chunked_bodies(fast: str) -> None:
    assert parse_range("bytes=0-9", 100) == (0, 10)
    assert parse_range("bytes=90-", 100) == (90, 100)
    assert parse_range("bytes=95-200", 100) == (95, 100)
    assert parse_range("bytes=-30", 100) == (70, 100)
    assert parse_range("bytes=-300", 100) == (0, 100)
    assert parse_range("bytes=100-", 100) is None
    body = os.urandom(70_000)
    chunked = (
        b"10000;chunk-signature=ab\r\n" + body[:65536] + b"\r\n"
        + f"{len(body) - 65536:x}".encode() + b"\r\n" + body[65536:] + b"\r\n"
        + b"0\r\nx-amz-checksum-crc32:AAAAAA==\r\n\r\n"
    )  # fmt: skip
    assert decode_aws_chunked(chunked) == body
    # a PUT in the SDK's streaming encoding is stored decoded
    put = urllib.request.Request(
        f"{fast}/bench/chunked.bin",
        data=chunked,
        method="PUT",
        headers={"Content-Encoding": "aws-chunked",
                 "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER"},
    )  # fmt: skip
    urllib.request.urlopen(put).read()
    with urllib.request.urlopen(f"{fast}/bench/chunked.bin") as r:
        assert r.read() == body
