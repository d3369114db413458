"""Object storage: one async :class:`ObjectStore` protocol over local, HTTP, S3, GCS and Azure.

``open_store(url)`` returns a store with retries, deadlines and resumed reads already applied.
Cloud SDKs are imported only when their scheme is used.

May import: the standard library, astream.errors, the core, the loop bridge (astream.bridge),
aiohttp and h11, and a backend's own SDK inside that backend's module (installed through its
extra). Nothing above it: no runtime, dataset, writer or CLI. tests/test_layers.py checks it.
"""

from __future__ import annotations

from astream.storage.base import ObjectInfo, ObjectStore
from astream.storage.registry import open_store
from astream.storage.retry import RetryingStore, RetryPolicy

__all__ = ["ObjectInfo", "ObjectStore", "RetryPolicy", "RetryingStore", "open_store"]
