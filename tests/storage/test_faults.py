"""Reliability through the fault proxy: transient faults are invisible, persistent ones fail
within the deadline naming the URL, 404s cost one request, truncated bodies resume."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable

import pytest

from astream.errors import (
    ObjectNotFoundError,
    StorageError,
    StorageTimeoutError,
    TransientStorageError,
)
from astream.storage import RetryPolicy
from astream.testing import FaultProxy, StaticHttpServer

from .conftest import Target

BLOB = random.Random(5).randbytes(3 << 20)


def gets(proxy: FaultProxy) -> int:
    return proxy.stats.methods["GET"]


async def seed(target: Target, key: str, data: bytes) -> None:
    w = target.writer()
    try:
        await w.put(key, data)
    finally:
        await w.aclose()


async def test_transient_faults_are_invisible(
    remote_target: Target, make_proxy: Callable[..., FaultProxy]
) -> None:
    await seed(remote_target, "f.bin", BLOB)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    try:
        # each read meets one fault of every kind, then succeeds: 4 failed + 1 good request
        for fault in ("503", "500", "reset", "truncate"):
            proxy.plan(fault, path="f.bin")
            assert await store.get_range("f.bin", 1000, 2_500_000) == BLOB[1000:2_500_000]
        proxy.plan("503", "reset", "truncate", "500", path="f.bin")
        assert await store.get_range("f.bin") == BLOB
        assert proxy.stats.faults == {"503": 2, "500": 2, "reset": 2, "truncate": 2}
    finally:
        await store.aclose()


async def test_random_faults_below_budget_are_invisible(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], tmp_path: object
) -> None:
    await seed(remote_target, "r.bin", BLOB)
    proxy = make_proxy(
        remote_target.upstream, seed=1, error_rate=0.15, reset_rate=0.1, truncate_rate=0.1
    )
    store = remote_target.open(
        retry=RetryPolicy(attempts=12, timeout=10, backoff_base=0.001, backoff_max=0.005),
        proxy=proxy,
    )
    rng = random.Random(2)
    try:
        for _ in range(20):
            a = rng.randrange(0, len(BLOB))
            b = a + rng.randrange(1, 400_000)
            assert await store.get_range("r.bin", a, b) == BLOB[a:b]
        path = os.path.join(str(tmp_path), "r.bin")
        assert await store.get_to_file("r.bin", path) == len(BLOB)
        with open(path, "rb") as f:
            assert f.read() == BLOB
        assert sum(proxy.stats.faults.values()) >= 5  # the faults really happened
    finally:
        await store.aclose()


async def test_truncated_body_resumes_from_received_byte(
    remote_target: Target, make_proxy: Callable[..., FaultProxy]
) -> None:
    await seed(remote_target, "t.bin", BLOB)
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    try:
        proxy.plan("truncate", path="t.bin")
        assert await store.get_range("t.bin") == BLOB
        # half the body, then exactly the missing half: no byte fetched twice (Azure too: its
        # reads stream one GET since they bypass the SDK, which buffered 2 MiB GETs whole)
        assert gets(proxy) == 2
        assert proxy.stats.total_bytes == len(BLOB)
    finally:
        await store.aclose()


async def test_404_is_not_retried(
    remote_target: Target, make_proxy: Callable[..., FaultProxy]
) -> None:
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(proxy=proxy)
    try:
        with pytest.raises(ObjectNotFoundError) as ei:
            await store.get_range("missing.bin", 0, 10)
        assert ei.value.url == store.url_for("missing.bin")
        assert gets(proxy) == 1
    finally:
        await store.aclose()


async def test_persistent_fault_exhausts_attempts(
    remote_target: Target, make_proxy: Callable[..., FaultProxy]
) -> None:
    await seed(remote_target, "p.bin", b"abc")
    proxy = make_proxy(remote_target.upstream, error_rate=1.0)
    policy = RetryPolicy(attempts=3, timeout=5, backoff_base=0.001, backoff_max=0.002)
    store = remote_target.open(retry=policy, proxy=proxy)
    try:
        with pytest.raises(TransientStorageError) as ei:
            await store.get_range("p.bin")
        assert ei.value.url == store.url_for("p.bin")
        assert ei.value.retryable is True
        assert "server error (HTTP 50" in str(ei.value)
        assert gets(proxy) == 3
    finally:
        await store.aclose()


async def test_persistent_fault_fails_within_deadline(
    remote_target: Target, make_proxy: Callable[..., FaultProxy]
) -> None:
    await seed(remote_target, "d.bin", b"abc")
    proxy = make_proxy(remote_target.upstream)
    policy = RetryPolicy(attempts=1000, timeout=5, deadline=1.0, backoff_base=0.05)
    store = remote_target.open(retry=policy, proxy=proxy)
    try:
        # warm, outside the policy: the SDK client's creation (session, models, TLS context:
        # over a second on a loaded machine) is not what the deadline measures
        await store.raw.head("d.bin")
        proxy.configure(reset_rate=1.0)
        t0 = time.monotonic()
        with pytest.raises(StorageTimeoutError) as ei:
            await store.get_range("d.bin")
        elapsed = time.monotonic() - t0
        assert elapsed < 1.5
        assert isinstance(ei.value, TransientStorageError)
        assert ei.value.url == store.url_for("d.bin")
        assert str(ei.value).startswith("deadline of 1.0s exceeded after ")
        assert "last error: connection failed" in str(ei.value)
        assert gets(proxy) >= 3
    finally:
        await store.aclose()


async def test_slow_server_times_out_per_request(
    remote_target: Target, make_proxy: Callable[..., FaultProxy]
) -> None:
    await seed(remote_target, "s.bin", b"abc")
    proxy = make_proxy(remote_target.upstream)
    policy = RetryPolicy(attempts=2, timeout=0.1, backoff_base=0.001)
    store = remote_target.open(retry=policy, proxy=proxy)
    try:
        await store.raw.head("s.bin")  # warm, outside the 0.1 s policy: client, connection
        proxy.configure(latency=0.5)
        t0 = time.monotonic()
        with pytest.raises(StorageTimeoutError, match=r"no response within 0\.1s") as ei:
            await store.get_range("s.bin")
        assert time.monotonic() - t0 < 0.5
        assert ei.value.url == store.url_for("s.bin")
        proxy.configure(latency=0.0)
        assert await store.get_range("s.bin") == b"abc"
    finally:
        await store.aclose()


async def test_http_server_ignoring_range_is_a_clear_error(tmp_path: object) -> None:
    root = os.path.join(str(tmp_path), "www")
    os.makedirs(root)
    with open(os.path.join(root, "a.bin"), "wb") as f:
        f.write(b"0123456789")
    from astream.storage import open_store

    with StaticHttpServer(root, honor_range=False) as srv:
        store = open_store(f"{srv.url}/", retry=RetryPolicy(attempts=3, backoff_base=0.001))
        try:
            assert await store.get_range("a.bin") == b"0123456789"  # whole object: fine
            assert await store.get_range("a.bin", 0, 50) == b"0123456789"  # covers it all
            with pytest.raises(StorageError) as ei:
                await store.get_range("a.bin", 2, 5)
            assert not ei.value.retryable
            assert "server ignored the Range header (bytes=2-4)" in str(ei.value)
            assert ei.value.url == f"{srv.url}/a.bin"
        finally:
            await store.aclose()
