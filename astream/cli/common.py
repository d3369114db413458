"""Helpers shared by the subcommands: locating a dataset, reading its index, formatting sizes.

A dataset argument is a local directory (or ``file://`` URL) or a remote URL that
``astream.storage.open_store`` understands. Remote reads run on astream's loop thread through
:mod:`astream.bridge`; every error is an :mod:`astream.errors` type, which ``main``
turns into one line on stderr.
"""

from __future__ import annotations

import os
from typing import Any

from astream.core.index import INDEX_BASENAME, Index, parse_index
from astream.errors import ObjectNotFoundError

__all__ = ["human_bytes", "is_local", "join_split", "local_path", "read_index"]


def is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def local_path(url: str) -> str:
    return os.path.abspath(os.path.expanduser(url.removeprefix("file://")))


def join_split(url: str, split: str | None) -> str:
    if not split:
        return url
    return url.rstrip("/") + "/" + split.strip("/")


def read_index(url: str, **options: Any) -> Index:
    """Parse ``url``/index.json (local or remote)."""
    if is_local(url):
        path = os.path.join(local_path(url), INDEX_BASENAME)
        try:
            with open(path, "rb") as f:
                return parse_index(f.read(), path)
        except FileNotFoundError:
            raise ObjectNotFoundError("no index.json (is this an MDS dataset?)", path) from None
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


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")
