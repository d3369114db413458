"""AWS Signature Version 4 for the S3 requests astream sends itself (GET, HEAD, list).

Theory of operation
-------------------
A signature is an HMAC-SHA256 chain: a signing key derived from the secret, the day, the region
and the service (cached: it changes once a day), applied to a "string to sign" that holds the
hash of the *canonical request* -- the method, the URI-encoded path, the sorted and encoded
query, the signed headers (lowercase names, sorted, values trimmed) and the payload's hash. The
server rebuilds the same text from what it received, so every byte that is signed must be sent
exactly as signed: :func:`sign` returns the headers to send, ``Host`` included, and the caller
sends the path and query it passed in, already encoded (:func:`encode_path`,
:func:`encode_query`). S3 encodes a path once (no double encoding, unlike other services) and
keeps ``/`` and ``~``; query names and values keep only ``A-Za-z0-9-_.~``.

Only GET and HEAD with an empty body are signed here, so the payload hash is always the hash of
the empty string, sent as ``x-amz-content-sha256`` as S3 requires. Checked byte for byte
against botocore's own signer (``tests/storage/test_sigv4.py``) and against a moto server that
verifies every signature.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import time
from urllib.parse import quote

__all__ = ["EMPTY_SHA256", "Credentials", "encode_path", "encode_query", "sign"]

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_ALGORITHM = "AWS4-HMAC-SHA256"


class Credentials:
    """A static access key (with the session token of temporary credentials, if any)."""

    __slots__ = ("access_key", "secret_key", "token")

    def __init__(self, access_key: str, secret_key: str, token: str | None = None) -> None:
        self.access_key, self.secret_key, self.token = access_key, secret_key, token or None

    def __repr__(self) -> str:  # never the secret
        return f"Credentials(access_key={self.access_key!r}, token={self.token is not None})"


def encode_path(path: str) -> str:
    """``/bucket/key`` as S3 wants it on the wire and in the canonical request."""
    return quote(path, safe="/~")


def encode_query(params: dict[str, str]) -> str:
    """The canonical (sorted, fully encoded) query string; also what is sent."""
    pairs = sorted((quote(k, safe="-_.~"), quote(v, safe="-_.~")) for k, v in params.items())
    return "&".join(f"{k}={v}" for k, v in pairs)


@functools.lru_cache(maxsize=16)
def _signing_key(secret: str, day: str, region: str, service: str) -> bytes:
    k = hmac.new(f"AWS4{secret}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


_last_stamp: tuple[int, str] = (-1, "")


def _stamp(when: float) -> str:
    """``x-amz-date`` for ``when`` (formatted once per second: every request signs one)."""
    global _last_stamp
    sec = int(when)
    last = _last_stamp
    if last[0] != sec:
        last = _last_stamp = (sec, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(sec)))
    return last[1]


def sign(
    method: str,
    host: str,
    path: str,
    query: str,
    headers: dict[str, str],
    creds: Credentials,
    region: str,
    *,
    service: str = "s3",
    now: float | None = None,
) -> dict[str, str]:
    """``headers`` plus ``Host``, ``x-amz-date``, ``x-amz-content-sha256``, the session token
    and ``Authorization``, for a request with an empty body. ``path`` and ``query`` are the
    encoded forms that will be sent (:func:`encode_path`, :func:`encode_query`); every header
    in ``headers`` is signed."""
    stamp = _stamp(time.time() if now is None else now)
    day = stamp[:8]
    out = dict(headers)
    out["Host"] = host
    out["x-amz-date"] = stamp
    out["x-amz-content-sha256"] = EMPTY_SHA256
    if creds.token:
        out["x-amz-security-token"] = creds.token
    canon = sorted((k.lower(), " ".join(v.split())) for k, v in out.items())
    names = ";".join(k for k, _ in canon)
    request = "\n".join(
        (
            method,
            path,
            query,
            "".join(f"{k}:{v}\n" for k, v in canon),
            names,
            EMPTY_SHA256,
        )
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = f"{_ALGORITHM}\n{stamp}\n{scope}\n{hashlib.sha256(request.encode()).hexdigest()}"
    key = _signing_key(creds.secret_key, day, region, service)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["Authorization"] = (
        f"{_ALGORITHM} Credential={creds.access_key}/{scope}, SignedHeaders={names}, "
        f"Signature={signature}"
    )
    return out
