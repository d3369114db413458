"""The measuring proxy in front of the real S3 emulator: exact byte/request counts, latency."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.s3util import raw_get_all, upload_dir
from benchmarks.servers import S3Emulator


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Emulator]:
    d: Path = tmp_path_factory.mktemp("objs")
    (d / "a.bin").write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    (d / "sub").mkdir()
    (d / "sub" / "b.bin").write_bytes(b"xyz" * 1000)
    with S3Emulator() as emu:
        assert upload_dir(emu.direct, "bench", "p", d) == 2
        yield emu


def test_counts_exact_bytes_and_requests(s3: S3Emulator) -> None:
    s3.control("config", latency_ms=0)
    s3.control("reset")
    r = raw_get_all(s3.endpoint, "bench", "p")
    assert (r["objects"], r["bytes"]) == (2, (1 << 20) + 3000)
    stats = s3.control("stats")
    assert stats["requests"] == 3  # one LIST + two GETs
    assert stats["ranged_requests"] == 0
    # bytes_out = both bodies + the LIST response body
    assert (1 << 20) + 3000 < stats["bytes_out"] < (1 << 20) + 3000 + 4096


def test_latency_is_added_per_request(s3: S3Emulator) -> None:
    s3.control("config", latency_ms=150)
    try:
        t0 = time.perf_counter()
        raw_get_all(s3.endpoint, "bench", "p", concurrency=1)
        elapsed = time.perf_counter() - t0
    finally:
        s3.control("config", latency_ms=0)
    assert elapsed >= 3 * 0.150  # LIST, then two GETs one at a time


def test_unknown_control_is_404(s3: S3Emulator) -> None:
    import urllib.error
    import urllib.request

    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(s3.endpoint + "/__bench__/nope")
    assert e.value.code == 404


def _answer(url: str, path: str) -> tuple[int, str | None, bool]:
    import http.client
    import urllib.parse

    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        r.read()
        return r.status, r.getheader("Connection"), r.will_close
    finally:
        conn.close()


def test_keeps_connections_alive_unless_told_to_close(s3: S3Emulator) -> None:
    # "/" lists the buckets (200, even unsigned). moto's own server closes every connection;
    # the proxy keeps them open by default, as a real object store does, and answers
    # "Connection: close" only under close=1
    assert _answer(s3.direct, "/")[1:] == ("close", True)
    assert _answer(s3.endpoint, "/") == (200, None, False)
    s3.control("config", close=1)
    try:
        assert s3.control("stats")["close"] == 1.0
        assert _answer(s3.endpoint, "/") == (200, "close", True)
    finally:
        s3.control("config", close=0)
    assert _answer(s3.endpoint, "/") == (200, None, False)


def test_counts_error_answers(s3: S3Emulator) -> None:
    s3.control("reset")
    assert _answer(s3.endpoint, "/")[0] == 200
    assert _answer(s3.endpoint, "/nobucket/x")[0] == 404
    stats = s3.control("stats")
    assert (stats["requests"], stats["error_responses"]) == (2, 1)


def _gets(endpoint: str, n: int) -> tuple[float, list[tuple[float, int]]]:
    """n GETs of the 1 MiB object at once: (seconds for all, [(seconds, bytes)] of each)."""
    import asyncio

    from benchmarks.s3util import _client

    async def run() -> tuple[float, list[tuple[float, int]]]:
        async with _client(endpoint) as s3c:

            async def one() -> tuple[float, int]:
                t0 = time.perf_counter()
                resp = await s3c.get_object(Bucket="bench", Key="p/a.bin")
                async with resp["Body"] as body:
                    got = len(await body.read())
                return time.perf_counter() - t0, got

            await one()  # the client's connection setup, outside the timings
            t0 = time.perf_counter()
            each = await asyncio.gather(*(one() for _ in range(n)))
            return time.perf_counter() - t0, list(each)

    return asyncio.run(run())


def test_conn_mbps_caps_each_answer_not_all_of_them(s3: S3Emulator) -> None:
    """1 MB/s per answer: one GET of the 1 MiB object takes at least 1.05 s, and four at
    once take about as long, where a cap shared by all answers would need 4.2 s."""
    floor = (1 << 20) / 1e6
    fast, _ = _gets(s3.endpoint, 1)
    s3.control("config", conn_mbps=1)
    try:
        assert s3.control("stats")["conn_mbps"] == 1.0
        _, [(one, n)] = _gets(s3.endpoint, 1)
        together, four = _gets(s3.endpoint, 4)
    finally:
        s3.control("config", conn_mbps=0)
    assert n == 1 << 20 and one >= floor
    assert all(s >= floor and m == 1 << 20 for s, m in four)
    assert together < 3.0, together
    assert fast < 0.5  # the same GET without the cap
