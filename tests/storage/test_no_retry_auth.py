"""HTTP 401/403 from every remote backend are never retried: exactly one request reaches the
server, and the error is an ``AccessDeniedError`` naming the URL (a retry loop on refused
credentials only delays the real error by the whole retry budget)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from astream.errors import AccessDeniedError
from astream.storage import RetryPolicy
from astream.testing import FaultProxy

from .conftest import Target

# a generous budget: a retried 401/403 would show as more requests and seconds of backoff
PATIENT = RetryPolicy(attempts=6, timeout=10.0, backoff_base=0.2, backoff_max=1.0)


@pytest.mark.parametrize("status", ["401", "403"])
async def test_auth_errors_are_not_retried(
    remote_target: Target, make_proxy: Callable[..., FaultProxy], status: str
) -> None:
    w = remote_target.writer()
    try:
        await w.put("secret.bin", b"x" * 1000)
    finally:
        await w.aclose()
    proxy = make_proxy(remote_target.upstream)
    store = remote_target.open(retry=PATIENT, proxy=proxy)
    try:
        for call in ("range", "whole"):
            proxy.reset_stats()
            proxy.plan(status, path="secret.bin")
            with pytest.raises(AccessDeniedError) as ei:
                if call == "range":
                    await store.get_range("secret.bin", 0, 10)
                else:
                    await store.get_range("secret.bin")
            assert ei.value.url == store.url_for("secret.bin")
            assert ei.value.retryable is False
            assert proxy.stats.faults == {status: 1}
            assert proxy.stats.total_requests == 1, dict(proxy.stats.requests)
        # the next request, not refused, succeeds: nothing was poisoned
        proxy.reset_stats()
        assert await store.get_range("secret.bin", 0, 10) == b"x" * 10
        assert proxy.stats.total_requests == 1
    finally:
        await store.aclose()
