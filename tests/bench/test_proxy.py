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
