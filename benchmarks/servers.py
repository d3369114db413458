"""Processes the cold scenarios need: the S3 emulator (moto) and the shaping proxy before it.

Each runs in its own process (so neither competes for the harness's GIL) and announces its
port with one ``READY <port>`` line on stdout, which the harness reads: no port guessing and no
polling. Each exits when the harness does (see :func:`exit_with_parent`).
``python -m benchmarks.servers moto`` is the emulator's entry point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parent.parent


def _spawn(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,  # held open by us: its EOF tells the child we are gone
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise RuntimeError(f"{args!r} did not start: {line!r}")
    # drain stdout so the child never blocks on a full pipe
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, int(line.split()[1])


class S3Emulator:
    """moto on 127.0.0.1 plus the proxy; ``endpoint`` is the proxy, ``direct`` is moto."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[str]] = []
        self.direct = ""
        self.endpoint = ""

    def __enter__(self) -> S3Emulator:
        moto, mport = _spawn(["-m", "benchmarks.servers", "moto"])
        self._procs.append(moto)
        self._proxy_to(f"http://127.0.0.1:{mport}")
        return self

    def _proxy_to(self, direct: str) -> None:
        """Start the shaping proxy in front of the server at ``direct``."""
        self.direct = direct
        proxy, pport = _spawn(
            ["-m", "benchmarks.proxy", "--upstream", direct, "--exit-with-parent"]
        )
        self._procs.append(proxy)
        self.endpoint = f"http://127.0.0.1:{pport}"

    def __exit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for p in reversed(self._procs):
            p.terminate()
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    def control(self, what: str, **query: float) -> dict[str, float]:
        qs = "&".join(f"{k}={v}" for k, v in query.items())
        url = f"{self.endpoint}/__bench__/{what}" + (f"?{qs}" if qs else "")
        method = "GET" if what == "stats" else "POST"
        with urllib.request.urlopen(urllib.request.Request(url, method=method)) as r:
            result: dict[str, float] = json.loads(r.read())
            return result


class GcsEmulator(S3Emulator):
    """fake-gcs-server (in memory) on 127.0.0.1 plus the same proxy: a second server for the
    cold scenarios, to tell what the client costs from what moto (one Python process, ~8-10 ms
    of CPU per request) costs. ``endpoint`` is the proxy (``STORAGE_EMULATOR_HOST``),
    ``direct`` the server."""

    def __enter__(self) -> GcsEmulator:
        from astream.testing.servers import FakeGcsServer

        self._gcs = FakeGcsServer().start()
        self._proxy_to(self._gcs.url)
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(None, None, None)
        self._gcs.stop()

    def create_bucket(self, name: str) -> None:
        self._gcs.create_bucket(name)

    @property
    def server_pid(self) -> int:
        assert self._gcs.proc is not None
        return self._gcs.proc.pid


def exit_with_parent() -> None:
    """In a server process: exit as soon as the parent's end of our stdin closes (the parent
    exited, even killed), so no emulator outlives the harness. A blocking read, no polling."""

    def watch() -> None:
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _run_moto() -> None:
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    exit_with_parent()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    wsgi = server._server
    assert wsgi is not None
    print(f"READY {wsgi.port}", flush=True)
    threading.Event().wait()


if __name__ == "__main__" and sys.argv[1:] == ["moto"]:
    _run_moto()
