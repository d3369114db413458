"""GCS's XML API (the S3-compatible one that HMAC keys use) on 127.0.0.1, in front of
fake-gcs-server, for tests.

fake-gcs-server serves part of the XML API, and only virtual-host style (``Host:
<bucket>.storage.googleapis.com``): object GET (``Range`` honoured), HEAD and a ``list-type=2``
listing; it does not accept XML uploads and checks no signature. This gateway answers the
path-style requests an S3 client sends to ``https://storage.googleapis.com``:

- every request must carry an AWS Signature V4 (``AWS4-HMAC-SHA256``) by the one HMAC key
  pair it was given; the signature is recomputed with botocore's signer over the headers the
  request names as signed (an unknown key: 403 ``InvalidAccessKeyId``; a wrong signature: 403
  ``SignatureDoesNotMatch``);
- ``GET``/``HEAD /<bucket>/<key>`` and ``GET /<bucket>?list-type=2...`` are forwarded to
  fake-gcs-server virtual-host style; the listing is returned in GCS's XML namespace
  (``http://doc.s3.amazonaws.com/2006-03-01``), as GCS answers;
- ``PUT /<bucket>/<key>`` stores the body through fake-gcs-server's JSON upload.

Limits: no multipart uploads, no pagination of listings (fake-gcs-server returns every key in
one page and ignores ``max-keys``), no conditional requests, no ``x-goog-*`` extensions; the
signature's date is not checked against the clock. ``requests`` records (method, path, the
Authorization header) of each request.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote, unquote

import aiohttp
import yarl
from aiohttp import web

from astream.testing.servers import AppServer, ThreadedApp

__all__ = ["GCS_XML_NS", "GcsXmlGateway"]

GCS_XML_NS = "http://doc.s3.amazonaws.com/2006-03-01"
_AUTH = re.compile(
    r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
    r"SignedHeaders=([^,]+), Signature=([0-9a-f]{64})"
)
_PASS = ("Content-Type", "Content-Length", "Content-Range", "ETag", "Last-Modified")


def _error(status: int, code: str) -> web.Response:
    body = f"<?xml version='1.0' encoding='UTF-8'?><Error><Code>{code}</Code></Error>"
    return web.Response(status=status, body=body.encode(), content_type="application/xml")


class GcsXmlGateway(AppServer):
    name = "GCS XML API gateway"

    def __init__(self, fake_gcs_url: str, key: str, secret: str) -> None:
        self.upstream = fake_gcs_url.rstrip("/")
        self.key, self.secret = key, secret
        self.requests: list[tuple[str, str, str]] = []
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        app.on_cleanup.append(self._close)
        self._session: aiohttp.ClientSession | None = None
        self._app = ThreadedApp(app)

    async def _close(self, _app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()

    def _signature_ok(self, request: web.Request, body: bytes) -> str | None:
        """None when the request is signed by our key pair, else the S3 error code."""
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials

        m = _AUTH.fullmatch(request.headers.get("Authorization", ""))
        if m is None:
            return "AccessDenied"
        key, _day, region, service, names, signature = m.groups()
        if key != self.key:
            return "InvalidAccessKeyId"
        headers = {n: request.headers.get(n, "") for n in names.split(";")}
        url = f"http://{request.headers.get('Host', '')}{request.raw_path}"
        aws = AWSRequest(method=request.method, url=url, headers=headers, data=body)
        aws.context["timestamp"] = request.headers.get("x-amz-date", "")
        signer = S3SigV4Auth(Credentials(self.key, self.secret), service, region)
        canonical = signer.canonical_request(aws)
        if signer.signature(signer.string_to_sign(aws, canonical), aws) != signature:
            return "SignatureDoesNotMatch"
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        auth = request.headers.get("Authorization", "")
        self.requests.append((request.method, request.raw_path, auth))
        body = await request.read()
        refused = self._signature_ok(request, body)
        if refused is not None:
            return _error(403, refused)
        if self._session is None:
            self._session = aiohttp.ClientSession(auto_decompress=False)
        raw_path, _, query = request.raw_path.partition("?")
        bucket, _, key = raw_path.lstrip("/").partition("/")
        if request.method == "PUT" and key:
            return await self._upload(bucket, unquote(key), body)
        if request.method not in ("GET", "HEAD"):
            return _error(501, "NotImplemented")
        headers = {"Host": f"{bucket}.storage.googleapis.com"}
        if "Range" in request.headers:
            headers["Range"] = request.headers["Range"]
        target = yarl.URL(f"{self.upstream}/{key}" + (f"?{query}" if query else ""), encoded=True)
        async with self._session.request(request.method, target, headers=headers) as resp:
            data = await resp.read()
            out = {k: resp.headers[k] for k in _PASS if k in resp.headers}
            if resp.status == 404:
                return _error(404, "NoSuchKey" if key else "NoSuchBucket")
            if not key and resp.status == 200:  # a listing, in GCS's namespace
                data = data.replace(
                    b"<ListBucketResult>", f'<ListBucketResult xmlns="{GCS_XML_NS}">'.encode(), 1
                )
                out.pop("Content-Length", None)
            if request.method == "HEAD":
                return web.Response(status=resp.status, headers=out)
            out.pop("Content-Length", None)
            return web.Response(status=resp.status, body=data, headers=out)

    async def _upload(self, bucket: str, key: str, body: bytes) -> web.Response:
        assert self._session is not None
        url = (
            f"{self.upstream}/upload/storage/v1/b/{bucket}/o?uploadType=media"
            f"&name={quote(key, safe='')}"
        )
        async with self._session.post(yarl.URL(url, encoded=True), data=body) as resp:
            doc: dict[str, Any] = await resp.json(content_type=None)
            if resp.status >= 300:
                return _error(resp.status, "InternalError")
        return web.Response(status=200, headers={"ETag": f'"{doc.get("md5Hash", "")}"'})
