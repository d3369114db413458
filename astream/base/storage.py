"""The reference's ``streaming.base.storage`` downloader, on astream's stores.

``CloudDownloader.get(remote).download(remote, local)`` (or ``direct_download``) copies one
object -- any URL astream reads: ``s3://``, ``gs://``, ``azure://``, ``http(s)://`` or a
local path -- to a local file, as the reference does, through astream's retrying store. The
uploaders are left out: ``MDSWriter(out=remote)`` writes to a bucket, and
``astream.storage.sync.upload`` copies a directory (docs/migrating.md).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from astream import bridge
from astream.errors import ConfigError, StorageTimeoutError
from astream.storage.registry import open_store

__all__ = ["CloudDownloader"]

DEFAULT_TIMEOUT = 60.0


class CloudDownloader:
    """Downloads single objects. ``storage_options`` go to the store (credentials,
    endpoint)."""

    def __init__(self, **storage_options: Any) -> None:
        self.storage_options = storage_options

    @classmethod
    def get(cls, remote_dir: str | None = None, **storage_options: Any) -> CloudDownloader:
        """A downloader (one class serves every scheme astream reads)."""
        return cls(**storage_options)

    @classmethod
    def direct_download(
        cls, remote: str | None, local: str, timeout: float = DEFAULT_TIMEOUT
    ) -> None:
        """``get(remote).download(remote, local, timeout)``."""
        downloader = cls.get(remote)
        downloader.download(remote, local, timeout)
        downloader.clean_up()

    def download(self, remote: str | None, local: str, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Copy ``remote`` to the file ``local`` unless that exists already, within
        ``timeout`` seconds (``StorageTimeoutError``); its directory is made."""
        if os.path.exists(local):
            return
        if not remote:
            raise ConfigError(f"remote: no remote given and no local file {local}")
        prefix, _, key = remote.rstrip("/").rpartition("/")
        if not key:
            raise ConfigError(f"remote: {remote!r} names no object")
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)

        async def go() -> None:
            store = open_store(prefix or ".", **self.storage_options)
            try:
                await asyncio.wait_for(store.get_to_file(key, local), timeout)
            finally:
                await store.aclose()

        try:
            bridge.run(go())
        except StorageTimeoutError:
            raise
        except TimeoutError:  # asyncio.wait_for's
            raise StorageTimeoutError(f"download took over {timeout} s", remote) from None

    def clean_up(self) -> None:
        """Nothing to release: each download opens and closes its own store."""
