"""Issue 7.1: full epochs through the fault proxy in front of S3, GCS and Azure emulators, and
a dead endpoint that must fail fast with a clear StorageError, never hang.

Figures (retries, added time) are printed; run with ``-s`` to see them.
"""

from __future__ import annotations

import random
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from astream import StreamingDataset
from astream.errors import StorageTimeoutError, TransientStorageError

from .conftest import Cloud, MakeProxy, check_samples

FAULTS = {"error_rate": 0.10, "reset_rate": 0.05, "truncate_rate": 0.02}


def _spikes(proxy: Any, stop: threading.Event, seed: int) -> None:
    """Latency spikes: now and then every request waits 50-300 ms, for 100-300 ms."""
    rng = random.Random(seed)
    while not stop.is_set():
        proxy.configure(latency=0.0)
        if stop.wait(rng.uniform(0.1, 0.4)):
            break
        proxy.configure(latency=rng.uniform(0.05, 0.3))
        stop.wait(rng.uniform(0.1, 0.3))
    proxy.configure(latency=0.0)


def _epoch(url: str, local: str, options: dict[str, Any], **kw: Any) -> list[dict[str, Any]]:
    ds = StreamingDataset(
        remote=url,
        local=local,
        batch_size=8,
        shuffle=True,
        storage_options=options,
        **kw,
    )
    return list(ds)


def test_full_epochs_through_faults_are_exact(
    cloud: Cloud, plain_src: str, zstd_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    for kind, src in (("plain", plain_src), ("zstd", zstd_src)):
        url = cloud.upload(src, kind)
        clean = make_proxy(cloud.server.url)
        t0 = time.perf_counter()
        base = _epoch(url, str(tmp_path / f"{kind}-clean"), cloud.via(clean))
        t_clean = time.perf_counter() - t0
        check_samples(base, range(1200))

        proxy = make_proxy(cloud.server.url, seed=7, **FAULTS)
        stop = threading.Event()
        spiker = threading.Thread(target=_spikes, args=(proxy, stop, 3), daemon=True)
        spiker.start()
        t0 = time.perf_counter()
        try:
            got = _epoch(
                url,
                str(tmp_path / f"{kind}-faulty"),
                cloud.via(proxy),
                download_retry=8,
                download_timeout=5,
                validate_hash="xxh64",
            )
        finally:
            stop.set()
            spiker.join()
        t_faulty = time.perf_counter() - t0
        check_samples(got, range(1200))
        assert [s["id"] for s in got] == [s["id"] for s in base]  # same order, faults or not
        faults = dict(proxy.stats.faults)
        assert sum(faults.values()) >= 3, faults  # the faults really happened
        print(
            f"\n[fault-matrix] {cloud.name}/{kind}: {proxy.stats.total_requests} requests, "
            f"faults {faults}, epoch {t_clean:.2f}s clean vs {t_faulty:.2f}s faulty "
            f"(+{t_faulty - t_clean:.2f}s)"
        )
        assert t_faulty < 60


@pytest.fixture
def blackhole() -> Iterator[str]:
    """A TCP port that accepts connections (kernel backlog) and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


# attempts x download_timeout plus the backoffs (base 0.2 s, full jitter: < 0.2 + 0.4 + ...)
def _bound(attempts: int, timeout: float) -> float:
    return attempts * timeout + sum(0.2 * 2**k for k in range(attempts - 1)) + 1.0


def test_dead_endpoint_at_construction_fails_within_bound(
    cloud: Cloud, blackhole: str, tmp_path: Any
) -> None:
    t0 = time.perf_counter()
    with pytest.raises(StorageTimeoutError, match=r"no response within 0\.5s \[.*index\.json\]"):
        StreamingDataset(
            remote=cloud.url("dead"),
            local=str(tmp_path / "c"),
            batch_size=8,
            download_retry=2,
            download_timeout=0.5,
            storage_options=cloud.options(blackhole),
        )
    took = time.perf_counter() - t0
    print(f"\n[dead-endpoint] {cloud.name}: StorageTimeoutError after {took:.2f}s (bound 3 x 0.5s)")
    assert 1.5 <= took < _bound(3, 0.5), took


def test_endpoint_dying_mid_epoch_fails_within_bound(
    cloud: Cloud, plain_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    url = cloud.upload(plain_src, "dying")
    proxy = make_proxy(cloud.server.url)
    ds = StreamingDataset(
        remote=url,
        local=str(tmp_path / "c"),
        batch_size=8,
        download_retry=1,
        download_timeout=0.5,
        storage_options=cloud.via(proxy),
    )
    it = iter(ds)
    first = [next(it) for _ in range(8)]
    assert len(first) == 8
    proxy.configure(latency=3600.0)  # every request from now on hangs
    t0 = time.perf_counter()
    with pytest.raises(StorageTimeoutError, match=r"no response within 0\.5s \[.*shard\.\d{5}"):
        for _ in it:
            pass
    took = time.perf_counter() - t0
    print(f"\n[dying-endpoint] {cloud.name}: StorageTimeoutError after {took:.2f}s mid-epoch")
    assert took < _bound(2, 0.5), took
    proxy.configure(latency=0.0)


def test_every_request_failing_is_a_transient_error_not_a_hang(
    cloud: Cloud, plain_src: str, make_proxy: MakeProxy, tmp_path: Any
) -> None:
    url = cloud.upload(plain_src, "503")
    proxy = make_proxy(cloud.server.url)
    ds = StreamingDataset(
        remote=url,
        local=str(tmp_path / "c"),
        batch_size=8,
        download_retry=3,
        download_timeout=5,
        storage_options=cloud.via(proxy),
    )
    proxy.configure(error_rate=1.0)
    t0 = time.perf_counter()
    with pytest.raises(TransientStorageError, match=r"server error \(HTTP 50[03].*\[.*shard\."):
        list(ds)
    assert time.perf_counter() - t0 < _bound(4, 0.0)
