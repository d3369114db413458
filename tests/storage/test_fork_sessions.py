"""A forked child that replaces an aiohttp session it inherited (GCS's ``LazySession``; Azure and
the S3 SDK path hold theirs the same way) must not finalise the parent's: its connector would
close the parent's sockets through the parent's loop, whose epoll instance the child shares,
and the parent's idle keep-alive connection would never hear its next answer."""

from __future__ import annotations

import asyncio
import gc
import os

from astream.storage.gcs import LazySession

from .test_h1 import Scripted, keep_alive, ok


def test_a_child_replacing_the_session_leaves_the_parents_connections_alone() -> None:
    s = Scripted(keep_alive([ok(b"parent"), ok(b"child"), ok(b"parent again")]))
    lazy = LazySession()
    loop = asyncio.new_event_loop()

    async def get() -> bytes:
        async with asyncio.timeout(5):
            async with lazy.get().get(f"http://127.0.0.1:{s.port}/k") as resp:
                return await resp.read()

    try:
        assert loop.run_until_complete(get()) == b"parent"  # its connection stays idle, kept
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = 0 if asyncio.run(get()) == b"child" else 2  # a session of its own
                gc.collect()  # the inherited one, were it let go, is finalised here
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert loop.run_until_complete(get()) == b"parent again"
        assert s.connections == 2  # the parent's connection was re-used, and answered
        loop.run_until_complete(lazy.aclose())
    finally:
        loop.close()
        s.close()
