"""Advisory file locks that die with their process.

astream coordinates every process of a node through its cache directory, never through named
shared memory: a lock is ``flock(2)`` on a small file under ``<local>/.astream/locks``. The kernel
drops the lock when the last descriptor of its open file closes, which includes a process killed
by SIGKILL, so a crash can never leave a lock that blocks the next run.

``flock`` locks belong to an *open file description*: two ``FileLock`` objects on the same path
in one process are independent (a shared and an exclusive one conflict even in one process).
Callers must therefore never block on an exclusive lock of a file they hold shared themselves;
the cache tracks its own pins for that reason.

Blocking acquisition happens in a dedicated daemon thread so that the event loop never blocks and
no one polls: the waiting thread sleeps in the kernel until the holder lets go, and a process
that exits meanwhile does not wait for it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import fcntl
import os
import threading
from typing import Any

__all__ = ["FileLock", "lock_dir", "lock_path", "waiters"]


class _Waiters(concurrent.futures.Executor):
    """Runs each call on a new daemon thread.

    A lock wait sleeps in ``flock(2)`` until the holder lets go, which may be never if the
    holder is itself exiting and waiting for us. A ``ThreadPoolExecutor``'s threads are joined
    when the interpreter exits, so one such wait kept an interrupted process (a DataLoader worker
    after Ctrl-C) alive; a daemon thread is not waited for, and the kernel drops whatever it held
    when the process goes. Calls are per shard (a contended lock, a cache-lock section), so a
    thread each costs nothing that matters."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # handed to the awaiting caller
                fut.set_exception(exc)

        threading.Thread(target=run, name="astream-lock", daemon=True).start()
        return fut


_WAITERS = _Waiters()


def waiters() -> concurrent.futures.Executor:
    """The executor for blocking lock waits and cache-lock sections (daemon threads: see
    :class:`_Waiters`; nothing to re-make in a forked child, which inherits no threads)."""
    return _WAITERS


def lock_dir(root: str) -> str:
    return os.path.join(root, ".astream", "locks")


def lock_path(root: str, relpath: str, kind: str) -> str:
    """The lock file of ``relpath`` (a shard's path relative to ``root``) for ``kind``."""
    name = relpath.replace("%", "%25").replace("/", "%2F")
    return os.path.join(lock_dir(root), f"{name}.{kind}")


class FileLock:
    """One flock on one path. Not thread-safe; each user owns its own instance."""

    __slots__ = ("_fd", "mode", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd: int | None = None
        self.mode: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)

    def _take(self, mode: int, block: bool) -> bool:
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} already held")
        fd = self._open()
        try:
            fcntl.flock(fd, mode | (0 if block else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self.mode = mode
        return True

    def try_shared(self) -> bool:
        return self._take(fcntl.LOCK_SH, block=False)

    def try_exclusive(self) -> bool:
        return self._take(fcntl.LOCK_EX, block=False)

    def shared(self) -> None:
        self._take(fcntl.LOCK_SH, block=True)

    def exclusive(self) -> None:
        self._take(fcntl.LOCK_EX, block=True)

    async def exclusive_async(self) -> None:
        """Take the exclusive lock without blocking the event loop.

        If the awaiting task is cancelled while the thread still waits, the lock is released as
        soon as the thread gets it.
        """
        if self.try_exclusive():
            return
        fut = asyncio.get_running_loop().run_in_executor(waiters(), self._blocking_open_ex)
        try:
            fd = await asyncio.shield(fut)
        except asyncio.CancelledError:
            fut.add_done_callback(_close_result)
            raise
        self._fd = fd
        self.mode = fcntl.LOCK_EX

    def _blocking_open_ex(self) -> int:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def release(self) -> None:
        fd, self._fd, self.mode = self._fd, None, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor drops the flock

    def __enter__(self) -> FileLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        fd = getattr(self, "_fd", None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


def _close_result(fut: asyncio.Future[int]) -> None:
    if not fut.cancelled() and fut.exception() is None:
        os.close(fut.result())
