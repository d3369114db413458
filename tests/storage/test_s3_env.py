"""The reference's S3 environment variables, asserted on what reaches a signature-checking
moto server (through a recording proxy): ``MOSAICML_STREAMING_AWS_REQUESTER_PAYS`` on the direct
and the SDK path, ``S3_CANNED_ACL`` on uploads."""

from __future__ import annotations

import os
import random
import uuid
from typing import Any

import pytest

from astream.storage import open_store
from astream.testing.recorder import RecordingProxy

from .conftest import FAST


@pytest.fixture
def recorder(s3_auth_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    for k, v in s3_auth_server.env().items():
        monkeypatch.setenv(k, v)
    for name in ("S3_ENDPOINT_URL", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    proxy = RecordingProxy(s3_auth_server.url).start()
    yield proxy
    proxy.stop()


def new_bucket(server: Any) -> str:
    name = f"env-{uuid.uuid4().hex[:10]}"
    server.create_bucket(name)
    return name


def signed(r: Any) -> list[str]:
    auth = r.headers.get("Authorization", "")
    return auth.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";") if auth else []


def sdk_client(server: Any) -> Any:
    import botocore.session

    return botocore.session.get_session().create_client(
        "s3",
        region_name="us-east-1",
        endpoint_url=server.url,
        aws_access_key_id=server.access_key_id,
        aws_secret_access_key=server.secret_access_key,
    )


async def exercise(store: Any) -> None:
    await store.put("a/x.bin", b"0123456789")
    assert await store.get_range("a/x.bin", 2, 5) == b"234"
    assert await store.get_range("a/x.bin") == b"0123456789"
    assert (await store.head("a/x.bin")).size == 10
    assert [x.key async for x in store.list("a/")] == ["a/x.bin"]


@pytest.mark.parametrize("direct", [True, False])
async def test_requester_pays_buckets_send_the_header(
    s3_auth_server: Any, recorder: RecordingProxy, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    paying, other = new_bucket(s3_auth_server), new_bucket(s3_auth_server)
    monkeypatch.setenv("MOSAICML_STREAMING_AWS_REQUESTER_PAYS", f"unrelated, {paying} ,x")
    opts = {"endpoint_url": recorder.url, "region": "us-east-1", "path_style": True}
    store = open_store(f"s3://{paying}/rp", retry=FAST, direct=direct, **opts)
    try:
        await exercise(store)
    finally:
        await store.aclose()
    sent = recorder.sent()
    agents = {r.headers.get("User-Agent", "").split("/")[0].lower() for r in sent}
    assert ("astream" in agents) is direct  # reads by astream's own requests, or the SDK's
    assert {r.method for r in sent} >= {"PUT", "GET", "HEAD"}
    for r in sent:
        assert r.headers.get("x-amz-request-payer") == "requester", (r.method, r.path)
        assert "x-amz-request-payer" in signed(r)  # moto checked the signature over it
    recorder.requests.clear()
    store = open_store(f"s3://{other}/rp", retry=FAST, direct=direct, **opts)
    try:
        await exercise(store)
    finally:
        await store.aclose()
    assert recorder.sent() and all("x-amz-request-payer" not in r.headers for r in recorder.sent())


async def test_canned_acl_on_every_upload(
    s3_auth_server: Any, recorder: RecordingProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    bucket = new_bucket(s3_auth_server)
    big = tmp_path / "big.bin"
    big.write_bytes(random.Random(1).randbytes(6 << 20))
    opts = {"endpoint_url": recorder.url, "region": "us-east-1", "path_style": True}
    opts |= {"multipart_threshold": 5 << 20, "part_size": 5 << 20}
    monkeypatch.setenv("S3_CANNED_ACL", "public-read")
    store = open_store(f"s3://{bucket}/acl", retry=FAST, **opts)
    try:
        await store.put("small.bin", b"small")
        await store.put_file("big.bin", str(big))
        await store.put_if("new.bin", b"new")
    finally:
        await store.aclose()
    creates = [
        r for r in recorder.sent() if r.method in ("PUT", "POST") and "partNumber" not in r.path
    ]
    parts = [r for r in recorder.sent() if "partNumber=" in r.path]
    assert len(creates) >= 4 and parts  # 2 PutObject, CreateMultipartUpload, Complete...
    for r in creates:
        if "uploadId=" in r.path:  # CompleteMultipartUpload carries no ACL
            continue
        assert r.headers.get("x-amz-acl") == "public-read", r.path
        assert "x-amz-acl" in signed(r)
    assert all("x-amz-acl" not in r.headers for r in parts)
    client = sdk_client(s3_auth_server)
    try:
        for key in ("acl/small.bin", "acl/big.bin", "acl/new.bin"):
            grants = client.get_object_acl(Bucket=bucket, Key=key)["Grants"]
            uris = {g["Grantee"].get("URI", "") for g in grants if g["Permission"] == "READ"}
            assert any(u.endswith("/global/AllUsers") for u in uris), key
        monkeypatch.delenv("S3_CANNED_ACL")
        store = open_store(f"s3://{bucket}/acl", retry=FAST, **opts)
        try:
            await store.put("private.bin", b"p")
        finally:
            await store.aclose()
        grants = client.get_object_acl(Bucket=bucket, Key="acl/private.bin")["Grants"]
        assert not any("AllUsers" in g["Grantee"].get("URI", "") for g in grants)
    finally:
        client.close()
    assert os.environ.get("S3_CANNED_ACL") is None
