"""``gs://`` with the reference's ``GCS_KEY``/``GCS_SECRET``: GCS's XML API, signed with the HMAC
keys, asserted on a gateway that recomputes every signature (astream.testing.gcsxml) in front
of fake-gcs-server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from astream.errors import AccessDeniedError, ObjectNotFoundError
from astream.storage import open_store
from astream.storage.gcshmac import GCS_XML_ENDPOINT, GcsHmacBackend
from astream.testing.gcsxml import GcsXmlGateway

from .conftest import FAST

KEY, SECRET = "GOOG1EHMACKEYFORTESTS", "hmac-secret-for-tests"


@pytest.fixture(scope="module")
def gateway(gcs_server: Any) -> Iterator[GcsXmlGateway]:
    gw = GcsXmlGateway(gcs_server.url, KEY, SECRET).start()
    yield gw
    gw.stop()


@pytest.fixture
def bucket(gcs_server: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"hmac-{uuid.uuid4().hex[:10]}"
    gcs_server.create_bucket(name)
    monkeypatch.setenv("GCS_KEY", KEY)
    monkeypatch.setenv("GCS_SECRET", SECRET)
    return name


async def test_reads_lists_and_writes_by_hmac_keys(bucket: str, gateway: GcsXmlGateway) -> None:
    gateway.requests.clear()
    store: Any = open_store(f"gs://{bucket}/h", retry=FAST, endpoint_url=gateway.url)
    assert isinstance(store.raw, GcsHmacBackend)
    data = bytes(range(256)) * 40
    keys = {"a/1.bin": data, "a/2.bin": b"two", "odd/a+b c.bin": b"odd", "ab.bin": b"x"}
    try:
        for k, v in keys.items():
            await store.put(k, v)
        assert await store.get_range("a/1.bin") == data
        assert await store.get_range("a/1.bin", 300, 5000) == data[300:5000]
        assert await store.get_range("odd/a+b c.bin", 1) == b"dd"
        assert (await store.head("a/1.bin")).size == len(data)
        assert [x.key async for x in store.list("a")] == ["a/1.bin", "a/2.bin", "ab.bin"]
        assert [x.size async for x in store.list("odd/")] == [3]
        with pytest.raises(ObjectNotFoundError):
            await store.get_range("missing.bin")
        assert store.url_for("a/1.bin") == f"gs://{bucket}/h/a/1.bin"
    finally:
        await store.aclose()
    methods = {m for m, _, _ in gateway.requests}
    assert methods >= {"PUT", "GET", "HEAD"}
    for _, path, auth in gateway.requests:  # every one signed by the HMAC key, path-style
        assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={KEY}/"), path
        assert "/auto/s3/aws4_request" in auth
        assert path.startswith(f"/{bucket}")


async def test_a_wrong_secret_is_refused(
    bucket: str, gateway: GcsXmlGateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GCS_SECRET", "not-the-secret")
    store = open_store(f"gs://{bucket}/h", retry=FAST, endpoint_url=gateway.url)
    try:
        with pytest.raises(AccessDeniedError, match="SignatureDoesNotMatch"):
            await store.get_range("a.bin")
    finally:
        await store.aclose()


def test_without_both_keys_the_json_api_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    from astream.storage.gcs import GcsBackend

    monkeypatch.setenv("GCS_KEY", KEY)
    monkeypatch.delenv("GCS_SECRET", raising=False)
    assert isinstance(open_store("gs://b/p").raw, GcsBackend)  # type: ignore[attr-defined]
    monkeypatch.setenv("GCS_SECRET", SECRET)
    raw: Any = open_store("gs://b/p").raw  # type: ignore[attr-defined]
    assert isinstance(raw, GcsHmacBackend)
    assert raw._s.endpoint_url == GCS_XML_ENDPOINT and raw._s.region == "auto"
