"""``sftp://user@host:port/path`` stores over SSH, with asyncssh (the ``sftp`` extra).

Theory of operation
-------------------
One SSH connection and one SFTP session per store and process, opened at first use in the
running loop (a forked child opens its own; the parent's is kept, never closed from the child).
SFTP multiplexes requests, so concurrent reads share the session. The URL's path is absolute
on the server and taken as written (no percent-decoding): a key is a file under it.

Authentication, as the reference's: the URL's user and password (if any), the private key in
``key_file`` or ``COMPOSER_SFTP_KEY_FILE`` (else the user's default keys and agent), and the
server's host key checked against ``known_hosts`` or ``COMPOSER_SFTP_KNOWN_HOSTS_FILE`` (else
``~/.ssh/known_hosts``): an unknown host key is refused, never trusted on first use.

Reads open the file, check its identity (``<mtime_ns>:<size>`` from ``fstat``: SFTP has no
ETag) against the one asked for, and read ``[start, end)`` at offsets. A listing walks the
directories under the prefix and returns the keys sorted, in one page. Writes go to a temporary
name in the same directory (parents created), then replace the key by ``posix-rename``
(atomic); ``put_if`` without ``expect`` links the temporary file to the key (``hardlink``,
which fails when the key exists), so it creates only while absent. SFTP has no conditional
replace or delete: ``expect=<version>`` is refused.

Errors: no such file -> not found; permission denied, failed authentication, an unverifiable
host key -> access denied; a lost connection, a refused or reset connect -> transient (the
session is opened again on the next try); other SFTP failures -> non-retryable.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import secrets
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import unquote

import asyncssh

from astream.errors import (
    AccessDeniedError,
    ConfigError,
    ObjectNotFoundError,
    StorageError,
    TransientStorageError,
)
from astream.storage.base import ObjectInfo, Seen
from astream.storage.common import (
    CHUNK_SIZE,
    changed_error,
    condition_failed,
    join_key,
    keep_inherited,
)

__all__ = ["SftpBackend", "parse_sftp_url"]

_CONNECT_S = 30.0


def parse_sftp_url(url: str) -> tuple[str | None, str | None, str, int, str]:
    """``sftp://user:pw@host:port/a/b`` -> (user, password, host, port, ``/a/b``)."""
    if not url.lower().startswith("sftp://"):
        raise ConfigError(f"url {url!r}: not an sftp:// URL")
    netloc, _, path = url[len("sftp://") :].partition("/")
    auth, at, hostport = netloc.rpartition("@")
    user, _, password = auth.partition(":")
    host, port = hostport, 22
    if hostport.startswith("["):  # [v6::addr]:port
        host, _, tail = hostport[1:].partition("]")
        port_text = tail[1:] if tail.startswith(":") else ""
    else:
        host, _, port_text = hostport.partition(":")
    if port_text:
        if not port_text.isdigit():
            raise ConfigError(f"url {_safe(url)!r}: bad port {port_text!r}")
        port = int(port_text)
    if not host:
        raise ConfigError(f"url {_safe(url)!r}: no host")
    return (
        unquote(user) if at and user else None,
        unquote(password) if at and password else None,
        host,
        port,
        "/" + path.strip("/"),
    )


def _safe(url: str) -> str:
    """``url`` with any password replaced by ``***``."""
    head, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    auth, at, hostport = netloc.rpartition("@")
    if at and ":" in auth:
        netloc = f"{auth.partition(':')[0]}:***@{hostport}"
    return f"{head}{sep}{netloc}{slash}{path}"


def _identity(attrs: Any) -> str:
    mtime = attrs.mtime_ns if attrs.mtime_ns is not None else (attrs.mtime or 0) * 10**9
    return f"{mtime}:{attrs.size}"


