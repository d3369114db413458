"""astream.storage.h1 under generated servers: random framings (by length, chunked, to the
close), answers cut at any byte, informational answers first, connections the server closes
while idle, answers that forbid re-use (``Connection: close``, HTTP/1.0, stray bytes past the
body), answers read whole, to a limit, partly or cancelled, sent in random pieces, one at a time
or several at once through a small pool.

What must hold, whatever the mix:
- a body read is the exact bytes served, or an exact prefix of them where the reader stopped;
  the only error is ``body cut short``, and only for an answer the server cut;
- every request reaches the server exactly once (a re-send only where the server never read it);
- a connection is re-used exactly when the last answer on it was read whole and both sides kept
  it (counted for one-at-a-time runs), never otherwise: a connection that must not be re-used is
  answered with poison by the server, so a wrong re-use shows as wrong bytes;
- nothing stays open after ``aclose``.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from astream.errors import TransientStorageError
from astream.storage.h1 import Pool
from tests.storage.test_h1 import Scripted

EARLY = b"HTTP/1.1 100 Continue\r\n\r\n"
POISON = b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nPOISON"
# what the server does after an answer: keep the connection; say "Connection: close" but linger;
# answer in HTTP/1.0 and linger; send a whole second answer nobody asked for, and linger; or
# close the connection without a word (a keep-alive timeout: the client learns of it only by
# its next request)
AFTER = ["keep", "close-header", "http10", "stray", "server-closes"]
READS = ["whole", "limit", "partial", "cancel"]


@dataclass(frozen=True)
class Answer:
    method: str  # GET or HEAD
    size: int
    framing: str  # length, chunked or close (the body ends at the server's close)
    after: str  # one of AFTER
    cut: int | None  # bytes of the framed body sent before the server closes
    read: str  # one of READS
    limit: int  # for read == "limit"
    pieces: int  # seed of the server's write sizes
    abort: bool  # the server's close is a reset, not a FIN
    early: bool = False  # a "100 Continue" comes before the answer


def body_of(path: str, size: int) -> bytes:
    return random.Random(path).randbytes(size)


def framed(a: Answer, body: bytes) -> bytes:
    """The answer's bytes on the wire: head, then the framed body."""
    version = "HTTP/1.0" if a.after == "http10" else "HTTP/1.1"
    lines = [f"{version} 200 OK"]
    if a.framing == "length":
        lines.append(f"Content-Length: {len(body)}")
    elif a.framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
    if a.after == "close-header":
        lines.append("Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode()
    if a.early:
        head = EARLY + head
    if a.method == "HEAD":
        return head
    if a.framing != "chunked":
        return head + body
    rng = random.Random(a.pieces + 1)
    out, i = bytearray(), 0
    while i < len(body):
        n = min(rng.randint(1, max(1, len(body) // 3)), len(body) - i)
        out += b"%x\r\n" % n + body[i : i + n] + b"\r\n"
        i += n
    return head + bytes(out) + b"0\r\n\r\n"


def head_length(raw: bytes) -> int:
    return raw.index(b"\r\n\r\n", len(EARLY) if raw.startswith(EARLY) else 0) + 4


def pieces(raw: bytes, seed: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    i = 0
    while i < len(raw):
        n = rng.choice([1, 7, 100, 4096, 65536, len(raw)])
        yield raw[i : i + n]
        i += n


class Script:
    """The answers, by path, of one server shared by all examples."""

    def __init__(self) -> None:
        self.answers: dict[str, Answer] = {}
        self.heard: Counter[str] = Counter()

    async def handler(
        self, s: Scripted, r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int
    ) -> None:
        poisoned = False
        while head := await s.head(r):
            path = head.split(b" ", 2)[1].decode()
            self.heard[path] += 1
            a = self.answers.get(path)
            if poisoned or a is None:
                w.write(POISON)  # a request on a connection that must not be re-used
                await w.drain()
                continue
            raw = framed(a, body_of(path, a.size))
            if a.cut is not None:
                raw = raw[: head_length(raw) + a.cut]
            stray = a.after == "stray" and a.cut is None
            if stray:  # an answer to no request, in the same segment as this one's end
                raw, tail = raw[:-100], raw[-100:] + POISON
            for i, piece in enumerate(pieces(raw, a.pieces)):
                w.write(piece)
                await w.drain()
                if i % 3 == 2:
                    await asyncio.sleep(0.0005)  # a separate segment
            if stray:
                w.write(tail)
                await w.drain()
            if a.cut is not None or a.framing == "close" or a.after == "server-closes":
                if a.abort:
                    w.transport.abort()
                return
            poisoned = a.after != "keep"


@st.composite
def answers(draw: Any) -> Answer:
    method = draw(st.sampled_from(["GET", "GET", "GET", "HEAD"]))
    size = draw(
        st.one_of(
            st.integers(0, 40),
            st.integers(0, 70_000),
            st.sampled_from([(1 << 20) + 3, 3 << 20]),  # past the flow-control limit
        )
    )
    framing = (
        "length" if method == "HEAD" else draw(st.sampled_from(["length", "chunked", "close"]))
    )
    after = draw(st.sampled_from(AFTER))
    if after == "stray" and framing == "close":
        after = "keep"  # bytes past a body that ends at the close are the body's
    if after == "http10" and framing == "chunked":
        framing = "length"  # HTTP/1.0 has no chunked bodies
    read = draw(st.sampled_from(READS))
    a = Answer(
        method,
        size,
        framing,
        after,
        None,
        read,
        draw(st.integers(1, size + 2)),
        draw(st.integers(0, 1 << 16)),
        False,
        after != "http10" and draw(st.integers(0, 5)) == 0,
    )
    if method == "GET" and framing != "close" and draw(st.integers(0, 4)) == 0:
        raw = framed(a, bytes(size))  # chunk sizes depend on the seed and the length only
        if len(raw) > head_length(raw):
            cut = draw(st.integers(0, len(raw) - head_length(raw) - 1))
            a = replace(a, cut=cut, abort=draw(st.booleans()))
    return a


def reusable(a: Answer) -> bool | None:
    """Whether the connection may be kept after ``a``: True, False, or None where it depends on
    how far the reader got (a limit, a first chunk, a cancel)."""
    if a.after != "keep" or a.cut is not None or a.framing == "close":
        return False
    if a.method == "HEAD" or a.read == "whole":
        return True
    return None


async def exchange(pool: Pool, port: int, path: str, a: Answer) -> None:
    body = b"" if a.method == "HEAD" else body_of(path, a.size)
    resp = await pool.request(a.method, ("http", f"127.0.0.1:{port}", path), {}, path)
    try:
        assert resp.status == 200
        if a.read == "whole":
            got = await resp.read()
            assert got == body
        elif a.read == "limit":
            got = await resp.read(a.limit)
            assert got == body[: a.limit]
        elif a.read == "partial":
            async for chunk in resp.chunks():
                assert chunk == body[: len(chunk)]
                break
        else:
            task = asyncio.ensure_future(resp.read())
            await asyncio.sleep(0)
            task.cancel()
            try:
                got = await task
            except asyncio.CancelledError:
                pass
            else:
                assert got == body
    except TransientStorageError as exc:
        assert a.cut is not None, (a, exc)
        assert "body cut short" in str(exc)
    finally:
        resp.release()


async def exchange_or_cut(pool: Pool, port: int, path: str, a: Answer) -> None:
    try:
        await exchange(pool, port, path, a)
    except TransientStorageError as exc:
        # a reset may take the answer's head with it: only for a cut answer, ended by a reset
        assert a.cut is not None and a.abort, (a, exc)
        assert "connection failed" in str(exc)


paths = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Scripted, Script]]:
    script = Script()
    s = Scripted(script.handler)
    yield s, script
    s.close()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    rounds=st.lists(st.lists(answers(), min_size=1, max_size=3), min_size=1, max_size=6),
    limit=st.integers(1, 3),
)
@example(
    rounds=[
        [Answer("GET", 10, "length", "keep", None, "whole", 1, 0, False)],
        [Answer("GET", 5, "chunked", "server-closes", None, "whole", 1, 1, False)],
        [Answer("GET", 3 << 20, "length", "stray", None, "whole", 1, 2, False)],
        [Answer("GET", 70, "chunked", "keep", 33, "limit", 50, 3, True)],
        [Answer("HEAD", 99, "length", "keep", None, "partial", 1, 4, False)],
        [Answer("GET", 20, "length", "keep", None, "whole", 1, 5, False)],
    ],
    limit=1,
)
@example(
    rounds=[
        [Answer("GET", 9, "chunked", "stray", None, "whole", 1, 6, False)],
        [Answer("GET", 4, "length", "keep", None, "whole", 1, 7, False)],
    ],
    limit=2,
)
def test_the_client_under_generated_servers(
    server: tuple[Scripted, Script], rounds: list[list[Answer]], limit: int
) -> None:
    s, script = server
    named = [[(f"/p{next(paths)}", a) for a in group] for group in rounds]
    for group in named:
        script.answers.update(group)
    before = s.connections

    async def main() -> None:
        pool = Pool(limit)
        async with asyncio.timeout(10):  # a hang is a failure, with its example
            await run_rounds(pool)
        await pool.aclose()
        assert pool.open_connections == 0

    async def run_rounds(pool: Pool) -> None:
        for group in named:
            await asyncio.gather(*(exchange_or_cut(pool, s.port, p, a) for p, a in group))

    asyncio.run(main())

    for group in named:
        for path, _ in group:
            assert script.heard[path] == 1, path  # once: never lost, never sent twice
    made = s.connections - before
    if all(len(g) == 1 for g in rounds):
        chain = [g[0] for g in rounds][:-1]
        least = 1 + sum(reusable(a) is False for a in chain)
        most = 1 + sum(reusable(a) is not True for a in chain)
        assert least <= made <= most, (made, least, most)
    else:
        assert 1 <= made <= sum(len(g) for g in rounds)
