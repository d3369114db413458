"""``MotoServer(auth=True)`` really checks AWS Signature V4: the created keys work, and a wrong
secret, an unknown key, a signed header or query that differs from the one sent are refused.

Raw requests are signed with botocore's ``S3SigV4Auth`` and sent with ``http.client``, so the
bytes on the wire are exactly the ones given (the *signed* target and headers can differ from
the *sent* ones). Observed moto 5.2 behaviour worth knowing, each pinned by a test below:

* moto recomputes the signature from the path and query string *as sent*: it does not decode and
  re-encode them. A signer whose signed text differs from what it sends is caught; a signer that
  encodes wrongly but consistently (``+`` for a space, ``~`` as ``%7E``, a raw ``=`` in a key) is
  accepted, where AWS would refuse it.
* ``x-amz-content-sha256`` is trusted, not compared with the body; changing it after signing
  is caught because it is a signed header.
* an IAM user's key with ``X-Amz-Security-Token`` is refused: 400 ``InvalidToken``.
* an unsigned request, once the setup allowance is used, is refused: 403 for an existing
  object, 500 for the rest (moto looks for an ``Authorization`` header that is not there).
"""

from __future__ import annotations

import hashlib
import http.client
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import boto3
import botocore.config
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from astream.errors import AccessDeniedError, StorageError
from astream.storage import open_store
from astream.testing import MotoServer

# a key with a space, '+', '=', '~', '%', a non-ASCII and a non-Latin character
ODD_KEY = "dir/a b+c=d~e%f\u00e9\u4e2d.bin"
BODY = b"0123456789"


@dataclass
class Reply:
    status: int
    code: str
    body: bytes


@pytest.fixture(scope="module")
def bucket(s3_auth_server: MotoServer) -> Iterator[str]:
    name = f"auth-{uuid.uuid4().hex[:12]}"
    s3_auth_server.create_bucket(name)
    s3 = client(s3_auth_server)
    s3.put_object(Bucket=name, Key=ODD_KEY, Body=BODY)
    s3.put_object(Bucket=name, Key="dir/z", Body=b"z")
    yield name


def client(srv: MotoServer, key_id: str | None = None, secret: str | None = None) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=srv.url,
        region_name="us-east-1",
        aws_access_key_id=key_id or srv.access_key_id,
        aws_secret_access_key=secret or srv.secret_access_key,
        config=botocore.config.Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def send(
    srv: MotoServer,
    method: str,
    target: str,
    *,
    sent_target: str | None = None,
    headers: dict[str, str] | None = None,
    sent_headers: dict[str, str] | None = None,
    body: bytes = b"",
    secret: str | None = None,
    token: str | None = None,
) -> Reply:
    """Sign ``method target`` (path and query, already encoded) with ``headers``, then send
    ``sent_target`` (default: the same) with the signed headers updated by ``sent_headers``."""
    creds = Credentials(srv.access_key_id, secret or srv.secret_access_key, token)
    req = AWSRequest(method=method, url=srv.url + target, headers=dict(headers or {}), data=body)
    S3SigV4Auth(creds, "s3", "us-east-1").add_auth(req)
    wire = dict(req.headers.items())
    wire.update(sent_headers or {})
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request(method, sent_target or target, body=body or None, headers=wire)
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    code = data.split(b"<Code>")[1].split(b"</Code>")[0].decode() if b"<Code>" in data else ""
    return Reply(resp.status, code, data)


def enc(value: str) -> str:
    """SigV4's encoding of a query value (RFC 3986 unreserved characters kept)."""
    return quote(value, safe="-_.~")


def obj_path(bucket: str, key: str) -> str:
    return f"/{bucket}/{quote(key, safe='/~')}"


# --- the SDK with the created keys, and with wrong ones ---------------------------------------


def test_created_keys_allow_put_get_list_head(s3_auth_server: MotoServer, bucket: str) -> None:
    s3 = client(s3_auth_server)
    s3.put_object(Bucket=bucket, Key="sdk/one", Body=b"hello")
    got = s3.get_object(Bucket=bucket, Key="sdk/one")
    assert got["Body"].read() == b"hello"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="sdk/")
    assert [o["Key"] for o in listed["Contents"]] == ["sdk/one"]
    head = s3.head_object(Bucket=bucket, Key="sdk/one")
    assert head["ContentLength"] == 5


