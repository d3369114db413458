"""URL scheme -> backend, with an install hint when a backend's extra is missing.

Theory of operation
-------------------
``open_store(url)`` picks a backend by the URL's scheme, imports its module only then (so a cloud
SDK is imported only when its scheme is used), builds the raw backend with ``**options`` and wraps
it in :class:`~astream.storage.retry.RetryingStore`. Construction does no I/O and creates no
session: that happens on first use, inside the running event loop.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

from astream.errors import ConfigError
from astream.storage.base import ObjectStore
from astream.storage.retry import RetryingStore, RetryPolicy

__all__ = ["SCHEMES", "open_store", "scheme_of"]

# scheme -> (module, class, extra, the top-level SDK modules the extra provides)
SCHEMES: dict[str, tuple[str, str, str | None, tuple[str, ...]]] = {
    "file": ("astream.storage.local", "LocalBackend", None, ()),
    "http": ("astream.storage.http", "HttpBackend", None, ("aiohttp",)),
    "https": ("astream.storage.http", "HttpBackend", None, ("aiohttp",)),
    "hf": ("astream.storage.hf", "HfBackend", None, ("aiohttp",)),
    "s3": ("astream.storage.s3", "S3Backend", "s3", ("aiobotocore", "botocore")),
    "gs": ("astream.storage.gcshmac", "open_gcs", "gcs", ("gcloud",)),
    "gcs": ("astream.storage.gcshmac", "open_gcs", "gcs", ("gcloud",)),
    "az": ("astream.storage.azure", "AzureBackend", "azure", ("azure",)),
    "azure": ("astream.storage.azure", "AzureBackend", "azure", ("azure",)),
    "azure-dl": ("astream.storage.adls", "AdlsBackend", "azure", ("azure",)),
    "dbfs": ("astream.storage.dbfs", "open_dbfs", None, ()),
    "oci": ("astream.storage.oci", "OciBackend", "s3", ("aiobotocore", "botocore")),
    "sftp": ("astream.storage.sftp", "SftpBackend", "sftp", ("asyncssh",)),
}

# schemes the reference reads that astream refuses, and why
UNSUPPORTED = {
    "alipan": (
        "alipan:// (Aliyun Drive) is not supported: the reference reaches it through a "
        "third-party client (alipcs-py) that drives the drive's private web API with a web "
        "refresh token (ALIPAN_WEB_REFRESH_TOKEN) and its own file encryption; that API is not "
        "a published object-storage API astream could implement and test against. Copy the "
        "dataset to a supported store (s3://, gs://, az://, azure-dl://, oci://, dbfs:/, "
        "sftp://, http(s)://, or a path)"
    ),
}

_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://")


def scheme_of(url: str) -> str:
    """``"s3"`` for ``s3://b/p``, ``"dbfs"`` for ``dbfs:/p``; ``"file"`` for plain paths and
    ``file://`` URLs."""
    m = _SCHEME.match(url)
    if m is None and url[:6].lower() == "dbfs:/":
        return "dbfs"  # Databricks spells its paths dbfs:/Volumes/..., one slash
    return m.group(1).lower() if m else "file"


def preload_backends(urls: Any) -> None:
    """Import the backend modules of ``urls`` (strings; anything else is skipped). Run in a
    thread before an async ``open`` so that an SDK's import (tens of ms) never holds the
    caller's event loop; a failed import is left for :func:`open_store` to report."""
    for url in urls:
        if not isinstance(url, str) or not url:
            continue
        entry = SCHEMES.get(scheme_of(url))
        if entry is None or entry[0] in sys.modules:
            continue
        try:
            importlib.import_module(entry[0])
        except ImportError:
            pass


def open_store(url: str, *, retry: RetryPolicy | None = None, **options: Any) -> ObjectStore:
    """An :class:`ObjectStore` rooted at ``url``, with ``retry`` applied to every operation."""
    if not isinstance(url, str) or not url:
        raise ConfigError(f"url must be a non-empty string, got {url!r}")
    scheme = scheme_of(url)
    entry = SCHEMES.get(scheme)
    if scheme in UNSUPPORTED:
        raise ConfigError(f"url {url!r}: {UNSUPPORTED[scheme]}")
    if entry is None:
        known = ", ".join(sorted(f"{s}://" for s in SCHEMES))
        raise ConfigError(f"url {url!r}: unknown scheme {scheme!r} (known: {known}, or a path)")
    module_name, cls_name, extra, sdks = entry
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        top = (getattr(exc, "name", None) or "").split(".")[0]
        if extra is not None and top in sdks:
            raise ConfigError(
                f"url {url!r} needs the {extra!r} extra: pip install 'astream[{extra}]'"
            ) from exc
        raise
    cls = getattr(module, cls_name)
    try:
        raw = cls(url, **options)
    except TypeError as exc:
        raise ConfigError(f"open_store({url!r}): bad option for {scheme}:// ({exc})") from exc
    store: ObjectStore = RetryingStore(raw, retry)
    return store
