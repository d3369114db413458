"""``s3://bucket/prefix`` stores (AWS S3 and S3-compatible: R2, MinIO, Ceph, moto).

Theory of operation
-------------------
Reads -- ranged and whole GETs, HEAD, ListObjectsV2 -- are sent by astream itself on a pool of
keep-alive connections per store and process (:mod:`astream.storage.h1`, which does not import
aiohttp: 0.13-0.3 s saved before a dataset's first request), signed with
:mod:`astream.storage.sigv4`, whenever the credentials are static: ``unsigned=True`` (public
buckets), or ``AWS_ACCESS_KEY_ID`` + ``AWS_SECRET_ACCESS_KEY`` (+ ``AWS_SESSION_TOKEN``) in the
environment, which the SDK's own credential chain would also pick first. aiobotocore costs ~0.13
s to import, ~0.07 s to make a client in every process (the parent and each DataLoader worker)
and ~1.45 ms of CPU per request (its event hooks, models, response parsing;
``benchmarks/bench_request_cpu.py``); a direct GET costs less than an aiohttp GET does.
Everything else goes through the SDK (:mod:`astream.storage.s3sdk`, imported at first use):
writes (conditional ones and deletes included), and every request of a store whose
credentials or settings only the SDK resolves -- a profile or an AWS config file
(``AWS_PROFILE``, ``~/.aws/config``), SSO, a web identity, instance metadata, FIPS or
dual-stack endpoints, ``AWS_ENDPOINT_URL_S3``, an HTTP proxy. A CA bundle in
``AWS_CA_BUNDLE`` verifies an https endpoint here as it does in the SDK. ``direct=False``
sends every request through the SDK; ``direct=True`` refuses a configuration that cannot be
signed here instead of falling back.

Addressing is the SDK's: with ``endpoint_url`` (else ``S3_ENDPOINT_URL`` or
``AWS_ENDPOINT_URL``) path-style (``endpoint/bucket/key``); on AWS, virtual-hosted
(``bucket.s3.region.amazonaws.com``) for a bucket name that is a DNS label, path-style for others
and with ``path_style=True``. A wrong region is corrected from S3's refusal and the request
signed again, once: the region named by a 301/302/307/400's ``x-amz-bucket-region`` or
``<Region>``, or, for a redirect naming none (a 307 while a new bucket's name propagates), by
a HEAD of the bucket, as the SDK does. A 403 whose ``Date`` is over a minute from this
machine's clock (``RequestTimeTooSkewed``) is signed again with the server's time, once, and
the store keeps that offset for its later requests. Options: ``region`` (else
``AWS_REGION``/``AWS_DEFAULT_REGION``, else us-east-1), ``list_page_size``,
``multipart_threshold``, ``part_size`` and ``part_concurrency`` (uploads, the SDK's).

A whole-object GET asks for the object's stored checksum (``x-amz-checksum-mode``) and checks a
CRC32, SHA-1 or SHA-256 one while the body streams, as the SDK does; a mismatch is an
:class:`~astream.errors.IntegrityError` (the bytes were already handed on: not retried). A
ranged GET must come back 206 with exactly that range, and a GET conditioned on an ETag
(``If-Match``) is refused when the object changed (412, or another ETag from a server that
ignores the condition).

Errors: ``NoSuchKey``/``NoSuchBucket``/404 -> not found, 403 -> access denied, 416 -> an empty
read (range past the end), ``SlowDown``/429/503 -> throttled, other 5xx, connection failures
and a body shorter than its Content-Length -> transient (the retry layer resumes it).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import ipaddress
import os
import re
import ssl
import sys
import time
import zlib
from collections.abc import AsyncIterator, Callable
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus, urlsplit
from xml.etree import ElementTree

from astream.errors import ConfigError, IntegrityError, StorageError, TransientStorageError
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    POOL_SIZE,
    changed_error,
    check_content_range,
    range_header,
    total_size,
)
from astream.storage.h1 import Pool, Response
from astream.storage.s3common import S3Settings, s3_error
from astream.storage.sigv4 import Credentials, encode_path, encode_query, sign

if TYPE_CHECKING:
    from astream.storage.s3sdk import SdkS3

__all__ = ["S3Backend"]

# settings only the SDK applies: with any of them set, requests go through it
_SDK_ONLY_ENV = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_USE_FIPS_ENDPOINT",
    "AWS_USE_DUALSTACK_ENDPOINT",
    "AWS_ENDPOINT_URL_S3",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)
_DNS_BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")
_ERROR_CODE = re.compile(rb"<Code>([^<]*)</Code>")
_ERROR_REGION = re.compile(rb"<Region>([^<]*)</Region>")
_SKEW_S = 60.0  # a 403 whose Date is further than this from our clock: signed again with it
_CHECKSUMS: dict[str, Callable[[], Any]] = {
    "x-amz-checksum-crc32": lambda: _Crc32(),
    "x-amz-checksum-sha256": hashlib.sha256,
    "x-amz-checksum-sha1": hashlib.sha1,
}


def _config_file() -> str:
    return os.environ.get("AWS_CONFIG_FILE") or os.path.join(
        os.path.expanduser("~"), ".aws", "config"
    )


def static_credentials(unsigned: bool) -> Credentials | bool:
    """The keys to sign with (``True`` for unsigned requests), or ``False`` where only the SDK
    can resolve the credentials or apply the configuration (see the module's docstring)."""
    if any(os.environ.get(name) for name in _SDK_ONLY_ENV) or os.path.exists(_config_file()):
        return False
    if unsigned:
        return True
    key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not key or not secret:
        return False
    token = os.environ.get("AWS_SESSION_TOKEN") or os.environ.get("AWS_SECURITY_TOKEN")
    return Credentials(key, secret, token)


class _Target:
    """Where a bucket's requests go: scheme, host (with a port unless the default) and the
    path before the key, for an endpoint URL or AWS's regional endpoint in ``region``."""

    def __init__(self, bucket: str, endpoint_url: str | None, region: str, path_style: bool):
        self.bucket, self.region = bucket, region
        self._endpoint, self._path_style = endpoint_url, path_style
        if endpoint_url is not None:
            parts = urlsplit(endpoint_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(endpoint_url)
            if parts.path.strip("/") or parts.query or parts.username:
                raise ValueError(endpoint_url)  # a path or credentials in it: the SDK's job
            self.scheme, self.host, self.base = parts.scheme, parts.netloc, f"/{bucket}"
        else:
            self._aws(region)

    def _aws(self, region: str) -> None:
        if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d+", region) or region.startswith("us-iso"):
            raise ValueError(region)
        suffix = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
        # us-east-1 on the global name, as the SDK does
        s3 = "s3" if region == "us-east-1" else f"s3.{region}"
        self.scheme, self.region = "https", region
        if self._path_style or not _DNS_BUCKET.fullmatch(self.bucket) or _is_ip(self.bucket):
            self.host, self.base = f"{s3}.{suffix}", f"/{self.bucket}"
        else:
            self.host, self.base = f"{self.bucket}.{s3}.{suffix}", ""

    def move_to(self, region: str) -> None:
        """S3 named the bucket's region: sign for it (and on AWS, send there)."""
        if self._endpoint is None:
            self._aws(region)
        self.region = region


_TLS: dict[str, ssl.SSLContext] = {}


def _tls() -> ssl.SSLContext | None:
    """What verifies an https endpoint: the CA bundle of ``AWS_CA_BUNDLE`` as the SDK uses it
    (one context per process and file), else None: the system's CAs."""
    bundle = os.environ.get("AWS_CA_BUNDLE")
    if not bundle:
        return None
    ctx = _TLS.get(bundle)
    if ctx is None:
        ctx = _TLS[bundle] = ssl.create_default_context(cafile=bundle)
    return ctx


def _sdk_missing() -> bool:
    """Whether aiobotocore cannot be imported (found without importing it)."""
    if "aiobotocore" in sys.modules:
        return sys.modules["aiobotocore"] is None
    return importlib.util.find_spec("aiobotocore") is None


def _server_clock(date: str | None, sent_at: float) -> float | None:
    """The server's clock minus ours, from an answer's ``Date`` header (whole seconds), or None
    without a readable one."""
    if not date:
        return None
    try:
        when = parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp() - sent_at


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class _Crc32:
    """The ``hashlib`` shape over ``zlib.crc32``, digest big-endian as S3 sends it."""

    def __init__(self) -> None:
        self._v = 0

    def update(self, data: bytes) -> None:
        self._v = zlib.crc32(data, self._v)

    def digest(self) -> bytes:
        return self._v.to_bytes(4, "big")


class S3Backend:
    def __init__(self, url: str, *, direct: bool | None = None, **options: Any) -> None:
        """``options``: those of :meth:`S3Settings.parse` (an unknown one is a TypeError,
        which ``open_store`` reports as a bad option)."""
        if direct not in (None, True, False):
            raise ConfigError(f"direct must be None, True or False, got {direct!r}")
        if _sdk_missing():  # writes and other credentials need it: say so now, not mid-run
            raise ConfigError(f"url {url!r} needs the 's3' extra: pip install 'astream[s3]'")
        self._s = S3Settings.parse(url, **options)
        self.bucket, self.prefix = self._s.bucket, self._s.prefix
        self.list_page_size = self._s.list_page_size  # read by parquet/io_index.py
        self._sdk_s3: SdkS3 | None = None
        self._creds: Credentials | None = None
        self._target: _Target | None = None
        if direct is not False:
            found = static_credentials(self._s.unsigned)
            if found is not False and self._s.access_key_id and self._s.secret_access_key:
                found = Credentials(self._s.access_key_id, self._s.secret_access_key, None)
            try:
                if found is not False:
                    region = self._s.region or "us-east-1"
                    path_style = self._s.path_style
                    self._target = _Target(self.bucket, self._s.endpoint_url, region, path_style)
                    self._creds = found if isinstance(found, Credentials) else None
            except ValueError:
                self._target = None
            if direct is True and self._target is None:
                raise ConfigError(
                    f"url {url!r}: direct=True, but these credentials or settings are resolved "
                    "by the AWS SDK only (a profile, an AWS config file, SSO, a web identity, "
                    "instance metadata, FIPS/dual-stack, a proxy, or an endpoint "
                    "URL with a path); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                    "unsigned=True, or leave direct unset"
                )
        self._session = Pool(POOL_SIZE)
        self._clock_offset = 0.0  # the server's clock minus this machine's, once S3 said so

    @property
    def url(self) -> str:
        return self._s.url

    @property
    def direct(self) -> bool:
        """Whether reads are signed and sent here rather than through the SDK."""
        return self._target is not None

    def url_for(self, key: str) -> str:
        return self._s.url_for(key)

    def _key(self, key: str) -> str:
        return self._s.key(key)

    def _sdk(self) -> SdkS3:
        if self._sdk_s3 is None:
            try:
                from astream.storage.s3sdk import SdkS3
            except ImportError as exc:
                raise ConfigError(
                    f"url {self._s.url!r}: this S3 operation needs the 's3' extra "
                    "(aiobotocore): pip install 'astream[s3]'"
                ) from exc
            self._sdk_s3 = SdkS3(self._s)
        return self._sdk_s3

    # -- direct requests ---------------------------------------------------------------------

    def _path(self, full: str) -> str:
        """The encoded path of an object, or of the bucket for a listing (``/bucket``, or ``/``
        on a virtual-hosted bucket's own host), as the SDK sends them."""
        assert self._target is not None
        base = self._target.base
        return encode_path(f"{base}/{full}" if full else (base or "/"))

    async def _request(
        self, method: str, full: str, query: dict[str, str], headers: dict[str, str], where: str
    ) -> Response:
        """One signed request to the bucket's current target, sent as it is (no redirect
        followed, no status checked)."""
        target = self._target
        assert target is not None
        path = self._path(full)
        q = encode_query(query)
        if self._s.requester_pays:  # MOSAICML_STREAMING_AWS_REQUESTER_PAYS names this bucket
            headers = {**headers, "x-amz-request-payer": "requester"}
        signed = headers
        if self._creds is not None:
            now = time.time() + self._clock_offset
            signed = sign(
                method, target.host, path, q, headers, self._creds, target.region, now=now
            )
        url = (target.scheme, target.host, f"{path}?{q}" if q else path)
        tls = _tls() if target.scheme == "https" else None
        return await self._session.request(method, url, signed, where, tls)

    async def _bucket_region(self, where: str) -> str | None:
        """The bucket's region as S3 names it in the answer to a HEAD of the bucket (whatever
        its status), as the SDK asks when a redirect names none."""
        resp = await self._request("HEAD", "", {}, {}, where)
        resp.release()
        return resp.headers.get("x-amz-bucket-region")

    async def _send(
        self, method: str, where: str, full: str, query: dict[str, str], headers: dict[str, str]
    ) -> Response:
        """One signed request; error answers are raised (the body read for its ``<Code>``),
        416 and 412 returned. Two refusals are answered by sending the request again, each once:
        one naming another region -- by ``x-amz-bucket-region``, the body's ``<Region>``, or,
        for a redirect naming none (S3's 307 while a new bucket's name propagates), a HEAD of
        the bucket -- is signed again for that region (on AWS, sent to its endpoint); a 403
        whose ``Date`` is more than ``_SKEW_S`` from this machine's clock is signed again with
        the server's time (the offset is kept for this store's later requests)."""
        target = self._target
        assert target is not None
        moved = skewed = False
        while True:
            sent_at = time.time()
            resp = await self._request(method, full, query, headers, where)
            if resp.status < 300 or resp.status in (412, 416):
                return resp
            try:
                body = b"" if method == "HEAD" else await resp.read(1 << 16)
            except TransientStorageError:
                body = b""
            finally:
                resp.release()
            m = _ERROR_CODE.search(body)
            code = m[1].decode(errors="replace") if m else resp.reason
            if not moved and resp.status in (301, 302, 307, 400):
                region = resp.headers.get("x-amz-bucket-region")
                if region is None and (m := _ERROR_REGION.search(body)) is not None:
                    region = m[1].decode(errors="replace")
                if region is None and resp.status != 400:
                    region = await self._bucket_region(where)
                if region and region != target.region:
                    moved = True
                    with contextlib.suppress(ValueError):  # a region name AWS does not use
                        target.move_to(region)
                        continue
            if not skewed and resp.status == 403 and self._creds is not None:
                offset = _server_clock(resp.headers.get("Date"), sent_at)
                if offset is not None and abs(offset - self._clock_offset) > _SKEW_S:
                    skewed = True
                    self._clock_offset = offset
                    continue
            raise s3_error(resp.status, code, where)

    async def _iter_direct(
        self, key: str, start: int, end: int | None, etag: str | None, seen: list[str] | None
    ) -> AsyncIterator[bytes]:
        if end is not None and end <= start:
            return
        rng = range_header(start, end)
        headers: dict[str, str] = {}
        if rng is not None:
            headers["Range"] = rng
        else:
            headers["x-amz-checksum-mode"] = "ENABLED"
        if etag is not None:
            headers["If-Match"] = etag
        url = self.url_for(key)
        resp = await self._send("GET", url, self._key(key), {}, headers)
        try:
            if resp.status == 416:
                return
            if resp.status == 412 and etag is not None:
                raise changed_error(url, etag)
            if resp.status == 412:
                raise s3_error(412, "PreconditionFailed", url)
            got_etag = resp.headers.get("ETag")
            if etag is not None and got_etag is not None and got_etag.strip('"') != etag.strip('"'):
                raise changed_error(url, etag)  # a server that ignored If-Match
            if seen is not None and got_etag:
                seen.append(got_etag)
            if rng is not None:
                if resp.status != 206:
                    raise StorageError(
                        f"server answered HTTP {resp.status} to a ranged read ({rng}): refusing "
                        "bytes of another range",
                        url,
                        retryable=False,
                    )
                check_content_range(resp.headers.get("Content-Range"), rng, start, end, url)
            check = None if rng is not None else _checksum_of(resp.headers)
            want = resp.content_length
            got = 0
            async for chunk in resp.chunks():
                got += len(chunk)
                if check is not None:
                    check[1].update(chunk)
                yield chunk
            if want is not None and got != want:
                raise TransientStorageError(f"body ended after {got} of {want} bytes", url)
            if check is not None and check[1].digest() != check[2]:
                raise IntegrityError(
                    f"{url}: the body's {check[0].removeprefix('x-amz-checksum-')} is not the "
                    "checksum S3 stored with the object"
                )
        finally:
            resp.release()

    async def _tail_direct(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        resp = await self._send(
            "GET", self.url_for(key), self._key(key), {}, {"Range": f"bytes=-{n}"}
        )
        try:
            if resp.status == 416:
                return ObjectInfo(key, 0, None), b""  # an empty object
            if resp.status == 412:
                raise s3_error(412, "PreconditionFailed", self.url_for(key))
            data = await resp.read()
            cr = resp.headers.get("Content-Range") if resp.status == 206 else None
            return ObjectInfo(key, total_size(cr, len(data)), resp.headers.get("ETag")), data
        finally:
            resp.release()

    async def _head_direct(self, key: str) -> ObjectInfo:
        resp = await self._send("HEAD", self.url_for(key), self._key(key), {}, {})
        resp.release()
        if resp.status >= 300:
            raise s3_error(resp.status, "", self.url_for(key))
        size = resp.content_length
        if size is None:
            raise StorageError("HEAD response has no Content-Length", self.url_for(key))
        return ObjectInfo(key, size, resp.headers.get("ETag"))

    async def _list_direct(
        self, full: str, after: str | None, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        query = {
            "list-type": "2",
            "prefix": full,
            "max-keys": str(self.list_page_size),
            "encoding-type": "url",
        }
        if token:
            query["continuation-token"] = token
        elif after is not None:
            query["start-after"] = self._key(after)
        where = f"s3://{self.bucket}/{full}"
        resp = await self._send("GET", where, "", query, {})
        try:
            data = await resp.read()
        finally:
            resp.release()
        try:
            root = ElementTree.fromstring(data)
        except ElementTree.ParseError as exc:
            raise TransientStorageError(
                f"unreadable listing ({exc}: {data[:80]!r})", where
            ) from exc
        cut = len(self.prefix) + 1 if self.prefix else 0
        # the answer's own namespace: S3's, or GCS's XML API's (doc.s3.amazonaws.com), or none
        ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        # keys come URL-encoded only where the answer says so: a server that ignores
        # ``encoding-type`` sends them as they are ("a+b" must stay "a+b"), as botocore reads them
        encoded = root.findtext(f"{ns}EncodingType") == "url"
        items = []
        for c in root.iter(f"{ns}Contents"):
            name = c.findtext(f"{ns}Key") or ""
            if encoded:
                name = unquote_plus(name)
            items.append(
                ObjectInfo(name[cut:], int(c.findtext(f"{ns}Size") or 0), c.findtext(f"{ns}ETag"))
            )
        more = root.findtext(f"{ns}IsTruncated") == "true"
        return items, (root.findtext(f"{ns}NextContinuationToken") if more else None)

    # -- the raw-backend operations --------------------------------------------------------

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        inner = (
            self._iter_direct(key, start, end, etag, seen)
            if self._target is not None
            else self._sdk().iter_range(key, start, end, etag, seen)
        )
        try:
            async for chunk in inner:
                yield chunk
        finally:
            await inner.aclose()  # type: ignore[attr-defined]

    async def get_tail(self, key: str, n: int) -> tuple[ObjectInfo, bytes]:
        """The last ``n`` bytes of ``key`` and its identity, in one suffix-range GET (no HEAD)."""
        if self._target is not None:
            return await self._tail_direct(key, n)
        return await self._sdk().get_tail(key, n)

    async def head(self, key: str) -> ObjectInfo:
        if self._target is not None:
            return await self._head_direct(key)
        return await self._sdk().head(key)

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        return await self.list_page_after(prefix, None, token)

    async def list_page_after(
        self, prefix: str, after: str | None, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        """A page of the keys under ``prefix`` that sort after the key ``after``
        (``StartAfter``): a listing split into key ranges runs them concurrently."""
        if self._target is not None:
            full = self._key(prefix) if prefix else (self.prefix + "/" if self.prefix else "")
            return await self._list_direct(full, after, token)
        return await self._sdk().list_page_after(prefix, after, token)

    async def put(self, key: str, data: bytes) -> None:
        await self._sdk().put(key, data)

    async def put_file(self, key: str, path: str) -> None:
        await self._sdk().put_file(key, path)

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        return await self._sdk().put_if(key, data, expect)

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        return await self._sdk().put_file_if(key, path, expect)

    async def delete(self, key: str, expect: str | None) -> None:
        await self._sdk().delete(key, expect)

    async def aclose(self) -> None:
        sdk, self._sdk_s3 = self._sdk_s3, None
        try:
            if sdk is not None:
                await sdk.aclose()
        finally:
            await self._session.aclose()


def _checksum_of(headers: Any) -> tuple[str, Any, bytes] | None:
    """The stored full-object checksum a whole GET came with, as (header, hasher, expected);
    None when there is none this module can check (a multipart object's composite checksum,
    or CRC32C/CRC64NVME, which need a library the SDK also only uses when installed)."""
    if headers.get("x-amz-checksum-type", "FULL_OBJECT").upper() == "COMPOSITE":
        return None
    for name, make in _CHECKSUMS.items():
        value = headers.get(name)
        if value and "-" not in value:
            try:
                return name, make(), base64.b64decode(value)
            except ValueError:
                return None
    return None
