"""open_store: scheme dispatch, install hints, option errors, RetryPolicy validation."""

from __future__ import annotations

import sys

import pytest

from astream.errors import ConfigError
from astream.storage import RetryingStore, RetryPolicy, open_store
from astream.storage.registry import scheme_of


def test_schemes() -> None:
    assert [scheme_of(u) for u in ("/a/b", "file:///x", "s3://b", "GS://b", "az://c")] == [
        "file",
        "file",
        "s3",
        "gs",
        "az",
    ]
    store = open_store("s3://bucket/pre/fix/", endpoint_url="http://127.0.0.1:1")
    assert isinstance(store, RetryingStore)
    assert store.url == "s3://bucket/pre/fix"
    assert store.url_for("part0/shard.00000.mds") == "s3://bucket/pre/fix/part0/shard.00000.mds"
    assert open_store("gs://b").url_for("k") == "gs://b/k"


def test_unknown_scheme() -> None:
    with pytest.raises(ConfigError, match=r"url 'ftp://x/y': unknown scheme 'ftp'"):
        open_store("ftp://x/y")


def test_bad_option_and_key() -> None:
    with pytest.raises(ConfigError, match=r"open_store\('s3://b'\): bad option for s3://"):
        open_store("s3://b", no_such_option=1)
    store = open_store("s3://b")
    with pytest.raises(ConfigError, match=r"key '../x': must be relative"):
        store.url_for("../x")


def test_missing_extra_gives_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aiobotocore", None)
    monkeypatch.delitem(sys.modules, "astream.storage.s3", raising=False)
    with pytest.raises(ConfigError) as ei:
        open_store("s3://bucket/x")
    assert str(ei.value) == "url 's3://bucket/x' needs the 's3' extra: pip install 'astream[s3]'"


def test_retry_policy_validation() -> None:
    with pytest.raises(ConfigError, match=r"RetryPolicy\.attempts must be >= 1, got 0"):
        RetryPolicy(attempts=0)
    with pytest.raises(ConfigError, match=r"RetryPolicy\.deadline must be > 0, got -1"):
        RetryPolicy(deadline=-1)
