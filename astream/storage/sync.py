"""Blocking helpers for synchronous callers (merge_index, the CLI): whole-prefix transfers.

Each call opens a store for the URL on astream's loop thread (:mod:`astream.bridge`),
does the transfer there and closes the store; errors arrive unchanged.
"""

from __future__ import annotations

from typing import Any

from astream import bridge
from astream.storage.registry import open_store
from astream.storage.transfer import download_tree, upload_tree

__all__ = ["download", "download_key", "upload", "upload_key"]


def download(url_prefix: str, local_dir: str, **options: Any) -> list[str]:
    """Copy every object under ``url_prefix`` into ``local_dir``; return the keys."""

    async def go() -> list[str]:
        store = open_store(url_prefix, **options)
        try:
            return await download_tree(store, local_dir)
        finally:
            await store.aclose()

    return bridge.run(go())


def upload(local_dir: str, url_prefix: str, **options: Any) -> list[str]:
    """Copy every file under ``local_dir`` to ``url_prefix``; return the keys."""

    async def go() -> list[str]:
        store = open_store(url_prefix, **options)
        try:
            return await upload_tree(store, local_dir)
        finally:
            await store.aclose()

    return bridge.run(go())


def download_key(url_prefix: str, key: str, path: str, **options: Any) -> int:
    """Download one object ``key`` under ``url_prefix`` into ``path``; return its size."""

    async def go() -> int:
        store = open_store(url_prefix, **options)
        try:
            return await store.get_to_file(key, path)
        finally:
            await store.aclose()

    return bridge.run(go())


def upload_key(path: str, url_prefix: str, key: str, **options: Any) -> None:
    """Upload the file ``path`` as ``key`` under ``url_prefix``."""

    async def go() -> None:
        store = open_store(url_prefix, **options)
        try:
            await store.put_file(key, path)
        finally:
            await store.aclose()

    bridge.run(go())
