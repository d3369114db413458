"""Issue 7.6: credentials never appear in str()/repr() of stores, datasets and the errors they
raise, nor in any log record (captured at DEBUG, every logger). Secrets here are fake."""

from __future__ import annotations

import json
import logging
import pickle
from typing import Any

import pytest

from astream import StreamingDataset, bridge
from astream.errors import AccessDeniedError, ObjectNotFoundError, StorageError
from astream.storage import open_store
from astream.testing import AzuriteServer

from .conftest import check_samples, write_ds

AWS_KEY_ID = "AKIAFAKEASTREAM12345"
AWS_SECRET = "fakeSecret/astream+DoNotLeak0123456789abcd"
AZ_KEY = "ZmFrZS1henVyZS1rZXktYXN0cmVhbS1kby1ub3QtbGVhaw=="
GCS_PRIVATE = "-----BEGIN PRIVATE KEY-----\\nFAKEastreamGCSdoNotLeak\\n-----END PRIVATE KEY-----\\n"
SECRETS = [AWS_SECRET, AZ_KEY, "FAKEastreamGCSdoNotLeak", "hunter2-astream"]


def assert_clean(*things: Any, caplog: pytest.LogCaptureFixture | None = None) -> None:
    texts = []
    for t in things:
        texts += [str(t), repr(t)]
        if isinstance(t, BaseException):
            texts.append(repr(pickle.loads(pickle.dumps(t))))
    if caplog is not None:
        texts += [r.getMessage() for r in caplog.records]
        texts += [str(r.args) for r in caplog.records]
    for secret in SECRETS:
        for text in texts:
            assert secret not in text, f"secret leaked: {text[:300]}"


def _fails(fn: Any) -> BaseException:
    try:
        fn()
    except StorageError as exc:
        return exc
    raise AssertionError("expected a StorageError")


def test_s3_keys_never_shown(
    s3_server: Any, s3_bucket: str, monkeypatch: Any, caplog: Any, tmp_path: Any
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    caplog.set_level(logging.DEBUG)
    store = open_store(f"{s3_bucket}/nothing", **s3_server.store_options())
    err = _fails(lambda: bridge.run(store.get_range("index.json")))
    assert isinstance(err, ObjectNotFoundError)
    err2 = _fails(
        lambda: StreamingDataset(
            remote=f"{s3_bucket}/nothing", local=str(tmp_path / "c"), batch_size=2
        )
    )
    assert_clean(store, err, err2, caplog=caplog)


def test_azure_key_and_connection_string_never_shown(
    azure_server: AzuriteServer, azure_container: str, caplog: Any, tmp_path: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    conn = azure_server.connection_string().replace(
        azure_server.connection_string().split("AccountKey=")[1].split(";")[0], AZ_KEY
    )
    opts = {"connection_string": conn}
    store = open_store(f"{azure_container}/x", **opts)
    err = _fails(lambda: bridge.run(store.get_range("index.json")))
    assert isinstance(err, AccessDeniedError)  # Azurite rejects the fake key's signature
    err2 = _fails(
        lambda: StreamingDataset(
            remote=f"{azure_container}/x", local=str(tmp_path / "c"), storage_options=opts
        )
    )
    acct = open_store(
        f"{azure_container}/x",
        account_name="devstoreaccount1",
        account_key=AZ_KEY,
        endpoint=azure_server.blob_endpoint,
    )
    err3 = _fails(lambda: bridge.run(acct.get_range("index.json")))
    assert_clean(store, acct, err, err2, err3, caplog=caplog)


def test_gcs_service_file_never_shown(
    gcs_server: Any, gcs_bucket: str, caplog: Any, tmp_path: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    sa = tmp_path / "sa.json"
    sa.write_text(
        json.dumps(
            {
                "type": "service_account",
                "client_email": "x@example.invalid",
                "private_key": GCS_PRIVATE.replace("\\n", "\n"),
                "token_uri": gcs_server.url + "/token",
            }
        )
    )
    opts = {"service_file": str(sa), **gcs_server.store_options()}
    store = open_store(f"{gcs_bucket}/missing", **opts)
    err = _fails(lambda: bridge.run(store.get_range("index.json")))
    assert isinstance(err, ObjectNotFoundError)
    assert_clean(store, err, caplog=caplog)


def test_http_url_password_never_shown(
    http_server: Any, http_root: str, caplog: Any, tmp_path: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    base = http_server.url.replace("http://", "http://user:hunter2-astream@")
    write_ds(f"{http_root}/authds", 20, size_limit=4000)
    ds = StreamingDataset(remote=f"{base}/authds", local=str(tmp_path / "ok"), batch_size=2)
    check_samples(list(ds), range(20))
    url = base + "/nope"
    store = open_store(url)
    err = _fails(lambda: bridge.run(store.get_range("index.json")))
    assert isinstance(err, ObjectNotFoundError)
    err2 = _fails(lambda: StreamingDataset(remote=url, local=str(tmp_path / "c"), batch_size=2))
    assert_clean(store, err, err2, ds, caplog=caplog)
    assert "***@127.0.0.1" in repr(ds)
