"""Locating a dataset by URL and reading its ``index.json``, for synchronous callers.

A dataset argument (the CLI's, :func:`astream.plan.simulate`'s) is a local directory, a
``file://`` URL, or a remote URL that :func:`astream.storage.open_store` understands. A remote
index is read on astream's loop thread through :mod:`astream.bridge`, with a store opened for
the call and closed after it. Every error is an :mod:`astream.errors` type.
"""

from __future__ import annotations

import os
from typing import Any

from astream.core.index import INDEX_BASENAME, Index, parse_index
from astream.errors import ObjectNotFoundError

__all__ = ["is_local", "join_split", "local_path", "read_index"]


def is_local(url: str) -> bool:
    """Whether ``url`` names a local directory (a path or a ``file://`` URL)."""
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    """The absolute path of a local ``url`` (``~`` expanded, ``file://`` removed)."""
    return os.path.abspath(os.path.expanduser(url.removeprefix("file://")))


def join_split(url: str, split: str | None) -> str:
    """``url`` with the sub-directory ``split`` appended (``url`` itself when there is none)."""
    if not split:
        return url
    return url.rstrip("/") + "/" + split.strip("/")


def read_index(url: str, **options: Any) -> Index:
    """Parse ``url``/index.json (local or remote); ``options`` open the remote's store."""
    if is_local(url):
        path = os.path.join(local_path(url), INDEX_BASENAME)
        try:
            with open(path, "rb") as f:
                return parse_index(f.read(), path)
        except FileNotFoundError:
            raise ObjectNotFoundError("no index.json (is this an MDS dataset?)", path) from None
    # imported here: a local dataset (and the CLI's start) needs neither the loop nor a backend
    from astream import bridge
    from astream.storage import open_store

    async def go() -> bytes:
        store = open_store(url, **options)
        try:
            return await store.get_range(INDEX_BASENAME)
        finally:
            await store.aclose()

    data = bridge.run(go())
    return parse_index(data, url.rstrip("/") + "/" + INDEX_BASENAME)
