"""S3 reads signed and sent by astream itself (``astream.storage.s3`` + ``sigv4``).

The oracle for what goes on the wire is botocore: the same operation made by a botocore client
is captured before it is sent, and astream's path, query and ``Authorization`` must be the same
bytes. The real-server checks run on ``MotoServer(auth=True)``, which verifies every signature
(but trusts the encoding it receives: that is what the botocore comparison is for).
"""

from __future__ import annotations

import base64
import calendar
import functools
import hashlib
import ipaddress
import os
import subprocess
import sys
import textwrap
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import botocore.session
import pytest
from aiohttp import web
from botocore.config import Config
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from astream.errors import (
    AccessDeniedError,
    ConfigError,
    IntegrityError,
    ObjectChangedError,
    ObjectNotFoundError,
    StorageError,
)
from astream.storage import open_store
from astream.storage.s3 import S3Backend, _Target
from astream.storage.sigv4 import Credentials, encode_path, encode_query, sign
from astream.testing import MotoServer
from astream.testing.servers import ThreadedApp

ROOT = Path(__file__).resolve().parents[2]


class _Captured(Exception):
    def __init__(self, request: Any) -> None:
        self.request = request


@functools.lru_cache(maxsize=16)
def _client(region: str, token: str | None, endpoint: str | None) -> Any:
    """A botocore client that raises the signed request it was about to send."""
    session = botocore.session.get_session()
    client = session.create_client(
        "s3",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        aws_session_token=token,
        config=Config(retries={"total_max_attempts": 1}),
    )

    def capture(request: Any, **kwargs: Any) -> None:
        raise _Captured(request)

    client.meta.events.register("before-send.s3.*", capture)
    return client


def _botocore_request(
    op: str, params: dict[str, Any], region: str, token: str | None, endpoint: str | None
) -> Any:
    """The request a botocore client would send for ``op`` (signed), without sending it."""
    with pytest.raises(_Captured) as ei:
        getattr(_client(region, token, endpoint), op)(**params)
    return ei.value.request


def _same_as_botocore(req: Any, region: str, token: str | None) -> None:
    """Sign what botocore sent with astream's signer: the same ``Authorization``, byte for byte."""
    parts = urlsplit(req.url)
    auth = req.headers["Authorization"].decode()
    names = auth.split("SignedHeaders=")[1].split(",")[0].split(";")
    mine = {"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"}
    headers = {}
    for name in names:
        if name not in mine:
            v = req.headers[name]
            headers[name] = v.decode() if isinstance(v, bytes) else v
    stamp = req.headers["X-Amz-Date"]
    stamp = stamp.decode() if isinstance(stamp, bytes) else stamp
    now = calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%SZ"))
    creds = Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", token)
    # botocore sends its own parameter order and signs them sorted by name, then value
    query = "&".join(
        "=".join(p) for p in sorted(tuple(q.split("=", 1)) for q in parts.query.split("&") if q)
    )
    got = sign(req.method, parts.netloc, parts.path, query, headers, creds, region, now=now)
    assert got["Authorization"] == auth


_KEY_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=24,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=_KEY_TEXT,
    start=st.integers(0, 1 << 40),
    length=st.integers(1, 1 << 20),
    etag=st.none() | st.text("0123456789abcdef", min_size=32, max_size=32),
    token=st.none() | st.just("FQoGZXIvYXdzE//token+/="),
    region=st.sampled_from(["us-east-1", "eu-west-1", "ap-southeast-2"]),
)
@example(
    key="d/a b+c=d~e%f\u00e9\u4e2d", start=0, length=1, etag=None, token=None, region="us-east-1"
)
def test_ranged_get_is_signed_and_encoded_as_botocore(
    key: str, start: int, length: int, etag: str | None, token: str | None, region: str
) -> None:
    key = key.lstrip("/") or "k"
    params: dict[str, Any] = {
        "Bucket": "bucket",
        "Key": key,
        "Range": f"bytes={start}-{start + length - 1}",
    }
    if etag is not None:
        params["IfMatch"] = etag
    req = _botocore_request("get_object", params, region, token, "http://127.0.0.1:9000")
    assert urlsplit(req.url).path == encode_path(f"/bucket/{key}")
    _same_as_botocore(req, region, token)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=_KEY_TEXT,
    after=st.none() | _KEY_TEXT,
    token=st.none() | st.text(min_size=1, max_size=40),
    page=st.integers(1, 1000),
)
@example(prefix="d/a b+c=d~e%f\u00e9", after="d/a~/ +", token=None, page=2)
@example(prefix="p", after=None, token="tok~en+/= \u00e9", page=1000)
def test_listing_query_is_encoded_and_signed_as_botocore(
    prefix: str, after: str | None, token: str | None, page: int
) -> None:
    params: dict[str, Any] = {"Bucket": "bucket", "Prefix": prefix, "MaxKeys": page}
    query = {"list-type": "2", "prefix": prefix, "max-keys": str(page), "encoding-type": "url"}
    if token is not None:
        params["ContinuationToken"] = token
        query["continuation-token"] = token
    elif after is not None:
        params["StartAfter"] = after
        query["start-after"] = after
    req = _botocore_request("list_objects_v2", params, "us-east-1", None, "http://127.0.0.1:9000")
    assert urlsplit(req.url).path == _backend(region="us-east-1")._path("")
    # sent in botocore's order, signed sorted: astream sends the sorted (canonical) form
    sent = sorted(tuple(q.split("=", 1)) for q in urlsplit(req.url).query.split("&"))
    assert "&".join("=".join(p) for p in sent) == encode_query(query)
    _same_as_botocore(req, "us-east-1", None)


