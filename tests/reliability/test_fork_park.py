"""A fork while astream's loop thread is busy (astream/bridge.py, "Fork safety"): the loop
thread is parked between two callbacks for the fork, so nothing it holds is inherited held;
the loop's name lookups in flight (in executor threads, inside the C resolver) are waited
for; a loop stuck in one callback delays a fork by at most ``_PARK_WAIT_S`` and is not blocked
afterwards; a fork from the loop thread itself is not parked (it would wait for itself)."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from astream import bridge


def _fork(child: Callable[[], int]) -> tuple[int, float]:
    """Fork; the child exits with ``child()``'s code. The child's exit code and how long
    ``os.fork`` took in the parent."""
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            code = child()
        finally:
            os._exit(code)
    took = time.perf_counter() - t
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), took


def test_a_fork_never_inherits_a_lock_the_loop_thread_holds() -> None:
    lock = threading.Lock()
    stop = threading.Event()
    rounds = [0]

    async def hog() -> None:  # holds the lock for 20 ms of every ~20 ms, blocking the loop
        while not stop.is_set():
            with lock:
                rounds[0] += 1
                time.sleep(0.02)
            await asyncio.sleep(0)

    fut = bridge.submit(hog())
    try:
        while rounds[0] < 2:
            time.sleep(0.005)
        codes = [_fork(lambda: 0 if lock.acquire(timeout=1.0) else 3)[0] for _ in range(10)]
        before = rounds[0]
        time.sleep(0.1)
        assert rounds[0] > before  # the parent's loop was let go after each fork
    finally:
        stop.set()
        fut.result(5)
    assert codes == [0] * 10


def test_two_threads_forking_at_once_each_fork_parked() -> None:
    """Forks from two threads at once: each child still finds the loop's lock free, and the
    loop is let go after all of them."""
    lock = threading.Lock()
    stop = threading.Event()
    rounds = [0]

    async def hog() -> None:
        while not stop.is_set():
            with lock:
                rounds[0] += 1
                time.sleep(0.005)
            await asyncio.sleep(0)

    codes: list[int] = []

    def forks() -> None:
        for _ in range(8):
            codes.append(_fork(lambda: 0 if lock.acquire(timeout=1.0) else 3)[0])

    fut = bridge.submit(hog())
    try:
        while rounds[0] < 2:
            time.sleep(0.005)
        threads = [threading.Thread(target=forks) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        before = rounds[0]
        time.sleep(0.1)
        assert rounds[0] > before
    finally:
        stop.set()
        fut.result(5)
    assert codes == [0] * 16


def test_a_loop_stuck_in_one_callback_delays_a_fork_only_so_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(bridge, "_PARK_WAIT_S", 0.1)
    started = threading.Event()

    async def stuck() -> None:
        started.set()
        time.sleep(0.6)  # one callback, never yielding

    fut = bridge.submit(stuck())
    assert started.wait(5)
    code, took = _fork(lambda: 0)
    assert code == 0 and 0.1 <= took < 0.5, took
    fut.result(5)
    t = time.perf_counter()  # the late park() found the fork done: it does not block the loop
    assert bridge.run(asyncio.sleep(0, "ok")) == "ok"
    assert time.perf_counter() - t < 0.5


def test_a_fork_from_the_loop_thread_is_not_parked() -> None:
    async def fork_here() -> Any:
        return _fork(lambda: 0)

    code, took = bridge.run(fork_here())
    assert code == 0 and took < bridge._PARK_WAIT_S, took


def test_a_fork_waits_for_the_loops_name_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    resolver = threading.Lock()  # stands in for the C library's resolver state
    inside = threading.Event()
    answer = [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 80))]

    def slow_lookup(*args: Any) -> Any:
        with resolver:
            inside.set()
            time.sleep(0.3)
            return answer

    monkeypatch.setattr(socket, "getaddrinfo", slow_lookup)
    fut = bridge.submit(bridge.get_loop().getaddrinfo("astream-test.invalid", 80))
    assert inside.wait(5)
    code, took = _fork(lambda: 0 if resolver.acquire(timeout=1.0) else 3)
    assert code == 0 and 0.15 <= took < 2.0, took  # it waited for the lookup, not longer
    assert fut.result(5) == answer and bridge._resolving[0] == 0


def test_a_lookup_cancelled_before_it_ran_is_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every executor thread busy, a lookup queued and then cancelled: it never runs, and it
    is not counted as in flight (a fork after it does not wait for it)."""
    loop = bridge.get_loop()
    ex = bridge._get().executor
    release = threading.Event()
    busy = [ex.submit(release.wait, 10) for _ in range(ex._max_workers)]
    ran: list[int] = []
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a: ran.append(1) or [])
    monkeypatch.setattr(bridge, "_RESOLVE_WAIT_S", 5.0)
    try:
        fut = bridge.submit(loop.getaddrinfo("astream-test.invalid", 80))
        deadline = time.monotonic() + 5
        while bridge._resolving[0] != 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert bridge._resolving[0] == 1
        fut.cancel()
        while bridge._resolving[0] != 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert bridge._resolving[0] == 0
    finally:
        release.set()
        for b in busy:
            b.result(5)
    code, took = _fork(lambda: 0)
    assert code == 0 and took < 1.0 and ran == []


def test_a_child_forked_past_a_slow_lookup_counts_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A lookup slower than ``_RESOLVE_WAIT_S``: the fork goes ahead, and the child, which
    has no such lookup, does not count it (its own forks would wait for it in vain)."""
    inside = threading.Event()

    def slow_lookup(*args: Any) -> Any:
        inside.set()
        time.sleep(0.5)
        return []

    monkeypatch.setattr(socket, "getaddrinfo", slow_lookup)
    monkeypatch.setattr(bridge, "_RESOLVE_WAIT_S", 0.05)
    fut = bridge.submit(bridge.get_loop().getaddrinfo("astream-test.invalid", 80))
    assert inside.wait(5)
    code, took = _fork(lambda: 0 if bridge._resolving[0] == 0 else 4)
    assert bridge._resolving[0] == 1  # the fork went ahead with it in flight here
    assert code == 0 and took < 0.4, took
    assert fut.result(5) == [] and bridge._resolving[0] == 0


def test_a_store_reaches_a_server_by_name_through_the_counted_lookup(
    http_server: Any, http_root: str
) -> None:
    """The stores' clients resolve through the loop's counted ``getaddrinfo`` (every other
    test server is an IP literal, which needs no lookup): a read by ``localhost`` works, is
    counted while it resolves, and leaves nothing counted."""
    from astream.storage.registry import open_store

    with open(os.path.join(http_root, "by-name.bin"), "wb") as f:
        f.write(b"0123456789")
    url = http_server.url.replace("127.0.0.1", "localhost")
    assert "localhost" in url
    seen: list[int] = []
    real = socket.getaddrinfo

    def watched(*args: Any) -> Any:
        seen.append(bridge._resolving[0])
        return real(*args)

    socket.getaddrinfo = watched
    try:
        store = open_store(url)
        assert bridge.run(store.get_range("by-name.bin", 2, 6)) == b"2345"
    finally:
        socket.getaddrinfo = real
    assert seen and min(seen) >= 1 and bridge._resolving[0] == 0
