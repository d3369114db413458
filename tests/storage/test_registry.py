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


def test_preload_imports_the_backends_of_the_remote_urls_only() -> None:
    """What an async ``open`` runs in a thread first, in a fresh interpreter: the S3 backend
    is imported, the GCS one is not, and what is not a known URL is skipped."""
    import subprocess

    code = (
        "import sys\n"
        "from astream.storage.registry import preload_backends\n"
        "preload_backends(['s3://b/x', None, 7, '', 'ftp://x/y'])\n"
        "print([m in sys.modules for m in "
        "('astream.storage.s3', 'astream.storage.gcshmac', 'astream.storage.azure')])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[-2] == "[True, False, False]", out.stdout
