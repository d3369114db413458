"""Object storage: one async :class:`ObjectStore` protocol over local, HTTP, S3, GCS and Azure.

``open_store(url)`` returns a store with retries, deadlines and resumed reads already applied.
Cloud SDKs are imported only when their scheme is used.
"""

from __future__ import annotations

from astream.storage.base import ObjectInfo, ObjectStore
from astream.storage.registry import open_store
from astream.storage.retry import RetryingStore, RetryPolicy

__all__ = ["ObjectInfo", "ObjectStore", "RetryPolicy", "RetryingStore", "open_store"]
