"""An SFTP server on 127.0.0.1 (asyncssh's own ``SFTPServer``), serving a local directory.

``SftpServer(root).start()`` generates a host key and a client key in a private directory,
writes a ``known_hosts`` file naming the host key for ``[127.0.0.1]:port`` and listens, in its
own loop thread, accepting only that client key (user ``tester``). Paths are chrooted to
``root``. ``env()`` gives ``COMPOSER_SFTP_KEY_FILE`` and ``COMPOSER_SFTP_KNOWN_HOSTS_FILE``;
``store_options()`` the same as ``open_store`` options. ``drop_connections()`` cuts every
client connection from the server's side; ``stop()`` closes the listener and its connections.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from typing import Any

import asyncssh

__all__ = ["SftpServer"]


class SftpServer:
    name = "asyncssh SFTP server"
    user = "tester"

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)
        self._dir = tempfile.mkdtemp(prefix="astream-sftp-")
        self.key_file = os.path.join(self._dir, "id_client")
        self.known_hosts = os.path.join(self._dir, "known_hosts")
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Any = None
        self._conns: set[Any] = set()  # the accepted connections, closed by stop()

    @property
    def url(self) -> str:
        """``sftp://tester@127.0.0.1:PORT`` (append an absolute path under ``root``)."""
        return f"sftp://{self.user}@127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            "COMPOSER_SFTP_KEY_FILE": self.key_file,
            "COMPOSER_SFTP_KNOWN_HOSTS_FILE": self.known_hosts,
        }

    def store_options(self) -> dict[str, Any]:
        return {"key_file": self.key_file, "known_hosts": self.known_hosts}

    def start(self) -> SftpServer:
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key = asyncssh.generate_private_key("ssh-ed25519")
        client_key.write_private_key(self.key_file)
        authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())
        started = threading.Event()
        failure: list[BaseException] = []
        loop = self._loop = asyncio.new_event_loop()
        root = self.root.encode()

        def sftp_factory(chan: Any) -> asyncssh.SFTPServer:
            return asyncssh.SFTPServer(chan, chroot=root)

        async def listen() -> None:
            self._server = await asyncssh.listen(
                "127.0.0.1",
                0,
                server_host_keys=[host_key],
                authorized_client_keys=authorized,
                sftp_factory=sftp_factory,
                allow_scp=False,
                acceptor=self._conns.add,
            )
            self.port = self._server.sockets[0].getsockname()[1]

        def main() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(listen())
            except BaseException as exc:  # reported by start()
                failure.append(exc)
                started.set()
                return
            loop.call_soon(started.set)
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.run_until_complete(self._close_all())
            left = asyncio.all_tasks(loop)  # the sessions' handlers of closed connections
            for task in left:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=main, name="astream-sftp", daemon=True)
        self._thread.start()
        if not started.wait(30) or failure:
            raise RuntimeError(f"SFTP server did not start: {failure}")
        line = f"[127.0.0.1]:{self.port} {host_key.export_public_key().decode().strip()}\n"
        with open(self.known_hosts, "w") as f:
            f.write(line)
        return self

    async def _close_all(self) -> None:
        conns, self._conns = list(self._conns), set()
        for conn in conns:
            conn.close()
        for conn in conns:
            await asyncio.wait_for(conn.wait_closed(), 10)

    def drop_connections(self) -> None:
        """Close every client connection from the server's side (a server restart, a network
        cut): the client's next request meets a lost connection."""
        loop = self._loop
        if loop is not None:
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(15)

    def stop(self) -> None:
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(15)

    def __enter__(self) -> SftpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