def _error(exc: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    resp = exc.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"]["Code"]


def test_wrong_secret_is_signature_does_not_match(s3_auth_server: MotoServer, bucket: str) -> None:
    wrong = s3_auth_server.secret_access_key[:-1] + (
        "A" if s3_auth_server.secret_access_key[-1] != "A" else "B"
    )
    s3 = client(s3_auth_server, secret=wrong)
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key=ODD_KEY)
    assert _error(ei) == (403, "SignatureDoesNotMatch")
    with pytest.raises(ClientError) as ei:
        s3.list_objects_v2(Bucket=bucket, Prefix="dir/")
    assert _error(ei) == (403, "SignatureDoesNotMatch")
    # HEAD has no body, so botocore only sees the status
    with pytest.raises(ClientError) as ei:
        s3.head_object(Bucket=bucket, Key=ODD_KEY)
    assert _error(ei) == (403, "403")


def test_unknown_access_key_is_invalid_access_key_id(
    s3_auth_server: MotoServer, bucket: str
) -> None:
    s3 = client(s3_auth_server, key_id="AKIAUNKNOWNKEY000000", secret="whatever")
    with pytest.raises(ClientError) as ei:
        s3.get_object(Bucket=bucket, Key=ODD_KEY)
    assert _error(ei) == (403, "InvalidAccessKeyId")


def test_unsigned_requests_are_refused(s3_auth_server: MotoServer, bucket: str) -> None:
    def status(method: str, target: str) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", s3_auth_server.port, timeout=30)
        try:
            conn.request(method, target, body=b"" if method == "PUT" else None)
            resp = conn.getresponse()
            resp.read()
            return resp.status
        finally:
            conn.close()

    # observed: an existing object is 403 (empty body); anything else is a 500, since moto
    # looks for the Authorization header that is not there
    assert status("GET", f"/{bucket}/dir/z") == 403
    assert status("HEAD", f"/{bucket}/dir/z") == 403
    assert status("GET", f"/{bucket}/dir/missing") == 500
    assert status("GET", f"/{bucket}?list-type=2") == 500
    assert status("PUT", f"/{bucket}/dir/new") == 500


# --- hand-signed requests: signed and sent bytes differ --------------------------------------


def test_hand_signed_get_and_head(s3_auth_server: MotoServer, bucket: str) -> None:
    path = obj_path(bucket, ODD_KEY)
    assert send(s3_auth_server, "GET", path).body == BODY
    assert send(s3_auth_server, "HEAD", path).status == 200
    assert send(s3_auth_server, "HEAD", path, secret="wrong").status == 403
    # the path as signed differs from the one sent ('=' raw instead of %3D)
    r = send(s3_auth_server, "GET", path, sent_target=path.replace("%3D", "="))
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")


def test_range_signed_differs_from_sent(s3_auth_server: MotoServer, bucket: str) -> None:
    path = obj_path(bucket, ODD_KEY)
    r = send(s3_auth_server, "GET", path, headers={"Range": "bytes=0-3"})
    assert (r.status, r.body) == (206, b"0123")
    r = send(
        s3_auth_server,
        "GET",
        path,
        headers={"Range": "bytes=0-3"},
        sent_headers={"Range": "bytes=0-5"},
    )
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")
    # a Range that is sent but not signed is accepted (as by AWS: only host and x-amz-* must be)
    r = send(s3_auth_server, "GET", path, sent_headers={"Range": "bytes=0-5"})
    assert (r.status, r.body) == (206, b"012345")


def test_list_query_encoding_is_checked(s3_auth_server: MotoServer, bucket: str) -> None:
    srv = s3_auth_server
    # the SDK's own encoding of prefix / start-after with ' ', '+', '=', '~', '%', unicode
    s3 = client(srv)
    listed = s3.list_objects_v2(Bucket=bucket, Prefix="dir/a b+c=d~e%f\u00e9", StartAfter="dir/a")
    assert [o["Key"] for o in listed["Contents"]] == [ODD_KEY]
    good = f"/{bucket}?list-type=2&prefix={enc('dir/a b+c=d~e')}&start-after={enc(ODD_KEY[:-1])}"
    r = send(srv, "GET", good)
    assert r.status == 200
    assert b"<KeyCount>1</KeyCount>" in r.body
    # each wrong variant: signed with one encoding, sent with another
    variants = {
        "space as +": good.replace("%20", "+"),
        "slash not encoded": good.replace("%2F", "/"),
        "tilde encoded": good.replace("~", "%7E"),
        "equals not encoded": good.replace("%3D", "=", 1),
        "plus not encoded": good.replace("%2B", "+"),
        "lower-case hex": good.replace("%C3%A9", "%c3%a9"),
    }
    for name, signed in variants.items():
        assert signed != good, name
        r = send(srv, "GET", signed, sent_target=good)
        assert (r.status, r.code) == (403, "SignatureDoesNotMatch"), name


