"""astream.storage.h1, the HTTP/1.1 client of the direct S3 reads, against a scripted server on
127.0.0.1: keep-alive re-use, the one re-send on a connection the server closed while idle,
bodies by length, chunked and cut short, HEAD, cancellation, the pool's bound, and a fork."""

from __future__ import annotations

import asyncio
import base64
import gc
import os
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest

from astream.errors import StorageError, TransientStorageError
from astream.storage.h1 import Pool
from astream.storage.retry import retry_cause

Handler = Callable[["Scripted", asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Scripted:
    """A TCP server in its own thread and loop; each connection is handed to ``handler`` with
    the server and its 0-based number; :meth:`head` reads a request head and records it."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.heads: list[bytes] = []
        self.open_now = 0
        self.most_open = 0
        self._loop = asyncio.new_event_loop()
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            n = self.connections
            self.connections += 1
            self.open_now += 1
            self.most_open = max(self.most_open, self.open_now)
            try:
                await self.handler(self, reader, writer, n)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                self.open_now -= 1
                writer.close()

        self._server = self._loop.run_until_complete(asyncio.start_server(serve, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        ready.set()
        self._loop.run_forever()

    async def head(self, reader: asyncio.StreamReader) -> bytes:
        """Read one request head (empty at the client's EOF)."""
        try:
            data = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return b""
        self.heads.append(data)
        return data

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], Scripted]]:
    made: list[Scripted] = []

    def make(handler: Handler) -> Scripted:
        s = Scripted(handler)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def ok(body: bytes, *extra: str) -> bytes:
    lines = ["HTTP/1.1 200 OK", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def url(server: Scripted, path: str = "/k") -> tuple[str, str, str]:
    return ("http", f"127.0.0.1:{server.port}", path)


async def get(pool: Pool, server: Scripted, path: str = "/k", method: str = "GET") -> Any:
    resp = await pool.request(method, url(server, path), {"Range": "bytes=0-"}, "s3://b/k")
    try:
        return resp.status, resp.headers, await resp.read()
    finally:
        resp.release()


def bodies(server: Scripted, n: int) -> list[bytes]:
    """``n`` GETs in turn through one fresh pool, on a fresh loop: their bodies."""

    async def main() -> list[bytes]:
        pool = Pool(4)
        return [bytes((await get(pool, server))[2]) for _ in range(n)]

    return asyncio.run(main())


def once(raw: bytes) -> Handler:
    """Answer a connection's first request with ``raw``, then close it."""

    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.head(r)
        w.write(raw)
        await w.drain()

    return handler


def keep_alive(replies: list[bytes]) -> Handler:
    """Answer each request on a connection with the next reply, keeping the connection."""

    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while await s.head(r):
            w.write(replies.pop(0))
            await w.drain()

    return handler


def test_keep_alive_reuses_one_connection(serve: Any) -> None:
    s = serve(keep_alive([ok(b"one"), ok(b"two", "X-A: 1", "X-A: 2"), ok(b"")]))

    async def main() -> list[Any]:
        pool = Pool(4)
        out = [await get(pool, s), await get(pool, s), await get(pool, s)]
        assert pool.open_connections == 1
        await pool.aclose()
        assert pool.open_connections == 0
        return out

    out = asyncio.run(main())
    assert [o[2] for o in out] == [b"one", b"two", b""]
    assert out[1][1].get("x-a") == "1, 2" and out[1][1]["X-A"] == "1, 2"
    assert s.connections == 1
    head = s.heads[0].decode()
    assert head.startswith("GET /k HTTP/1.1\r\n")
    assert f"host: 127.0.0.1:{s.port}\r\n" in head.lower()
    assert "range: bytes=0-\r\n" in head.lower()


def test_connection_close_is_not_reused(serve: Any) -> None:
    # the server says it closes but lingers: a connection re-used anyway gets "reused"
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.head(r)
        w.write(ok(f"c{n}".encode(), "Connection: close"))
        await w.drain()
        if await s.head(r):
            w.write(ok(b"reused"))
            await w.drain()

    s = serve(handler)

    assert bodies(s, 3) == [b"c0", b"c1", b"c2"]
    assert s.connections == 3


def test_bytes_past_the_body_retire_the_connection(serve: Any) -> None:
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while await s.head(r):
            w.write(ok(b"abc") + b"GARBAGE" if n == 0 else ok(b"next"))
            await w.drain()

    s = serve(handler)

    assert bodies(s, 2) == [b"abc", b"next"]
    assert s.connections == 2


def test_a_long_body_is_read_to_its_length_and_no_further(serve: Any) -> None:
    # 3 MiB then garbage in one write: the body's end comes off the socket (not out of the
    # head's read), so a read of one byte too many would take a byte of the garbage
    big = os.urandom(3 << 20)

    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while await s.head(r):
            w.write(ok(big) + b"GARBAGE" if n == 0 else ok(b"next"))
            await w.drain()

    s = serve(handler)
    assert bodies(s, 2) == [big, b"next"]
    assert s.connections == 2


def test_a_slow_reader_stops_the_socket_reads(serve: Any) -> None:
    size = 16 << 20

    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.head(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for _ in range(size >> 20):
            w.write(b"q" * (1 << 20))
            await w.drain()

    s = serve(handler)

    async def main() -> int:
        pool = Pool(4)
        resp = await pool.request("GET", url(s), {}, "w")
        chunks = resp.chunks()
        got = len(await chunks.__anext__())
        await asyncio.sleep(0.5)  # the server could send all 16 MiB meanwhile
        held = resp._conn._buffered
        async for chunk in chunks:
            got += len(chunk)
        resp.release()
        assert got == size
        return held

    held = asyncio.run(main())
    assert held <= (1 << 20) + (1 << 18), held  # the limit, plus what one socket read brings


def test_http10_answer_is_not_reused(serve: Any) -> None:
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while await s.head(r):
            w.write(ok(f"c{n}".encode()).replace(b"HTTP/1.1", b"HTTP/1.0", 1))
            await w.drain()

    s = serve(handler)

    assert bodies(s, 2) == [b"c0", b"c1"]
    assert s.connections == 2


def test_idle_connection_closed_by_the_server_is_sent_again_once(serve: Any) -> None:
    # connection 0 answers one request, then reads the second and closes without a word (a
    # server's keep-alive timeout racing the request); connection 1 answers
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.head(r)
        if n == 0:
            w.write(ok(b"first"))
            await w.drain()
            await s.head(r)
            return
        w.write(ok(b"again"))
        await w.drain()

    s = serve(handler)

    assert bodies(s, 2) == [b"first", b"again"]
    assert s.connections == 2
    assert len(s.heads) == 3  # the second request reached the server twice


def test_a_fresh_connection_that_fails_is_not_sent_again(serve: Any) -> None:
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.head(r)  # and close without an answer

    s = serve(handler)

    async def main() -> None:
        pool = Pool(4)
        with pytest.raises(TransientStorageError, match="connection failed") as info:
            await get(pool, s)
        assert retry_cause(info.value) == "reset"
        assert "s3://b/k" in str(info.value)
        assert pool.open_connections == 0

    asyncio.run(main())
    assert s.connections == 1 and len(s.heads) == 1


def test_a_reused_connection_whose_answer_began_is_not_sent_again(serve: Any) -> None:
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        await s.head(r)
        w.write(ok(b"first"))
        await s.head(r)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Le")  # half a head, then the close
        await w.drain()

    s = serve(handler)

    async def main() -> None:
        pool = Pool(4)
        assert (await get(pool, s))[2] == b"first"
        with pytest.raises(TransientStorageError, match="connection failed"):
            await get(pool, s)

    asyncio.run(main())
    assert s.connections == 1 and len(s.heads) == 2


def test_body_cut_short_is_a_truncation_and_closes(serve: Any) -> None:
    s = serve(once(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 40))

    async def main() -> None:
        pool = Pool(4)
        resp = await pool.request("GET", url(s), {}, "s3://b/k")
        assert resp.content_length == 100
        got = bytearray()
        with pytest.raises(TransientStorageError, match="body cut short") as info:
            async for chunk in resp.chunks():
                got += chunk
        resp.release()
        assert got == b"x" * 40
        assert retry_cause(info.value) == "truncated"
        assert pool.open_connections == 0

    asyncio.run(main())


def test_chunked_body_and_reuse_after_it(serve: Any) -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    s = serve(keep_alive([chunked, ok(b"next")]))

    async def main() -> list[Any]:
        pool = Pool(4)
        resp = await pool.request("GET", url(s), {}, "w")
        assert resp.content_length is None
        body = await resp.read()
        resp.release()
        return [body, (await get(pool, s))[2]]

    assert asyncio.run(main()) == [b"hello world", b"next"]
    assert s.connections == 1


def test_chunked_body_cut_short(serve: Any) -> None:
    s = serve(once(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel"))

    async def main() -> None:
        pool = Pool(4)
        with pytest.raises(TransientStorageError, match="body cut short"):
            await get(pool, s)

    asyncio.run(main())


def test_body_until_close_without_length(serve: Any) -> None:
    s = serve(once(b"HTTP/1.1 200 OK\r\n\r\n" + b"y" * 3000))

    async def main() -> bytes:
        pool = Pool(4)
        body = (await get(pool, s))[2]
        assert pool.open_connections == 0  # read to the close: not kept
        return bytes(body)

    assert asyncio.run(main()) == b"y" * 3000


def test_head_and_informational_answers(serve: Any) -> None:
    head_reply = b'HTTP/1.1 200 OK\r\nContent-Length: 12345\r\nETag: "e"\r\n\r\n'
    early = b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after")
    s = serve(keep_alive([head_reply, early, ok(b"last")]))

    async def main() -> list[Any]:
        pool = Pool(4)
        resp = await pool.request("HEAD", url(s), {}, "w")
        resp.release()
        assert (resp.status, resp.content_length, resp.headers.get("etag")) == (200, 12345, '"e"')
        return [(await get(pool, s))[2], (await get(pool, s))[2]]

    assert asyncio.run(main()) == [b"after", b"last"]
    assert s.connections == 1  # the HEAD's connection was kept: it had no body to read


def test_large_body_by_length_arrives_whole(serve: Any) -> None:
    body = os.urandom(5 << 20)
    s = serve(keep_alive([ok(body), ok(b"more")]))
    assert bodies(s, 2) == [body, b"more"]
    assert s.connections == 1


def test_released_unread_or_cancelled_answers_close_their_connection(serve: Any) -> None:
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while await s.head(r):
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"z" * 1000)
            await w.drain()
            if n < 2:
                await asyncio.sleep(30)  # the rest never comes

    s = serve(handler)

    async def main() -> None:
        pool = Pool(4)
        resp = await pool.request("GET", url(s), {}, "w")
        resp.release()  # unread: not kept
        assert pool.open_connections == 0

        async def slow_read() -> bytes:
            return (await get(pool, s))[2]

        task = asyncio.ensure_future(slow_read())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.open_connections == 0

    asyncio.run(main())
    assert s.connections == 2


def test_the_pool_lends_at_most_its_limit(serve: Any) -> None:
    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while await s.head(r):
            await asyncio.sleep(0.1)
            w.write(ok(b"x"))
            await w.drain()

    s = serve(handler)

    async def main() -> list[Any]:
        pool = Pool(2)
        out = await asyncio.gather(*(get(pool, s) for _ in range(6)))
        assert pool.open_connections == 2
        return out

    assert [o[2] for o in asyncio.run(main())] == [b"x"] * 6
    assert s.connections == 2 and s.most_open == 2


def test_a_forked_child_opens_its_own_connection(serve: Any) -> None:
    s = serve(keep_alive([ok(b"parent"), ok(b"child"), ok(b"parent again")]))
    pool = Pool(4)
    loop = asyncio.new_event_loop()
    try:
        assert loop.run_until_complete(get(pool, s))[2] == b"parent"
        assert pool.open_connections == 1
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                assert pool.open_connections == 0  # the parent's socket is not the child's
                code = 0 if asyncio.run(get(pool, s))[2] == b"child" else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # the parent's idle connection was left alone by the child, and is used again
        assert loop.run_until_complete(get(pool, s))[2] == b"parent again"
        assert s.connections == 2
    finally:
        loop.close()


def test_an_answer_dropped_unreleased_frees_its_slot(serve: Any) -> None:
    s = serve(keep_alive([ok(b"dropped"), ok(b"next")]))

    async def main() -> bytes:
        pool = Pool(1)
        resp = await pool.request("GET", url(s), {}, "w")
        assert resp.status == 200
        del resp  # never read, never released: collected
        gc.collect()
        async with asyncio.timeout(5):  # with its slot still taken this would wait for good
            body = (await get(pool, s))[2]
        assert pool.open_connections == 1
        return bytes(body)

    assert asyncio.run(main()) == b"next"
    assert s.connections == 2  # the dropped answer's connection was closed, not re-used


def test_a_pool_used_on_a_second_loop_keeps_each_loops_connections_apart(serve: Any) -> None:
    s = serve(keep_alive([ok(b"a"), ok(b"b"), ok(b"c")]))
    pool = Pool(4)
    assert asyncio.run(get(pool, s))[2] == b"a"

    async def second() -> list[bytes]:
        first = (await get(pool, s))[2]  # the first loop's connection is not this loop's
        return [first, (await get(pool, s))[2]]

    assert asyncio.run(second()) == [b"b", b"c"]
    assert s.connections == 2


def test_an_answer_of_a_former_loop_is_not_kept_for_the_next(serve: Any) -> None:
    # an answer lent on loop A, released after the pool moved to loop B: its connection
    # belongs to A (whose callbacks B never runs), so B must not be handed it
    s = serve(keep_alive([ok(b"on a"), ok(b"on b"), ok(b"on b again")]))
    pool = Pool(4)
    loop_a, loop_b = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        resp = loop_a.run_until_complete(pool.request("GET", url(s), {}, "w"))
        assert loop_b.run_until_complete(get(pool, s))[2] == b"on b"

        async def finish() -> bytes:
            try:
                return await resp.read()
            finally:
                resp.release()

        assert loop_a.run_until_complete(finish()) == b"on a"

        async def again() -> bytes:
            async with asyncio.timeout(5):
                return bytes((await get(pool, s))[2])

        assert loop_b.run_until_complete(again()) == b"on b again"
        assert s.connections == 2
    finally:
        loop_a.close()
        loop_b.close()


# -- the HTTP store on this client: redirects, credentials, keys ---------------------------------


def routes(table: dict[str, bytes]) -> Handler:
    """Answer each request by its path (a missing path: 404), keeping the connection."""

    async def handler(
        s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        while head := await s.head(r):
            path = head.split(b" ", 2)[1].decode()
            w.write(table.get(path, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
            await w.drain()

    return handler


def moved(to: str, status: int = 302) -> bytes:
    return f"HTTP/1.1 {status} Moved\r\nLocation: {to}\r\nContent-Length: 0\r\n\r\n".encode()


def read_http(url: str, key: str) -> bytes:
    from astream.storage import RetryPolicy, open_store

    async def main() -> bytes:
        store = open_store(url, retry=RetryPolicy(attempts=1))
        try:
            return await store.get_range(key)
        finally:
            await store.aclose()

    return asyncio.run(main())


def test_http_store_follows_redirects_with_its_credentials(serve: Any) -> None:
    # the second Location is relative to the first redirect's target, not to the key's URL
    s = serve(routes({"/d/a": moved("/e/b", 301), "/e/b": moved("c", 307), "/e/c": ok(b"here")}))
    assert read_http(f"http://u:p%40ss@127.0.0.1:{s.port}/d", "a") == b"here"
    paths = [h.split(b" ")[1] for h in s.heads]
    assert paths == [b"/d/a", b"/e/b", b"/e/c"]
    auth = "authorization: basic " + base64.b64encode(b"u:p@ss").decode().lower()
    assert all(auth in h.decode().lower() for h in s.heads)


def test_http_store_sends_no_credentials_to_another_origin(serve: Any) -> None:
    other = serve(routes({"/x": ok(b"elsewhere")}))
    s = serve(routes({"/d/a": moved(f"http://127.0.0.1:{other.port}/x")}))
    assert read_http(f"http://u:p@127.0.0.1:{s.port}/d", "a") == b"elsewhere"
    assert b"authorization" in s.heads[0].lower()
    assert len(other.heads) == 1 and b"authorization" not in other.heads[0].lower()


def test_http_store_stops_after_ten_redirects(serve: Any) -> None:
    s = serve(routes({"/d/a": moved("/d/a")}))
    with pytest.raises(StorageError, match="more than 10 redirects") as info:
        read_http(f"http://127.0.0.1:{s.port}/d", "a")
    assert not info.value.retryable
    assert len(s.heads) == 11


def test_http_store_percent_encodes_keys(serve: Any) -> None:
    # a key names a file: its '%' is sent as %25; the root URL keeps the escapes it was given
    s = serve(routes({"/d%20e/sub/a%20b%20%C3%A9%2541+&.bin": ok(b"encoded")}))
    key = "sub/a b \u00e9%41+&.bin"
    assert read_http(f"http://127.0.0.1:{s.port}/d%20e", key) == b"encoded"


def test_a_body_is_read_once(serve: Any) -> None:
    s = serve(keep_alive([ok(b"0123456789")]))

    async def main() -> None:
        pool = Pool(4)
        resp = await pool.request("GET", url(s), {}, "w")
        try:
            assert await resp.read(4) == b"0123"
            with pytest.raises(RuntimeError, match="read once"):
                await resp.read()
        finally:
            resp.release()
        # the whole body had come off the socket (in the head's read): the connection is clean
        assert pool.open_connections == 1

    asyncio.run(main())
