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
