"""The bridge from synchronous code to astream's event loop thread.

Theory of operation
-------------------
Each process has at most one astream event loop, run forever by a daemon thread and created on
first use. Synchronous callers (the torch dataset, the writer's upload sink, the CLI) hand it
coroutines and either block on the result (:func:`run`) or get a
``concurrent.futures.Future`` back (:func:`submit`). Exceptions raised on the loop are re-raised
in the caller unchanged (same type, same attributes).

Fork safety: a forked child (a DataLoader worker) inherits the parent's memory but not its
threads, so the inherited loop object is dead. The owning pid is recorded; a process whose pid
differs builds a fresh loop and thread and never touches the inherited one. What the loop thread
held at the instant of the fork (a module's lock, a buffered file's lock while it wrote to
stderr) would stay held in the child for good, so a fork from any other thread first parks the
loop thread between two callbacks -- where it holds nothing -- and lets it go once the child
exists (``register_at_fork``: :func:`_before_fork`, :func:`_after_fork_in_parent`). The loop
thread may be busy when workers are forked: the main process reads their first batches while
torch starts them (``runtime/lead.py``). A loop stuck in one callback for :data:`_PARK_WAIT_S`
is not waited for longer: that fork goes ahead unparked. The loop's name lookups run in its
executor's threads, inside the C library's resolver and its locks; the loop's
``getaddrinfo`` counts them from submission to return, and a fork, once the loop is parked
(so no new one starts), waits for those in flight (at most :data:`_RESOLVE_WAIT_S`). Other
executor work (hashing, decompression, lock waits, the epoch plan) touches nothing a child
uses and is not waited for.

Shutdown: an ``atexit`` hook stops the loop and joins the thread, after giving pending tasks a
chance to be cancelled, so interpreter exit never hangs on astream.

Calling :func:`run` from the loop thread itself would deadlock; it raises ``RuntimeError``
instead. Async callers use the async API directly and never come through here.

Layer: a foundation module beside :mod:`astream.errors`, below storage/. It imports only the
standard library, so storage/ (``storage/sync.py``), writer/ (the upload sink), runtime/, the
dataset and the CLI all reach the loop through it without importing runtime/. It is not in
core/ because core is pure (no asyncio, no threads); tests/test_layers.py keeps it that way.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["add_finalizer", "get_loop", "in_loop_thread", "run", "shutdown", "submit"]


class _LoopThread:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.executor = concurrent.futures.ThreadPoolExecutor(thread_name_prefix="astream-exec")
        self.loop.set_default_executor(self.executor)
        try:  # name lookups counted, so that a fork waits for them (_before_fork)
            self.loop.getaddrinfo = self._getaddrinfo  # type: ignore[method-assign]
        except AttributeError:  # a loop type that takes no attribute (uvloop's): uncounted
            pass
        self._ready = threading.Event()
        self.finalizers: list[Callable[[], Awaitable[None]]] = []
        self.thread = threading.Thread(target=self._main, name="astream-loop", daemon=True)
        self.thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        try:
            self.loop.run_forever()
        finally:
            try:
                for fin in self.finalizers:
                    try:
                        self.loop.run_until_complete(asyncio.wait_for(fin(), 5.0))
                    except Exception:
                        pass
                self._cancel_all()
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()

    async def _getaddrinfo(
        self,
        host: Any,
        port: Any,
        *,
        family: int = 0,
        type: int = 0,
        proto: int = 0,
        flags: int = 0,
    ) -> Any:
        """``loop.getaddrinfo`` (asyncio's: ``socket.getaddrinfo`` in the executor), counted in
        :data:`_resolving` from submission until it returns or is cancelled before it ran."""

        def resolve() -> Any:
            try:
                return socket.getaddrinfo(host, port, family, type, proto, flags)
            finally:
                _resolved(-1)

        _resolved(+1)
        try:
            job = self.executor.submit(resolve)
        except BaseException:
            _resolved(-1)
            raise
        try:
            return await asyncio.wrap_future(job)
        except asyncio.CancelledError:
            if job.cancel():  # never ran: resolve() will not count itself out
                _resolved(-1)
            raise

    def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
        for t in tasks:
            t.cancel()
        if tasks:
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))

    def stop(self, timeout: float = 5.0) -> None:
        if self.loop.is_closed():
            return
        try:
            self.loop.call_soon_threadsafe(self.loop.stop)
        except RuntimeError:
            return
        self.thread.join(timeout)


_lock = threading.Lock()
_current: _LoopThread | None = None


def _get() -> _LoopThread:
    global _current
    cur = _current
    if cur is not None and cur.pid == os.getpid() and cur.thread.is_alive():
        return cur
    with _lock:
        cur = _current
        if cur is None or cur.pid != os.getpid() or not cur.thread.is_alive():
            # After a fork the inherited loop belongs to a thread that does not exist here:
            # abandon it without touching it, and start our own.
            cur = _LoopThread()
            _current = cur
        return cur


def get_loop() -> asyncio.AbstractEventLoop:
    """This process's astream loop, started on first use."""
    return _get().loop


def add_finalizer(fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``await fn()`` on this process's loop when it shuts down (closing sessions)."""
    _get().finalizers.append(fn)


def in_loop_thread() -> bool:
    cur = _current
    return cur is not None and cur.pid == os.getpid() and threading.current_thread() is cur.thread


def submit(coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
    """Schedule ``coro`` on the loop thread; return a thread-safe future of its result."""
    return asyncio.run_coroutine_threadsafe(coro, _get().loop)


def run(
    fn: Callable[..., Awaitable[T]] | Coroutine[Any, Any, T],
    *args: Any,
    timeout: float | None = None,
) -> T:
    """Run a coroutine (or ``fn(*args)``) on the loop thread and wait for its result.

    A ``KeyboardInterrupt`` while waiting cancels the coroutine before propagating.
    """
    if in_loop_thread():
        raise RuntimeError("astream.bridge.run() called from the loop thread itself")
    coro: Coroutine[Any, Any, T] = fn if asyncio.iscoroutine(fn) else fn(*args)  # type: ignore[operator,assignment]
    fut: concurrent.futures.Future[T] = submit(coro)
    try:
        return fut.result(timeout)
    except concurrent.futures.TimeoutError:
        fut.cancel()
        raise
    except BaseException:
        if not fut.done():
            fut.cancel()
        raise


def shutdown() -> None:
    """Stop this process's loop thread (idempotent). A later call starts a new one."""
    global _current
    with _lock:
        cur = _current
        _current = None
    if cur is not None and cur.pid == os.getpid():
        cur.stop()


_PARK_WAIT_S = 1.0  # the longest a fork waits for the loop thread to reach its next callback
_RESOLVE_WAIT_S = 15.0  # ... and then for the name lookups in flight (a slow resolver's retries)
_resolving = [0]  # getaddrinfo calls of this process's loop submitted and not yet returned
_resolving_done = threading.Condition()  # notified when that count comes back to 0


def _resolved(n: int) -> None:
    with _resolving_done:
        _resolving[0] += n
        if _resolving[0] == 0:
            _resolving_done.notify_all()


_PARK_MAX_S = 60.0  # the longest the loop stays parked should the fork never return
_parked: dict[int, threading.Event] = {}  # forking thread -> set it to let the loop go on


def _before_fork() -> None:
    """Park this process's loop thread (when it runs and this is not it) until the fork is
    done: it then holds no lock the child would inherit held."""
    cur = _current
    if cur is None or cur.pid != os.getpid() or threading.current_thread() is cur.thread:
        return
    if not cur.thread.is_alive() or cur.loop.is_closed():
        return
    here, go = threading.Event(), threading.Event()

    def park() -> None:
        here.set()
        go.wait(_PARK_MAX_S)

    try:
        cur.loop.call_soon_threadsafe(park)
    except RuntimeError:  # closed meanwhile
        return
    if here.wait(_PARK_WAIT_S):
        _parked[threading.get_ident()] = go  # two threads forking at once each free their own
    else:
        go.set()  # busy in one callback for that long: fork unparked; park() will not wait
    # a name lookup runs in an executor thread, inside the C library's resolver and its locks;
    # with the loop parked no new one starts: wait for those in flight to return
    with _resolving_done:
        _resolving_done.wait_for(lambda: _resolving[0] <= 0, _RESOLVE_WAIT_S)


def _after_fork_in_parent() -> None:
    go = _parked.pop(threading.get_ident(), None)
    if go is not None:
        go.set()


def _after_fork_in_child() -> None:
    # The lock may have been held by another thread at the instant of the fork.
    global _lock, _parked, _resolving_done
    _lock = threading.Lock()
    _parked = {}
    _resolving_done = threading.Condition()
    _resolving[0] = 0  # the parent's lookups are not this process's


atexit.register(shutdown)
os.register_at_fork(
    before=_before_fork,
    after_in_parent=_after_fork_in_parent,
    after_in_child=_after_fork_in_child,
)
