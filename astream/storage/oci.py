"""``oci://bucket@namespace/prefix`` stores: Oracle Cloud Object Storage through its
S3-compatible endpoint.

Theory of operation
-------------------
OCI Object Storage serves every bucket of a tenancy's namespace over the Amazon S3 API at
``https://<namespace>.compat.objectstorage.<region>.oraclecloud.com`` (path-style addressing,
Signature V4 signed for the OCI region's name, e.g. ``us-ashburn-1``), with a user's *customer
secret key* as the access key pair. This backend is :class:`~astream.storage.s3.S3Backend`
pointed there, so reads, listings, uploads, retries and error mapping are the S3 backend's.
OCI's native API (RSA-signed requests from ``~/.oci/config``'s API key) is not used: the
S3-compatible route is the one that can be tested here against a real S3 server.

Settings, first match wins:

- namespace: the URL's ``@namespace``, the ``namespace`` option, ``OCI_NAMESPACE``;
- region: the ``region`` option, ``OCI_REGION``, the ``region`` of the profile
  ``OCI_CLI_PROFILE`` (default ``DEFAULT``) in ``OCI_CONFIG_FILE`` (default ``~/.oci/config``);
- keys: the ``access_key_id`` + ``secret_access_key`` options, else ``AWS_ACCESS_KEY_ID`` +
  ``AWS_SECRET_ACCESS_KEY`` (what OCI's guide tells S3 tools to use), else the AWS SDK's chain;
- ``endpoint_url`` replaces the endpoint (a proxy, a test server).
"""

from __future__ import annotations

import configparser
import dataclasses
import os
from typing import Any

from astream.errors import ConfigError
from astream.storage.s3 import S3Backend

__all__ = ["OciBackend", "oci_endpoint", "parse_oci_url"]


def parse_oci_url(url: str) -> tuple[str, str | None, str]:
    """``oci://bucket@namespace/a/b`` -> (``bucket``, ``namespace``, ``a/b``); the namespace
    is None when the URL names none (``oci://bucket/a/b``)."""
    if not url.lower().startswith("oci://"):
        raise ConfigError(f"url {url!r}: not an oci:// URL")
    netloc, _, prefix = url[len("oci://") :].partition("/")
    bucket, at, namespace = netloc.partition("@")
    if not bucket or (at and not namespace):
        raise ConfigError(f"url {url!r}: expected oci://bucket@namespace/path")
    return bucket, namespace or None, prefix.strip("/")


def _config_region() -> str | None:
    path = os.environ.get("OCI_CONFIG_FILE") or os.path.expanduser("~/.oci/config")
    profile = os.environ.get("OCI_CLI_PROFILE") or "DEFAULT"
    cfg = configparser.ConfigParser(interpolation=None)
    try:
        cfg.read(path)
    except configparser.Error as exc:
        raise ConfigError(f"{path}: unreadable OCI config ({exc})") from exc
    if profile == "DEFAULT":
        return cfg.defaults().get("region")
    return cfg.get(profile, "region", fallback=None)


def oci_endpoint(namespace: str, region: str) -> str:
    """The S3-compatible endpoint of ``namespace`` in ``region``."""
    return f"https://{namespace}.compat.objectstorage.{region}.oraclecloud.com"


class OciBackend(S3Backend):
    def __init__(
        self,
        url: str,
        *,
        namespace: str | None = None,
        region: str | None = None,
        endpoint_url: str | None = None,
        **options: Any,
    ) -> None:
        bucket, in_url, prefix = parse_oci_url(url)
        ns = in_url or namespace or os.environ.get("OCI_NAMESPACE")
        if in_url and namespace and in_url != namespace:
            raise ConfigError(f"url {url!r} names namespace {in_url!r}, namespace={namespace!r}")
        if not ns:
            raise ConfigError(
                f"url {url!r}: no OCI namespace: write oci://bucket@namespace/..., or set "
                "namespace= or OCI_NAMESPACE"
            )
        reg = region or os.environ.get("OCI_REGION") or _config_region()
        if not reg:
            raise ConfigError(
                f"url {url!r}: no OCI region: pass region=, set OCI_REGION, or write region= "
                "in ~/.oci/config"
            )
        options.setdefault("path_style", True)
        super().__init__(
            f"s3://{bucket}/{prefix}",
            region=reg,
            endpoint_url=endpoint_url or oci_endpoint(ns, reg),
            **options,
        )
        root = url.rstrip("/")
        # the reference reads neither requester-pays buckets nor a canned ACL for OCI
        self._s = dataclasses.replace(
            self._s, url=root, shown=f"oci://{bucket}@{ns}", requester_pays=False, canned_acl=None
        )