def test_continuation_token_is_signed(s3_auth_server: MotoServer, bucket: str) -> None:
    s3 = client(s3_auth_server)
    first = s3.list_objects_v2(Bucket=bucket, Prefix="dir/", MaxKeys=1)
    token = first["NextContinuationToken"]
    target = f"/{bucket}?continuation-token={enc(token)}&list-type=2&max-keys=1&prefix=dir%2F"
    r = send(s3_auth_server, "GET", target)
    assert r.status == 200 and b"<Key>dir/z</Key>" in r.body
    other = target.replace("max-keys=1", "max-keys=2")
    r = send(s3_auth_server, "GET", other, sent_target=target)
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")


def test_moto_trusts_the_sent_encoding(s3_auth_server: MotoServer, bucket: str) -> None:
    """Observed leniency: an encoding that is wrong for SigV4 but the same in the signature and
    on the wire is accepted, so these tests catch a signer that signs other bytes than it
    sends, not one that encodes consistently wrong (compare its canonical request with
    botocore's for that)."""
    srv = s3_auth_server
    # '+' for a space and a raw '=' in the query
    r = send(srv, "GET", f"/{bucket}?list-type=2&prefix=dir/a+b%2Bc=d~e")
    assert r.status == 200
    # '~' as %7E and a raw '=' in the path
    assert send(srv, "GET", obj_path(bucket, ODD_KEY).replace("~", "%7E")).body == BODY
    assert send(srv, "GET", obj_path(bucket, ODD_KEY).replace("%3D", "=")).body == BODY


def test_content_sha256_is_trusted_not_checked(s3_auth_server: MotoServer, bucket: str) -> None:
    srv = s3_auth_server
    other = hashlib.sha256(b"not the body").hexdigest()
    # a signed hash that is not the body's is accepted, and the body is stored
    r = send(
        srv, "PUT", f"/{bucket}/sha/wrong", body=b"abc", headers={"X-Amz-Content-SHA256": other}
    )
    assert r.status == 200
    assert send(srv, "GET", f"/{bucket}/sha/wrong").body == b"abc"
    r = send(
        srv,
        "PUT",
        f"/{bucket}/sha/unsigned",
        body=b"abc",
        headers={"X-Amz-Content-SHA256": "UNSIGNED-PAYLOAD"},
    )
    assert r.status == 200
    # but the header is signed: changing it after signing is caught
    r = send(
        srv,
        "PUT",
        f"/{bucket}/sha/changed",
        body=b"abc",
        sent_headers={"X-Amz-Content-SHA256": other},
    )
    assert (r.status, r.code) == (403, "SignatureDoesNotMatch")


def test_session_token_with_user_key_is_invalid_token(
    s3_auth_server: MotoServer, bucket: str
) -> None:
    r = send(s3_auth_server, "GET", obj_path(bucket, ODD_KEY), token="some-session-token")
    assert (r.status, r.code) == (400, "InvalidToken")


# --- astream's own S3 store -------------------------------------------------------------------


def _use_keys(monkeypatch: pytest.MonkeyPatch, srv: MotoServer, secret: str | None = None) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", srv.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret or srv.secret_access_key)
    # the suite's fake AWS_SESSION_TOKEN would be sent, and moto refuses it with a user key
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)


async def test_astream_store_round_trip(
    s3_auth_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_keys(monkeypatch, s3_auth_server)
    store = open_store(f"s3://{bucket}/p", **s3_auth_server.store_options())
    try:
        await store.put("a b+c=d~e\u00e9.bin", b"payload")
        assert await store.get_range("a b+c=d~e\u00e9.bin") == b"payload"
        assert await store.get_range("a b+c=d~e\u00e9.bin", 1, 4) == b"ayl"
        assert (await store.head("a b+c=d~e\u00e9.bin")).size == 7
        keys = [info.key async for info in store.list("")]
        assert "a b+c=d~e\u00e9.bin" in keys
    finally:
        await store.aclose()


async def test_astream_wrong_secret_is_access_denied(
    s3_auth_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_keys(monkeypatch, s3_auth_server, secret="not-the-secret")
    store = open_store(f"s3://{bucket}", **s3_auth_server.store_options())
    try:
        with pytest.raises(AccessDeniedError):
            await store.get_range(ODD_KEY)
    finally:
        await store.aclose()


async def test_astream_with_session_token_is_refused(
    s3_auth_server: MotoServer, bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_keys(monkeypatch, s3_auth_server)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    store = open_store(f"s3://{bucket}", **s3_auth_server.store_options())
    try:
        with pytest.raises(StorageError) as ei:
            await store.get_range(ODD_KEY)
        # observed: a plain, non-retryable StorageError (a 400), not an AccessDeniedError
        assert type(ei.value) is StorageError
        assert "HTTP 400 InvalidToken" in str(ei.value)
        assert ei.value.retryable is False
    finally:
        await store.aclose()
