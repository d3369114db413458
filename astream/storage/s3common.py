"""What the direct reads (:mod:`astream.storage.s3`) and the SDK path
(:mod:`astream.storage.s3sdk`) share: a store's settings, parsed once, and the mapping of S3's
error codes onto astream's errors, so both paths address and fail the same way."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from astream.errors import ConfigError, StorageError
from astream.storage.common import error_for_status, join_key, split_bucket

__all__ = ["NOT_FOUND", "THROTTLED", "S3Settings", "requester_pays_buckets", "s3_error"]

NOT_FOUND = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
THROTTLED = frozenset({"SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded"})


def s3_error(status: int, code: str, url: str) -> StorageError:
    """The astream error for an S3 error answer (its status and ``<Code>``)."""
    if code in NOT_FOUND:
        status = 404
    elif code in THROTTLED:
        status = 429
    return error_for_status(status, url, code)


@dataclass(frozen=True)
class S3Settings:
    """An ``s3://bucket/prefix`` store's options, the environment's defaults filled in:
    ``endpoint_url`` (else ``S3_ENDPOINT_URL``/``AWS_ENDPOINT_URL``), ``region`` (else
    ``AWS_REGION``/``AWS_DEFAULT_REGION``; None: us-east-1 where one is needed).

    ``access_key_id`` + ``secret_access_key`` are keys given to this store (they win over the
    environment; an S3-compatible service's own keys, such as OCI's or GCS's HMAC keys, come
    this way). From the environment, as the reference reads them: a bucket named in the
    comma-separated ``MOSAICML_STREAMING_AWS_REQUESTER_PAYS`` gets ``requester_pays`` (every
    request sends ``x-amz-request-payer: requester``), and ``S3_CANNED_ACL`` becomes
    ``canned_acl`` (every upload sends it as ``x-amz-acl``). ``shown`` is the root that
    messages name (``oci://bucket@namespace``), when the store is not an ``s3://`` URL."""

    url: str
    bucket: str
    prefix: str
    endpoint_url: str | None
    region: str | None
    path_style: bool
    unsigned: bool
    list_page_size: int
    multipart_threshold: int
    part_size: int
    part_concurrency: int
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    requester_pays: bool = False
    canned_acl: str | None = None
    shown: str = ""

    @classmethod
    def parse(
        cls,
        url: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        path_style: bool = False,
        unsigned: bool = False,
        list_page_size: int = 1000,
        multipart_threshold: int = 64 << 20,
        part_size: int = 16 << 20,
        part_concurrency: int = 8,
        access_key_id: str | None = None,
        secret_access_key: str | None = None,
    ) -> S3Settings:
        if part_size < 5 << 20:
            raise ConfigError(f"part_size must be >= 5 MiB for S3, got {part_size}")
        if (access_key_id is None) != (secret_access_key is None):
            raise ConfigError("access_key_id and secret_access_key must be given together")
        url = url.rstrip("/")
        bucket, prefix = split_bucket(url, len("s3://"))
        env = os.environ.get
        return cls(
            url=url,
            bucket=bucket,
            prefix=prefix,
            endpoint_url=endpoint_url or env("S3_ENDPOINT_URL") or env("AWS_ENDPOINT_URL"),
            region=region or env("AWS_REGION") or env("AWS_DEFAULT_REGION"),
            path_style=path_style,
            unsigned=unsigned,
            list_page_size=list_page_size,
            multipart_threshold=multipart_threshold,
            part_size=part_size,
            part_concurrency=part_concurrency,
            access_key_id=access_key_id,
            secret_access_key=secret_access_key,
            requester_pays=bucket in requester_pays_buckets(),
            canned_acl=env("S3_CANNED_ACL") or None,
        )

    def key(self, key: str) -> str:
        return join_key(self.prefix, key)

    def url_for(self, key: str) -> str:
        return f"{self.shown or 's3://' + self.bucket}/{self.key(key)}"


def requester_pays_buckets() -> frozenset[str]:
    """The buckets named in ``MOSAICML_STREAMING_AWS_REQUESTER_PAYS`` (comma-separated, each
    name stripped of spaces, as the reference splits it)."""
    names = os.environ.get("MOSAICML_STREAMING_AWS_REQUESTER_PAYS", "").split(",")
    return frozenset(n.strip() for n in names if n.strip())
