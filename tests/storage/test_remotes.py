"""The reference's other remotes beyond the contract suite: URL forms, credentials from the
environment and config files, refusals and their classification, retries through faults."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

import pytest

from astream.errors import (
    AccessDeniedError,
    ConfigError,
    ObjectChangedError,
    StorageError,
    ThrottledError,
    TransientStorageError,
)
from astream.storage import RetryPolicy, open_store
from astream.storage.registry import scheme_of
from astream.testing import FaultProxy
from astream.testing.servers import AZURITE_KEY

from .conftest import FAST, Target
from .remotes import DATABRICKS_TOKEN

BLOB = random.Random(9).randbytes(3 << 20)
ONE_TRY = RetryPolicy(attempts=1, timeout=10.0)


async def seed(target: Target, objects: dict[str, bytes]) -> None:
    w = target.writer()
    try:
        for k, v in objects.items():
            await w.put(k, v)
    finally:
        await w.aclose()


def test_schemes_and_alipan_refusal() -> None:
    assert scheme_of("dbfs:/Volumes/c/s/v/x") == "dbfs"
    assert scheme_of("DBFS:/tmp/x") == "dbfs"
    assert scheme_of("dbfs:///tmp/x") == "dbfs"
    assert scheme_of("azure-dl://fs@acct.dfs.core.windows.net/p") == "azure-dl"
    with pytest.raises(ConfigError, match=r"alipan:// \(Aliyun Drive\) is not supported"):
        open_store("alipan:///datasets/x")
    with pytest.raises(ConfigError, match="not dbfs://host/path"):
        open_store("dbfs://Volumes/c/s/v", host="http://127.0.0.1:1", token="t")


# -- Databricks ------------------------------------------------------------------------------


@pytest.mark.parametrize("root", ["/Volumes/main/default/vol", "/tmp/astream"])
async def test_databricks_token_refused_is_access_denied_once(
    databricks_server: Any, root: str
) -> None:
    store = open_store(f"dbfs:{root}/x", retry=FAST, host=databricks_server.url, token="wrong")
    before = len(databricks_server.requests)
    try:
        with pytest.raises(AccessDeniedError, match="UNAUTHENTICATED") as ei:
            await store.get_range("a.bin")
        assert ei.value.retryable is False
        assert len(databricks_server.requests) == before + 1  # never retried
        assert "wrong" not in str(ei.value)  # the token is never in a message
    finally:
        await store.aclose()


async def test_databricks_permission_denied_path(databricks_server: Any) -> None:
    store = open_store(
        "dbfs:/Volumes/main/default/secret/ds", retry=FAST, **databricks_server.store_options()
    )
    try:
        with pytest.raises(AccessDeniedError, match="PERMISSION_DENIED"):
            await store.get_range("a")
        with pytest.raises(AccessDeniedError, match="HTTP 403"):  # a HEAD answer has no body
            await store.head("a")
        with pytest.raises(AccessDeniedError):
            [x async for x in store.list()]
    finally:
        await store.aclose()


def test_databricks_error_codes_classified() -> None:
    from astream.storage.dbfs import _error

    def err(status: int, code: str) -> StorageError:
        return _error(status, f'{{"error_code": "{code}", "message": "m"}}'.encode(), "dbfs:/x")

    assert isinstance(err(429, "REQUEST_LIMIT_EXCEEDED"), ThrottledError)
    assert isinstance(err(400, "REQUEST_LIMIT_EXCEEDED"), ThrottledError)
    assert err(503, "TEMPORARILY_UNAVAILABLE").retryable is True
    assert err(400, "INVALID_PARAMETER_VALUE").retryable is False
    assert isinstance(err(400, "PERMISSION_DENIED"), AccessDeniedError)


@pytest.mark.parametrize("name", ["dbfs-volumes", "dbfs", "adls", "oci"])
async def test_http_remotes_retry_faults(
    name: str, request: pytest.FixtureRequest, tmp_path: Any, make_proxy: Callable[..., FaultProxy]
) -> None:
    from .conftest import make_target

    target = make_target(name, request, tmp_path)
    await seed(target, {"f.bin": BLOB})
    proxy = make_proxy(target.upstream, only_get=False)
    store = target.open(proxy=proxy)
    where = {"dbfs-volumes": "fs/files", "dbfs": "dbfs/read"}.get(name, "f.bin")
    try:
        for fault in ("503", "500", "reset", "truncate"):
            proxy.plan(fault, path=where)
            assert await store.get_range("f.bin", 1000, 2_500_000) == BLOB[1000:2_500_000]
        assert proxy.stats.faults == {"503": 1, "500": 1, "reset": 1, "truncate": 1}
        proxy.plan("503", path="")
        await store.put("g.bin", b"after a 503")  # a write is retried too
        assert await store.get_range("g.bin") == b"after a 503"
    finally:
        await store.aclose()


@pytest.mark.parametrize("root", ["/Volumes/main/default/vol", "/tmp/astream"])
async def test_databricks_conditional_writes(databricks_server: Any, root: str) -> None:
    store = open_store(
        f"dbfs:{root}/cond-{os.getpid()}", retry=FAST, **databricks_server.store_options()
    )
    try:
        await store.delete("k.bin")
        version = await store.put_if("k.bin", b"first")
        assert version
        with pytest.raises(ObjectChangedError, match="already exists"):
            await store.put_if("k.bin", b"second")
        assert await store.get_range("k.bin") == b"first"
        with pytest.raises(StorageError, match=r"expect=\) is not supported"):
            await store.put_if("k.bin", b"third", expect=version)
        with pytest.raises(StorageError, match=r"expect=\) is not supported"):
            await store.delete("k.bin", expect=version)
        await store.delete("k.bin")
        await store.delete("k.bin")  # already gone: nothing to do
        assert [x async for x in store.list("k")] == []
    finally:
        await store.aclose()


async def test_databricks_credentials_from_env_and_config_file(
    databricks_server: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    w = open_store("dbfs:/Volumes/main/default/vol/creds", **databricks_server.store_options())
    await w.put("c.bin", b"creds")
    await w.aclose()
    for name in ("DATABRICKS_HOST", "DATABRICKS_TOKEN", "DATABRICKS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(ConfigError, match="no Databricks host and token"):
        open_store("dbfs:/Volumes/main/default/vol/creds")
    with open(tmp_path / ".databrickscfg", "w") as f:
        f.write(f"[DEFAULT]\nhost = {databricks_server.url}\ntoken = {DATABRICKS_TOKEN}\n")
        f.write("[other]\nhost = http://127.0.0.1:9\ntoken = nope\n")
    store = open_store("dbfs:/Volumes/main/default/vol/creds")
    try:
        assert await store.get_range("c.bin") == b"creds"
    finally:
        await store.aclose()
    os.remove(tmp_path / ".databrickscfg")
    monkeypatch.setenv("DATABRICKS_HOST", databricks_server.url.removeprefix("http://"))
    monkeypatch.setenv("DATABRICKS_TOKEN", DATABRICKS_TOKEN)
    store = open_store("dbfs:/Volumes/main/default/vol/creds", retry=ONE_TRY)
    try:  # a host without a scheme is https, which this plain-HTTP server cannot answer
        with pytest.raises(TransientStorageError, match="SSL"):
            await store.get_range("c.bin")
    finally:
        await store.aclose()
    monkeypatch.setenv("DATABRICKS_HOST", databricks_server.url)
    store = open_store("dbfs:///Volumes/main/default/vol/creds")
    try:
        assert await store.get_range("c.bin", 1, 4) == b"red"
        assert store.url_for("c.bin") == "dbfs:/Volumes/main/default/vol/creds/c.bin"
    finally:
        await store.aclose()


# -- SFTP ------------------------------------------------------------------------------------


async def test_sftp_credentials_from_the_reference_env_vars(
    sftp_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"{sftp_server.url}/data/env-{os.getpid()}"
    for k, v in sftp_server.env().items():
        monkeypatch.setenv(k, v)
    store = open_store(url, retry=FAST)  # key and known hosts from COMPOSER_SFTP_*
    try:
        await store.put("e.bin", b"from env")
        assert await store.get_range("e.bin", 5) == b"env"
        assert store.url_for("e.bin") == f"{url}/e.bin"
    finally:
        await store.aclose()


async def test_sftp_wrong_key_is_access_denied(sftp_server: Any, tmp_path: Any) -> None:
    import asyncssh

    other = asyncssh.generate_private_key("ssh-ed25519")
    other.write_private_key(str(tmp_path / "other"))
    store = open_store(
        f"{sftp_server.url}/data",
        retry=FAST,
        key_file=str(tmp_path / "other"),
        known_hosts=sftp_server.known_hosts,
    )
    try:
        with pytest.raises(AccessDeniedError) as ei:
            await store.head("x.bin")
        assert ei.value.retryable is False
    finally:
        await store.aclose()


async def test_sftp_unknown_host_key_is_refused(sftp_server: Any, tmp_path: Any) -> None:
    import asyncssh

    stranger = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    with open(tmp_path / "known_hosts", "w") as f:
        f.write(f"[127.0.0.1]:{sftp_server.port} {stranger}")
    store = open_store(
        f"{sftp_server.url}/data",
        retry=FAST,
        key_file=sftp_server.key_file,
        known_hosts=str(tmp_path / "known_hosts"),
    )
    try:
        with pytest.raises(AccessDeniedError, match="COMPOSER_SFTP_KNOWN_HOSTS_FILE"):
            await store.head("x.bin")
    finally:
        await store.aclose()


async def test_sftp_lost_connection_is_retried(sftp_server: Any) -> None:
    store = open_store(f"{sftp_server.url}/data/lost", retry=FAST, **sftp_server.store_options())
    try:
        await store.put("l.bin", BLOB)
        assert await store.get_range("l.bin", 7, 70_000) == BLOB[7:70_000]
        sftp_server.drop_connections()  # the server goes away between two reads
        assert await store.get_range("l.bin", 100, 2_000_000) == BLOB[100:2_000_000]
        assert (await store.head("l.bin")).size == len(BLOB)
    finally:
        await store.aclose()


async def test_sftp_conditional_writes(sftp_server: Any) -> None:
    store = open_store(f"{sftp_server.url}/data/cond", retry=FAST, **sftp_server.store_options())
    try:
        await store.delete("k.bin")
        version = await store.put_if("k.bin", b"first")
        assert version == (await store.head("k.bin")).etag
        with pytest.raises(ObjectChangedError, match="already exists"):
            await store.put_if("k.bin", b"second")
        assert await store.get_range("k.bin") == b"first"
        with pytest.raises(StorageError, match=r"expect=\) is not supported over SFTP"):
            await store.put_if("k.bin", b"third", expect=version)
        with pytest.raises(StorageError, match=r"expect=\) is not supported over SFTP"):
            await store.delete("k.bin", expect=version)
        assert [x.key async for x in store.list()] == ["k.bin"]  # no temporary file left
        await store.put("k.bin", b"replaced")
        with pytest.raises(ObjectChangedError):  # a read conditioned on the old identity
            await store.get_range("k.bin", etag=version)
    finally:
        await store.aclose()


def test_sftp_url_forms() -> None:
    from astream.storage.sftp import parse_sftp_url

    assert parse_sftp_url("sftp://u:p%40ss@h.example:2222/a/b/") == (
        "u",
        "p@ss",
        "h.example",
        2222,
        "/a/b",
    )
    assert parse_sftp_url("sftp://h/") == (None, None, "h", 22, "/")
    assert parse_sftp_url("sftp://u@[::1]:23/x")[2:4] == ("::1", 23)
    with pytest.raises(ConfigError, match="key_file"):
        open_store("sftp://u@h/x", key_file="/nonexistent/key")
    store = open_store("sftp://u:secret@h:22/x")
    assert "secret" not in store.url and "secret" not in store.url_for("k")


# -- ADLS Gen2 -------------------------------------------------------------------------------


async def test_adls_reads_the_blob_endpoint_with_the_reference_env_vars(
    adls_filesystem: str, azure_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("AZURE_STORAGE_KEY", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_ACCOUNT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_ACCOUNT_ACCESS_KEY", AZURITE_KEY)
    url = f"azure-dl://{adls_filesystem}@devstoreaccount1.dfs.core.windows.net/env"
    store = open_store(url, retry=FAST, endpoint=azure_server.blob_endpoint)
    try:
        await store.put("d/x.bin", b"lake")
        assert await store.get_range("d/x.bin") == b"lake"
        assert store.url_for("d/x.bin") == f"{url}/d/x.bin"
        assert [x.key async for x in store.list("d/")] == ["d/x.bin"]
    finally:
        await store.aclose()
    monkeypatch.setenv("AZURE_ACCOUNT_NAME", "devstoreaccount1")  # the short form's account
    short = open_store(
        f"azure-dl://{adls_filesystem}/env", retry=FAST, endpoint=azure_server.blob_endpoint
    )
    try:
        assert await short.get_range("d/x.bin", 1) == b"ake"
    finally:
        await short.aclose()


async def test_adls_wrong_key_is_access_denied(adls_filesystem: str, azure_server: Any) -> None:
    bad = "A" * 86 + "=="
    url = f"azure-dl://{adls_filesystem}@devstoreaccount1.dfs.core.windows.net/bad"
    store = open_store(url, retry=FAST, endpoint=azure_server.blob_endpoint, account_key=bad)
    try:
        with pytest.raises(AccessDeniedError):
            await store.get_range("x.bin")
    finally:
        await store.aclose()


def test_adls_url_forms() -> None:
    from astream.storage.adls import parse_adls_url

    assert parse_adls_url("azure-dl://fs@acct.dfs.core.windows.net/a/b") == (
        "fs",
        "acct.dfs.core.windows.net",
        "a/b",
    )
    with pytest.raises(ConfigError, match="dfs"):
        open_store("azure-dl://fs@acct.blob.core.windows.net/a", account_key=AZURITE_KEY)
    with pytest.raises(ConfigError, match="connection_string is not an azure-dl"):
        open_store("azure-dl://fs@acct.dfs.core.windows.net/a", connection_string="x")


# -- OCI -------------------------------------------------------------------------------------


async def test_oci_signs_with_customer_secret_keys(s3_auth_server: Any) -> None:
    bucket = f"oci-{os.getpid()}"
    s3_auth_server.create_bucket(bucket)
    keys = {
        "access_key_id": s3_auth_server.access_key_id,
        "secret_access_key": s3_auth_server.secret_access_key,
    }
    opts = {"endpoint_url": s3_auth_server.url, "region": "us-ashburn-1"}
    store = open_store(f"oci://{bucket}@ns/p", retry=FAST, **opts, **keys)
    try:
        await store.put("o.bin", b"oracle")
        assert await store.get_range("o.bin", 2) == b"acle"
        assert store.url_for("o.bin") == f"oci://{bucket}@ns/p/o.bin"
    finally:
        await store.aclose()
    wrong = {**keys, "secret_access_key": "not-the-secret"}
    store = open_store(f"oci://{bucket}@ns/p", retry=FAST, **opts, **wrong)
    try:
        with pytest.raises(AccessDeniedError):
            await store.get_range("o.bin")
    finally:
        await store.aclose()


def test_oci_endpoint_from_url_and_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    for name in ("OCI_REGION", "OCI_NAMESPACE", "OCI_CLI_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OCI_CONFIG_FILE", str(tmp_path / "config"))
    with pytest.raises(ConfigError, match="no OCI region"):
        open_store("oci://b@ns/p")
    with open(tmp_path / "config", "w") as f:
        f.write("[DEFAULT]\nuser=ocid1.user\nregion=us-phoenix-1\n")
    store: Any = open_store("oci://b@ns/p")
    raw = store.raw
    assert raw._s.endpoint_url == "https://ns.compat.objectstorage.us-phoenix-1.oraclecloud.com"
    assert raw._s.region == "us-phoenix-1" and raw._s.path_style
    with pytest.raises(ConfigError, match="no OCI namespace"):
        open_store("oci://b/p")
    monkeypatch.setenv("OCI_NAMESPACE", "envns")
    assert open_store("oci://b/p").raw._s.endpoint_url.startswith("https://envns.")  # type: ignore[attr-defined]


async def test_sftp_refused_connect_is_transient(sftp_server: Any) -> None:
    from astream.testing import free_port

    store = open_store(
        f"sftp://tester@127.0.0.1:{free_port()}/data", retry=ONE_TRY, **sftp_server.store_options()
    )
    try:
        with pytest.raises(StorageError) as ei:
            await store.get_range("x.bin")
        assert ei.value.retryable is True and "connection failed" in str(ei.value)
    finally:
        await store.aclose()
    with pytest.raises(ConfigError, match="bad option for sftp://"):
        open_store("sftp://u@h/x", passphrase="p")
