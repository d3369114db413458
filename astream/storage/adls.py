"""``azure-dl://<filesystem>@<account>.dfs.core.windows.net/<path>`` stores: Azure Data Lake
Storage Gen2, read and written through the Blob endpoint of the same account.

Theory of operation
-------------------
An ADLS Gen2 account (hierarchical namespace on) serves the same data over two endpoints:
``<account>.dfs.core.windows.net`` (the Data Lake API: paths, directories, ACLs) and
``<account>.blob.core.windows.net`` (the Blob API), where a file system is a container and a
file's path is its blob name. Reading, listing and writing files needs nothing the Blob API
lacks, so this backend is :class:`~astream.storage.azure.AzureBackend` on the account's Blob
endpoint (the host's ``dfs`` label replaced by ``blob``): same credentials, same direct signed
reads, same errors. The Data Lake API itself is not used: directory operations and POSIX ACLs
are not needed to read a dataset, and Azurite (the emulator tests run against) does not serve it.

The URL is the reference's: ``azure-dl://container@account.dfs.core.windows.net/path``; the
short form ``azure-dl://container/path`` takes the account from ``account_name``,
``AZURE_STORAGE_ACCOUNT`` or ``AZURE_ACCOUNT_NAME``. The key: ``account_key``, else
``AZURE_STORAGE_KEY``, else the reference's ``AZURE_ACCOUNT_ACCESS_KEY``, else the
``AccountKey`` of ``AZURE_STORAGE_CONNECTION_STRING`` when it names the same account, else
anonymous. ``endpoint`` replaces the Blob endpoint (Azurite, a proxy).
"""

from __future__ import annotations

import os
from typing import Any

from astream.errors import ConfigError
from astream.storage.azure import AzureBackend

__all__ = ["AdlsBackend", "parse_adls_url"]


def parse_adls_url(url: str) -> tuple[str, str | None, str]:
    """``azure-dl://fs@acct.dfs.core.windows.net/a/b`` -> (``fs``, the host, ``a/b``); the
    host is None in the short form ``azure-dl://fs/a/b``."""
    if not url.lower().startswith("azure-dl://"):
        raise ConfigError(f"url {url!r}: not an azure-dl:// URL")
    netloc, _, prefix = url[len("azure-dl://") :].partition("/")
    container, at, host = netloc.partition("@")
    if not container or (at and not host):
        raise ConfigError(
            f"url {url!r}: expected azure-dl://<filesystem>@<account>.dfs.core.windows.net/path"
        )
    return container, host or None, prefix.strip("/")


def _conn_key(account: str) -> str | None:
    """The ``AccountKey`` of ``AZURE_STORAGE_CONNECTION_STRING`` if it is ``account``'s."""
    conn = os.environ.get("AZURE_STORAGE_CONNECTION_STRING") or ""
    parts = dict(p.split("=", 1) for p in conn.split(";") if "=" in p)
    return parts.get("AccountKey") if parts.get("AccountName") == account else None


class AdlsBackend(AzureBackend):
    def __init__(
        self,
        url: str,
        *,
        account_name: str | None = None,
        account_key: str | None = None,
        endpoint: str | None = None,
        **options: Any,
    ) -> None:
        if "connection_string" in options:
            raise ConfigError(
                "connection_string is not an azure-dl:// option: the account is the URL's; "
                "pass account_key= (and endpoint= for an emulator)"
            )
        container, host, prefix = parse_adls_url(url)
        env = os.environ.get
        if host is not None:
            account = host.split(".", 1)[0]
            if ".dfs." not in f".{host}" or not account:
                raise ConfigError(f"url {url!r}: the host must be <account>.dfs.<suffix>")
            if account_name is not None and account_name != account:
                raise ConfigError(f"url {url!r} names account {account!r}, not {account_name!r}")
            blob = "https://" + host.replace(".dfs.", ".blob.", 1)
        else:
            found = account_name or env("AZURE_STORAGE_ACCOUNT") or env("AZURE_ACCOUNT_NAME")
            if not found:
                raise ConfigError(
                    f"url {url!r}: no account: write azure-dl://{container}@<account>"
                    ".dfs.core.windows.net/..., or set AZURE_STORAGE_ACCOUNT"
                )
            account, blob = found, f"https://{found}.blob.core.windows.net"
            host = f"{account}.dfs.core.windows.net"
        key = (
            account_key
            or env("AZURE_STORAGE_KEY")
            or env("AZURE_ACCOUNT_ACCESS_KEY")
            or _conn_key(account)
        )
        super().__init__(
            f"az://{container}/{prefix}",
            account_name=account,
            account_key=key,
            endpoint=endpoint or blob,
            **options,
        )
        self._url = url.rstrip("/")
        self._shown = f"azure-dl://{container}@{host}"

    def url_for(self, key: str) -> str:
        return f"{self._shown}/{self._key(key)}"
