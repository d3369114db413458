"""``gs://bucket/prefix`` with HMAC keys: Google Cloud Storage's XML API, which speaks the
Amazon S3 protocol, instead of its JSON API.

Theory of operation
-------------------
With ``GCS_KEY`` and ``GCS_SECRET`` in the environment (an HMAC key pair of a service account,
the variables the reference reads), a ``gs://`` store is :class:`~astream.storage.s3.S3Backend`
pointed at ``https://storage.googleapis.com`` (``endpoint_url`` replaces it), path-style,
requests signed with Signature V4 (region ``auto``) by those keys; reads, listings (ListObjectsV2),
uploads (multipart) and errors are the S3 backend's. Without them, the JSON-API backend
(:mod:`astream.storage.gcs`) serves the store.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from astream.errors import ConfigError
from astream.storage.common import split_bucket
from astream.storage.s3 import S3Backend

__all__ = ["GCS_XML_ENDPOINT", "GcsHmacBackend", "open_gcs"]

GCS_XML_ENDPOINT = "https://storage.googleapis.com"


def open_gcs(url: str, **options: Any) -> Any:
    """The backend of a ``gs://`` (or ``gcs://``) URL: by HMAC keys when ``GCS_KEY`` and
    ``GCS_SECRET`` are set, else the JSON-API backend."""
    if os.environ.get("GCS_KEY") and os.environ.get("GCS_SECRET"):
        return GcsHmacBackend(url, **options)
    try:
        from astream.storage.gcs import GcsBackend
    except ImportError as exc:
        if (getattr(exc, "name", None) or "").split(".")[0] == "gcloud":
            raise ConfigError(
                f"url {url!r} needs the 'gcs' extra: pip install 'astream[gcs]'"
            ) from exc
        raise
    return GcsBackend(url, **options)


class GcsHmacBackend(S3Backend):
    def __init__(self, url: str, *, endpoint_url: str | None = None, **options: Any) -> None:
        scheme = url.split("://", 1)[0]
        bucket, prefix = split_bucket(url.rstrip("/"), len(scheme) + 3)
        key, secret = os.environ.get("GCS_KEY"), os.environ.get("GCS_SECRET")
        if not key or not secret:
            raise ConfigError(f"url {url!r}: HMAC access needs both GCS_KEY and GCS_SECRET")
        options.setdefault("path_style", True)
        options.setdefault("region", "auto")
        super().__init__(
            f"s3://{bucket}/{prefix}",
            endpoint_url=endpoint_url or GCS_XML_ENDPOINT,
            access_key_id=key,
            secret_access_key=secret,
            **options,
        )
        # the reference reads neither requester-pays buckets nor a canned ACL for GCS
        self._s = dataclasses.replace(
            self._s,
            url=url.rstrip("/"),
            shown=f"{scheme}://{bucket}",
            requester_pays=False,
            canned_acl=None,
        )