class SftpBackend:
    def __init__(
        self,
        url: str,
        *,
        key_file: str | None = None,
        known_hosts: str | None = None,
        connect_timeout: float = _CONNECT_S,
    ) -> None:
        user, password, host, port, root = parse_sftp_url(url)
        self._user, self._password, self._host, self._port = user, password, host, port
        self._root = root.rstrip("/") or "/"
        self._url = _safe(url).rstrip("/")
        self._shown = f"sftp://{user + '@' if user else ''}{host}:{port}"
        self._key_file = key_file or os.environ.get("COMPOSER_SFTP_KEY_FILE") or None
        self._known = known_hosts or os.environ.get("COMPOSER_SFTP_KNOWN_HOSTS_FILE") or None
        for name, path in (("key_file", self._key_file), ("known_hosts", self._known)):
            if path is not None and not os.path.isfile(path):
                raise ConfigError(f"sftp {name} {path!r}: no such file")
        self._connect_timeout = connect_timeout
        self._conn: Any = None
        self._sftp: Any = None
        self._pid = 0
        self._lock: asyncio.Lock | None = None

    @property
    def url(self) -> str:
        return self._url

    def url_for(self, key: str) -> str:
        return f"{self._shown}{self._path(key)}"

    def _path(self, key: str) -> str:
        return "/" + join_key(self._root.lstrip("/"), key) if (key or self._root != "/") else "/"

    async def _client(self) -> Any:
        pid = os.getpid()
        if self._sftp is not None and self._pid == pid:
            return self._sftp
        if self._pid != pid or self._lock is None:
            if self._pid != pid:
                keep_inherited(self._conn, self._sftp)  # the parent's
            self._conn = self._sftp = None
            self._lock, self._pid = asyncio.Lock(), pid
        async with self._lock:
            if self._sftp is None:
                options: dict[str, Any] = {"known_hosts": self._known or ()}
                if self._key_file is not None:
                    options["client_keys"] = [self._key_file]
                conn = await asyncssh.connect(
                    self._host,
                    self._port,
                    username=self._user,
                    password=self._password,
                    connect_timeout=self._connect_timeout,
                    **options,
                )
                try:
                    self._sftp = await conn.start_sftp_client()
                except BaseException:
                    conn.close()
                    raise
                self._conn = conn
        return self._sftp

    def _drop(self) -> None:
        """Forget a broken connection: the next request opens a new one."""
        conn, self._conn, self._sftp = self._conn, None, None
        if conn is not None and self._pid == os.getpid():
            conn.close()

    def _map(self, exc: BaseException, key: str) -> StorageError:
        url = self.url_for(key)
        what = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, asyncssh.SFTPNoSuchFile | asyncssh.SFTPNoSuchPath):
            return ObjectNotFoundError(f"not found ({what})", url)
        if isinstance(exc, asyncssh.SFTPPermissionDenied | asyncssh.PermissionDenied):
            return AccessDeniedError(f"access denied ({what})", url)
        if isinstance(exc, asyncssh.HostKeyNotVerifiable):
            return AccessDeniedError(
                f"the server's host key is not in known_hosts ({what}); add it, or name the "
                "file in COMPOSER_SFTP_KNOWN_HOSTS_FILE",
                url,
            )
        if isinstance(exc, asyncssh.SFTPError):
            return StorageError(f"SFTP request failed ({what})", url, retryable=False)
        self._drop()
        return TransientStorageError(f"connection failed ({what})", url)

    _ERRORS = (asyncssh.Error, OSError, asyncio.TimeoutError)

    async def iter_range(
        self, key: str, start: int, end: int | None, etag: str | None = None, seen: Seen = None
    ) -> AsyncIterator[bytes]:
        try:
            sftp = await self._client()
            f = await sftp.open(self._path(key), "rb")
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        try:
            try:
                attrs = await f.stat()
            except self._ERRORS as exc:
                raise self._map(exc, key) from exc
            got = _identity(attrs)
            if etag is not None and got != etag:
                raise changed_error(self.url_for(key), etag)
            if seen is not None:
                seen.append(got)
            stop = attrs.size if end is None else min(end, attrs.size)
            offset = start
            while offset < stop:
                n = min(CHUNK_SIZE, stop - offset)
                try:
                    data = await f.read(n, offset)
                except self._ERRORS as exc:
                    raise self._map(exc, key) from exc
                if not data:
                    raise TransientStorageError(
                        f"body cut short (file ended at {offset}, {stop} expected)",
                        self.url_for(key),
                    )
                yield data
                offset += len(data)
        finally:
            try:
                await f.close()
            except self._ERRORS:
                pass

    async def head(self, key: str) -> ObjectInfo:
        try:
            attrs = await (await self._client()).stat(self._path(key))
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc
        if attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY:
            raise ObjectNotFoundError("not found (a directory, not a file)", self.url_for(key))
        return ObjectInfo(key, int(attrs.size or 0), _identity(attrs))

    async def list_page(
        self, prefix: str, token: str | None
    ) -> tuple[list[ObjectInfo], str | None]:
        found: list[ObjectInfo] = []
        pending = [prefix.rpartition("/")[0]]
        try:
            sftp = await self._client()
            while pending:
                dirkey = pending.pop()
                try:
                    names = await sftp.readdir(self._path(dirkey))
                except (asyncssh.SFTPNoSuchFile, asyncssh.SFTPNoSuchPath):
                    continue
                for n in names:
                    if n.filename in (".", ".."):
                        continue
                    key = f"{dirkey}/{n.filename}" if dirkey else n.filename
                    if n.attrs.type == asyncssh.FILEXFER_TYPE_DIRECTORY:
                        if (key + "/").startswith(prefix) or prefix.startswith(key + "/"):
                            pending.append(key)
                    elif key.startswith(prefix) and not _is_temp(n.filename):
                        found.append(ObjectInfo(key, int(n.attrs.size or 0), _identity(n.attrs)))
        except self._ERRORS as exc:
            raise self._map(exc, prefix) from exc
        return sorted(found, key=lambda o: o.key), None

    async def _write(self, key: str, source: bytes | str, exclusive: bool) -> str:
        """Write ``source`` (bytes, or a local file's path) to a temporary name beside ``key``,
        then move it into place; the new identity."""
        path = self._path(key)
        tmp = posixpath.join(posixpath.dirname(path), f".astream-{secrets.token_hex(6)}.tmp")
        try:
            sftp = await self._client()
            await sftp.makedirs(posixpath.dirname(path), exist_ok=True)
            async with sftp.open(tmp, "wb") as f:
                if isinstance(source, bytes):
                    await f.write(source)
                else:
                    with open(source, "rb") as local:
                        while block := local.read(CHUNK_SIZE):
                            await f.write(block)
            try:
                if exclusive:
                    try:
                        await sftp.link(tmp, path)
                    except (asyncssh.SFTPFailure, asyncssh.SFTPFileAlreadyExists) as exc:
                        if await sftp.exists(path):
                            raise condition_failed(self.url_for(key), None) from exc
                        raise
                else:
                    await sftp.posix_rename(tmp, path)
            finally:
                if exclusive or await sftp.exists(tmp):
                    await sftp.remove(tmp)
            return _identity(await sftp.stat(path))
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    async def put(self, key: str, data: bytes) -> None:
        await self._write(key, bytes(data), False)

    async def put_file(self, key: str, path: str) -> None:
        await self._write(key, path, False)

    def _refuse(self, what: str, key: str) -> StorageError:
        return StorageError(
            f"{what} conditioned on a version (expect=) is not supported over SFTP: it has no "
            "conditional replace or delete",
            self.url_for(key),
            retryable=False,
        )

    async def put_if(self, key: str, data: bytes, expect: str | None) -> str:
        if expect is not None:
            raise self._refuse("put_if", key)
        return await self._write(key, bytes(data), True)

    async def put_file_if(self, key: str, path: str, expect: str | None) -> str:
        if expect is not None:
            raise self._refuse("put_file_if", key)
        return await self._write(key, path, True)

    async def delete(self, key: str, expect: str | None) -> None:
        if expect is not None:
            raise self._refuse("delete", key)
        try:
            await (await self._client()).remove(self._path(key))
        except (asyncssh.SFTPNoSuchFile, asyncssh.SFTPNoSuchPath):
            return
        except self._ERRORS as exc:
            raise self._map(exc, key) from exc

    async def aclose(self) -> None:
        conn, sftp, self._conn, self._sftp = self._conn, self._sftp, None, None
        if self._pid != os.getpid() or conn is None:
            return
        if sftp is not None:
            sftp.exit()
        conn.close()
        await conn.wait_closed()


def _is_temp(name: str) -> bool:
    return name.startswith(".astream-") and name.endswith(".tmp")