@pytest.mark.parametrize(
    ("bucket", "region", "path_style"),
    [
        ("my-bucket", "eu-west-1", False),
        ("my-bucket", "eu-west-1", True),
        ("my-bucket", "us-east-1", False),
        ("my-bucket", "us-east-1", True),
        ("my.dotted.bucket", "us-east-1", False),
        ("bucket", "cn-north-1", False),
        ("ab-1", "ap-southeast-2", False),
    ],
)
def test_aws_addressing_reaches_the_host_botocore_would_sign_for(
    bucket: str, region: str, path_style: bool
) -> None:
    t = _Target(bucket, None, region, path_style)
    style = "path" if path_style else "virtual"
    session = botocore.session.get_session()
    client = session.create_client(
        "s3",
        region_name=region,
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=Config(s3={"addressing_style": style}),
    )
    url = client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k/x y~z"})
    parts = urlsplit(url)
    assert (t.scheme, t.host) == (parts.scheme, parts.netloc)
    assert encode_path(f"{t.base}/k/x y~z") == parts.path


# --- which path a store takes -----------------------------------------------------------------


def _backend(**kw: Any) -> S3Backend:
    return S3Backend("s3://bucket/p", endpoint_url="http://127.0.0.1:1", **kw)


def test_a_virtual_hosted_listing_is_sent_to_the_bucket_root(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("S3_ENDPOINT_URL", raising=False)  # set by the suite's moto fixture
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    aws = S3Backend("s3://my-bucket/p", endpoint_url=None, region="eu-west-1")
    assert (aws._target.host, aws._path(""), aws._path("p/k x")) == (  # type: ignore[union-attr]
        "my-bucket.s3.eu-west-1.amazonaws.com",
        "/",
        "/p/k%20x",
    )


def test_static_environment_keys_go_direct_and_the_rest_through_the_sdk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    assert _backend().direct  # the suite's fake keys are in the environment
    assert _backend(direct=False).direct is False
    monkeypatch.setenv("AWS_PROFILE", "other")
    assert _backend().direct is False
    with pytest.raises(ConfigError, match=r"direct=True, but these credentials or settings"):
        _backend(direct=True)
    monkeypatch.delenv("AWS_PROFILE")
    (tmp_path / "config").write_text("[default]\nregion = eu-west-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    assert _backend().direct is False  # an AWS config file: only the SDK applies it
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert _backend().direct is False  # an access key without its secret: the SDK's chain
    assert _backend(unsigned=True).direct  # a public bucket needs no keys
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    assert _backend(unsigned=True).direct is False
    with pytest.raises(ConfigError, match=r"direct must be None, True or False, got 'yes'"):
        _backend(direct="yes")


# --- against a server that checks every signature --------------------------------------------


ODD = "dir/a b+c=d~e%f\u00e9\u4e2d.bin"


@pytest.fixture
def keyed(s3_auth_server: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A fresh bucket on the checking server, its keys in the environment (no session token:
    moto refuses one with a user's key), and no AWS config file."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3_auth_server.access_key_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3_auth_server.secret_access_key)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.delenv("AWS_SECURITY_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "absent"))
    name = f"direct-{uuid.uuid4().hex[:12]}"
    s3_auth_server.create_bucket(name)
    return name


async def test_direct_reads_on_a_checking_server(s3_auth_server: MotoServer, keyed: str) -> None:
    opts = s3_auth_server.store_options()
    writer = open_store(f"s3://{keyed}/root", direct=False, **opts)
    store = open_store(f"s3://{keyed}/root", direct=True, **opts, list_page_size=2)
    body = bytes(range(256)) * 40
    names = [ODD, "dir/b", "dir/c c", "dir/d+", "e"]
    try:
        for n in names:
            await writer.put(n, body)
        assert await store.get_range(ODD) == body  # whole: its stored CRC32 is checked
        assert await store.get_range(ODD, 5, 300) == body[5:300]
        assert await store.get_range(ODD, 10_000, 20_000) == body[10_000:]
        assert await store.get_range(ODD, 20_000, 30_000) == b""  # past the end: 416
        info = await store.head(ODD)
        assert (info.size, info.etag) == (len(body), (await writer.head(ODD)).etag)
        tail_info, tail = await store.raw.get_tail(ODD, 7)  # type: ignore[attr-defined]
        assert (tail_info.size, tail) == (len(body), body[-7:])
        listed = [o.key async for o in store.list("")]
        assert listed == sorted(names)
        assert [o.key async for o in store.list("dir/")] == sorted(n for n in names if "/" in n)
        page, token = await store.raw.list_page_after("", "dir/b", None)  # type: ignore[attr-defined]
        assert [o.key for o in page] == ["dir/c c", "dir/d+"] and token is not None
        with pytest.raises(ObjectNotFoundError, match=r"s3://.*/root/missing"):
            await store.get_range("missing")
        with pytest.raises(ObjectNotFoundError):
            await store.head("missing")
        with pytest.raises(ObjectChangedError):
            await store.get_range(ODD, 0, 10, etag='"0123456789abcdef0123456789abcdef"')
        assert store.raw.direct  # type: ignore[attr-defined]
    finally:
        await store.aclose()
        await writer.aclose()


async def test_a_wrong_secret_is_refused_by_the_server(
    s3_auth_server: MotoServer, keyed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = open_store(f"s3://{keyed}", **s3_auth_server.store_options())
    await writer.put("k", b"x")
    await writer.aclose()
    secret = s3_auth_server.secret_access_key  # moto's: random, so its last character may be 0
    wrong = secret[:-1] + ("1" if secret.endswith("0") else "0")
    assert wrong != secret
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", wrong)
    store = open_store(f"s3://{keyed}", direct=True, **s3_auth_server.store_options())
    try:
        with pytest.raises(AccessDeniedError, match=r"SignatureDoesNotMatch"):
            await store.get_range("k")
    finally:
        await store.aclose()


# --- S3's answers that moto does not give: a fake S3 on loopback ------------------------------


class _FakeS3:
    """Answers like S3 for one object: a stored checksum (right or wrong), and a refusal naming
    the bucket's region when a request is signed for another. ``redirects``: the next GETs are
    answered 307 TemporaryRedirect naming no region (as S3 does while a new bucket's name
    propagates), and a HEAD of the bucket names its region unless ``head_names_region`` is
    false. ``clock_offset``: the server's clock runs that many seconds from the real one, and a
    request signed over 15 minutes away from it is refused 403 RequestTimeTooSkewed with the
    server's ``Date``. ``deny``: every GET is refused 403 AccessDenied. ``shift``: a ranged GET
    is answered with the range one byte later, and says so in Content-Range. ``etag``: the
    object's ETag; the server ignores ``If-Match``."""

    def __init__(self, body: bytes, checksum: str, home: str) -> None:
        self.body, self.checksum, self.home = body, checksum, home
        self.scopes: list[str] = []
        self.log: list[tuple[str, str]] = []  # (method, signing region) of every request
        self.stamps: list[float] = []  # every GET's x-amz-date, as a POSIX time
        self.redirects = 0
        self.head_names_region = True
        self.clock_offset = 0.0
        self.deny = False
        self.shift = False
        self.etag = '"e"'
        app = web.Application()
        app.router.add_get("/{bucket}/{key:.*}", self.get, allow_head=False)
        app.router.add_route("HEAD", "/{bucket}", self.head_bucket)
        self.server = ThreadedApp(app)

    def _date(self) -> dict[str, str]:
        now = time.time() + self.clock_offset
        return {"Date": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now))}

    async def head_bucket(self, request: web.Request) -> web.StreamResponse:
        self.log.append(("HEAD", request.headers["Authorization"].split("/")[2]))
        headers = {"x-amz-bucket-region": self.home} if self.head_names_region else {}
        return web.Response(status=200, headers=headers)

    async def get(self, request: web.Request) -> web.StreamResponse:
        scope = request.headers["Authorization"].split("Credential=")[1].split("/")[2]
        self.scopes.append(scope)
        self.log.append(("GET", scope))
        stamp = calendar.timegm(time.strptime(request.headers["x-amz-date"], "%Y%m%dT%H%M%SZ"))
        self.stamps.append(stamp)
        if abs(stamp - (time.time() + self.clock_offset)) > 900:
            return web.Response(
                status=403,
                headers=self._date(),
                body=b"<Error><Code>RequestTimeTooSkewed</Code></Error>",
            )
        if self.deny:
            body = b"<Error><Code>AccessDenied</Code></Error>"
            return web.Response(status=403, headers=self._date(), body=body)
        if self.redirects:
            self.redirects -= 1
            return web.Response(
                status=307,
                headers={"Location": "https://elsewhere.invalid/k"},
                body=b"<Error><Code>TemporaryRedirect</Code>"
                b"<Endpoint>elsewhere.invalid</Endpoint></Error>",
            )
        if scope != self.home:
            return web.Response(
                status=400,
                headers={"x-amz-bucket-region": self.home},
                body=b"<Error><Code>AuthorizationHeaderMalformed</Code></Error>",
            )
        headers = {"ETag": self.etag}
        rng = request.http_range
        if rng.start is not None:
            n = len(self.body)
            if self.shift:
                rng = slice(rng.start + 1, (rng.stop or n) + 1)
            headers["Content-Range"] = f"bytes {rng.start}-{min(rng.stop or n, n) - 1}/{n}"
            return web.Response(status=206, body=self.body[rng], headers=headers)
        if request.headers.get("x-amz-checksum-mode") == "ENABLED":
            headers["x-amz-checksum-crc32"] = self.checksum
            headers["x-amz-checksum-type"] = "FULL_OBJECT"
        return web.Response(body=self.body, headers=headers)


@pytest.fixture
def fake_s3() -> Iterator[_FakeS3]:
    body = b"abc" * 1000
    right = base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode()
    fake = _FakeS3(body, right, "eu-west-1")
    fake.server.start()
    try:
        yield fake
    finally:
        fake.server.stop()


async def _direct_read(fake: _FakeS3, start: int, end: int, etag: str | None = None) -> bytes:
    backend = S3Backend("s3://b", endpoint_url=fake.server.url, region="eu-west-1", direct=True)
    try:
        return b"".join([c async for c in backend.iter_range("k", start, end, etag)])
    finally:
        await backend.aclose()


async def test_a_range_answered_for_other_bytes_is_refused(fake_s3: _FakeS3) -> None:
    assert await _direct_read(fake_s3, 0, 10) == fake_s3.body[:10]
    fake_s3.shift = True
    with pytest.raises(StorageError, match=r"Content-Range bytes 1-10/3000 when asked bytes=0-9"):
        await _direct_read(fake_s3, 0, 10)


async def test_a_server_ignoring_if_match_is_caught_by_the_etag_it_answers(
    fake_s3: _FakeS3,
) -> None:
    assert await _direct_read(fake_s3, 0, 10, etag='"e"') == fake_s3.body[:10]
    fake_s3.etag = '"rewritten"'  # the object changed; this server answers anyway
    with pytest.raises(ObjectChangedError, match="changed since the index was built"):
        await _direct_read(fake_s3, 0, 10, etag='"e"')


async def test_a_refusal_naming_the_region_is_signed_again_for_it(fake_s3: _FakeS3) -> None:
    store = open_store("s3://b", endpoint_url=fake_s3.server.url, region="us-east-1", direct=True)
    try:
        assert await store.get_range("k") == fake_s3.body
        assert await store.get_range("k") == fake_s3.body
    finally:
        await store.aclose()
    assert fake_s3.scopes == ["us-east-1", "eu-west-1", "eu-west-1"]


async def _two_reads(fake: _FakeS3, region: str) -> None:
    """Two ranged reads of the fake's object by a direct store signing for ``region``."""
    store = open_store("s3://b", endpoint_url=fake.server.url, region=region, direct=True)
    try:
        assert await store.get_range("k", 0, 9) == fake.body[:9]
        assert await store.get_range("k", 9, 20) == fake.body[9:20]
    finally:
        await store.aclose()


async def test_a_temporary_redirect_naming_no_region_is_resolved_by_a_head_of_the_bucket(
    fake_s3: _FakeS3,
) -> None:
    fake_s3.redirects = 1
    await _two_reads(fake_s3, "us-east-1")
    # the 307 named no region: the bucket's HEAD did, and the request went again, signed for it
    assert fake_s3.log == [
        ("GET", "us-east-1"),
        ("HEAD", "us-east-1"),
        ("GET", "eu-west-1"),
        ("GET", "eu-west-1"),
    ]


async def test_a_temporary_redirect_that_nothing_resolves_is_an_error_naming_it(
    fake_s3: _FakeS3,
) -> None:
    fake_s3.redirects, fake_s3.head_names_region = 2, False
    store = open_store("s3://b", endpoint_url=fake_s3.server.url, region="eu-west-1", direct=True)
    try:
        with pytest.raises(StorageError, match=r"HTTP 307 TemporaryRedirect") as info:
            await store.get_range("k", 0, 9)
        assert not info.value.retryable
    finally:
        await store.aclose()
    assert fake_s3.log == [("GET", "eu-west-1"), ("HEAD", "eu-west-1")]


@pytest.mark.parametrize("offset", [3600.0, -7200.0])
async def test_a_skewed_clock_is_signed_again_with_the_servers_time(
    fake_s3: _FakeS3, offset: float
) -> None:
    fake_s3.clock_offset = offset
    await _two_reads(fake_s3, "eu-west-1")
    assert len(fake_s3.stamps) == 3  # refused once, then signed with the server's clock
    now = time.time()
    assert abs(fake_s3.stamps[0] - now) < 60
    assert [abs(t - (now + offset)) < 60 for t in fake_s3.stamps[1:]] == [True, True]


async def test_a_refusal_with_the_clocks_agreeing_is_not_sent_again(fake_s3: _FakeS3) -> None:
    fake_s3.deny = True
    fake_s3.clock_offset = 30.0  # within the minute a server's Date may differ by
    store = open_store("s3://b", endpoint_url=fake_s3.server.url, region="eu-west-1", direct=True)
    try:
        with pytest.raises(AccessDeniedError, match=r"HTTP 403 AccessDenied"):
            await store.get_range("k", 0, 9)
    finally:
        await store.aclose()
    assert len(fake_s3.stamps) == 1


async def test_a_stored_checksum_that_does_not_match_is_an_integrity_error(
    fake_s3: _FakeS3,
) -> None:
    store = open_store("s3://b", endpoint_url=fake_s3.server.url, region="eu-west-1", direct=True)
    try:
        assert await store.get_range("k") == fake_s3.body
        fake_s3.checksum = base64.b64encode(b"\x00\x00\x00\x01").decode()
        with pytest.raises(IntegrityError, match=r"s3://b/k: the body's crc32 is not the checksum"):
            await store.get_range("k")
        assert await store.get_range("k", 0, 10) == fake_s3.body[:10]  # ranged: no checksum
    finally:
        await store.aclose()


def test_a_cold_s3_dataset_with_static_keys_never_imports_the_sdk_or_aiohttp(
    s3_bucket: str, s3_server: MotoServer, tmp_path: Path
) -> None:
    from astream.writer.mds import MDSWriter

    url = f"{s3_bucket}/nosdk-{uuid.uuid4().hex[:8]}"
    with MDSWriter(out=url, columns={"x": "int64"}, size_limit=1 << 10) as w:
        for i in range(300):
            w.write({"x": i})
    code = f"""
        import sys
        from astream.torch.dataset import StreamingDataset
        from astream.torch.dataloader import StreamingDataLoader
        ds = StreamingDataset(remote={url!r}, local={str(tmp_path / "cache")!r},
                              shuffle=True, batch_size=8)
        got = sorted(int(x) for b in StreamingDataLoader(ds, batch_size=8, num_workers=2)
                     for x in b["x"])
        assert got == list(range(300)), got
        # nor aiohttp: the reads go on astream's own client (storage/h1.py); importing aiohttp
        # took 0.13-0.3 s of the construction in every process that built such a dataset
        sdk = ("aiobotocore", "botocore", "aiohttp", "yarl")
        print("SDK", sorted(m for m in sys.modules if m.split(".")[0] in sdk))
        """
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "AWS_CONFIG_FILE": str(tmp_path / "x"),
    }
    p = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "SDK []" in p.stdout, p.stdout


def test_checksum_helper_matches_hashlib_for_sha256() -> None:
    from astream.storage.s3 import _checksum_of

    body = b"some bytes"
    digest = base64.b64encode(hashlib.sha256(body).digest()).decode()
    name, hasher, want = _checksum_of({"x-amz-checksum-sha256": digest})  # type: ignore[misc]
    hasher.update(body)
    assert (name, hasher.digest() == want) == ("x-amz-checksum-sha256", True)
    assert _checksum_of({"x-amz-checksum-crc32": "AAAAAA==-3"}) is None  # composite
    assert (
        _checksum_of({"x-amz-checksum-sha256": digest, "x-amz-checksum-type": "COMPOSITE"}) is None
    )


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 signed by its own key (PEM files)."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "astream-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


async def test_an_https_endpoint_is_verified_with_aws_ca_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ssl

    from astream.errors import TransientStorageError
    from astream.storage import RetryPolicy

    cert, key = _self_signed(tmp_path)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    body = b"over tls"
    fake = _FakeS3(
        body, base64.b64encode(zlib.crc32(body).to_bytes(4, "big")).decode(), "us-east-1"
    )
    fake.server = ThreadedApp(fake.server.app, ssl_context=ctx)
    fake.server.start()
    once = RetryPolicy(attempts=1)
    try:
        monkeypatch.setenv("AWS_CA_BUNDLE", str(cert))
        store = open_store("s3://b", endpoint_url=fake.server.url, direct=True, retry=once)
        try:
            assert await store.get_range("k") == body  # trusted through the bundle only
        finally:
            await store.aclose()
        monkeypatch.delenv("AWS_CA_BUNDLE")
        store = open_store("s3://b", endpoint_url=fake.server.url, direct=True, retry=once)
        try:
            with pytest.raises(TransientStorageError, match=r"[Cc]ertificate"):
                await store.get_range("k")
        finally:
            await store.aclose()
    finally:
        fake.server.stop()


# keys with characters that URL decoding would change: '+' (a space once decoded), '%41' ('A'),
# a space, '&' (escaped in XML either way) and a non-ASCII letter
_ODD_KEYS = ["dir/a+b.mds", "dir/x%41y.mds", "dir/two words&more.mds", "dir/é.mds"]


def _listing_app(encoded: bool) -> ThreadedApp:
    """A server whose every GET answers one ListObjectsV2 page of ``_ODD_KEYS``: keys URL-encoded
    and ``EncodingType`` said, as S3 does when asked, or raw and unsaid, as a server that ignores
    ``encoding-type`` does."""
    from urllib.parse import quote_plus
    from xml.sax.saxutils import escape

    contents = "".join(
        f"<Contents><Key>{escape(quote_plus(k, safe='/') if encoded else k)}</Key>"
        f'<Size>{i + 1}</Size><ETag>"e{i}"</ETag></Contents>'
        for i, k in enumerate(_ODD_KEYS)
    )
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
        f"<Name>b</Name><Prefix></Prefix><KeyCount>{len(_ODD_KEYS)}</KeyCount>"
        f"<MaxKeys>1000</MaxKeys>{'<EncodingType>url</EncodingType>' if encoded else ''}"
        f"<IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
    ).encode()

    async def listing(request: web.Request) -> web.StreamResponse:
        return web.Response(body=body, content_type="application/xml")

    app = web.Application()
    app.router.add_get("/{tail:.*}", listing)
    return ThreadedApp(app)


@pytest.mark.parametrize("encoded", [True, False], ids=["encoded", "not-encoded"])
async def test_a_listing_is_url_decoded_only_when_the_server_says_it_encoded_it(
    encoded: bool,
) -> None:
    # the SDK (botocore) is the oracle: it decodes keys only when the answer says EncodingType
    # url; the direct path must list the same keys, sizes and ETags from the same answers
    server = _listing_app(encoded)
    server.start()
    try:
        got = {}
        for direct in (True, False):
            backend = S3Backend(
                "s3://b", endpoint_url=server.url, region="us-east-1", direct=direct
            )
            try:
                items, token = await backend.list_page("", None)
            finally:
                await backend.aclose()
            assert token is None
            got[direct] = [(o.key, o.size, o.etag) for o in items]
        assert got[True] == got[False]
        assert got[True] == [(k, i + 1, f'"e{i}"') for i, k in enumerate(_ODD_KEYS)]
    finally:
        server.stop()
