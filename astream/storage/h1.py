"""A small HTTP/1.1 client for the requests astream signs itself (the direct S3 reads).

Theory of operation
-------------------
Why not aiohttp here: importing it costs 0.13-0.3 s on the build machine (nine C extensions
to initialise and two TLS contexts loaded with the system's CAs at import), paid by every
process that constructs an S3 dataset before its first request, and a GET through its session
costs ~1 ms of CPU. A direct S3 read needs little of it: GET and HEAD, no body to send, no
redirects, no cookies, no decompression. This module is that little: an asyncio protocol for
the sockets and `h11 <https://h11.readthedocs.io>`_ (a pure-Python HTTP/1.1 state machine, imported
in ~15 ms) for the protocol -- status line, headers, ``Content-Length``, chunked bodies,
keep-alive, HEAD answers without a body. A body of known length is read past h11, straight off
the socket's buffer (h11 would copy it twice more); the connection is then re-used with a fresh h11
state.

A :class:`Pool` belongs to one store. It is bound to the loop it is first used on and to the
process: used on another loop, or in a forked child, it starts empty (the child never touches
the parent's sockets or selector: see :class:`_Conn`). It lends at most ``limit`` connections at
once, keeps the idle ones (newest first), and sends a request again, once, on a fresh connection
when a reused one fails before any byte of the answer came back (the server closed it while it
was idle; a GET or HEAD can be sent twice). A connection goes back to the pool only when its
answer was read to the end and both sides keep it alive; a cancelled or abandoned answer closes
it.

Failures are :class:`~astream.errors.TransientStorageError`: ``connection failed (...)`` before
the answer's head, ``body cut short (...)`` during the body -- the labels the retry layer
counts (:func:`astream.storage.retry.retry_cause`). Timeouts are the retry layer's (an
inactivity bound per attempt); only the connect has its own bound here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import weakref
from collections import deque
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlsplit

import h11

from astream.errors import TransientStorageError

__all__ = ["Headers", "Pool", "Response"]

_READ = 1 << 20  # bytes per socket read of a body
_STREAM_LIMIT = 1 << 20  # bytes unread past which the socket is not read (until half are)
_MAX_HEAD = 1 << 16  # bytes of status line and headers accepted
_CONNECT_S = 30.0
_AGENT = "astream"
_PROTOCOL_ERRORS = (OSError, EOFError, h11.RemoteProtocolError)


class Headers:
    """An answer's headers, looked up by any case (repeated ones joined by ``, ``)."""

    __slots__ = ("_d",)

    def __init__(self, pairs: Iterable[tuple[bytes, bytes]]) -> None:
        d: dict[str, str] = {}
        for raw_name, raw_value in pairs:  # h11 gives names lower-cased
            name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
            d[name] = f"{d[name]}, {value}" if name in d else value
        self._d = d

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._d.get(name.lower(), default)

    def __getitem__(self, name: str) -> str:
        return self._d[name.lower()]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._d

    def __repr__(self) -> str:
        return f"Headers({self._d!r})"


class _Conn(asyncio.Protocol):
    """One connection: the socket's protocol, buffering what arrives (reading pauses past
    ``_STREAM_LIMIT`` bytes unread), and the h11 state of the current exchange.

    A protocol rather than asyncio's streams: a ``StreamWriter`` closes its transport when it
    is collected, and in a forked child that would unregister the socket from the *parent's*
    selector (the epoll instance is shared across fork), leaving a parent's connection deaf.
    A connection made in another process is dropped, never closed through its loop."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.proto = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
        self.reused = False  # lent before: the server may have closed it while it was idle
        self.heard = False  # a byte of the current answer came back
        self.pid = os.getpid()
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._eof = False
        self._lost: BaseException | None = None
        self._paused = False
        self._waiter: asyncio.Future[None] | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered > _STREAM_LIMIT and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._lost = exc
        self._wake()

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    # -- ours -----------------------------------------------------------------------------------

    @property
    def unread(self) -> bool:
        """Bytes came that no answer claimed: the connection is out of step with the server."""
        return bool(self._chunks)

    @property
    def closing(self) -> bool:
        return self.transport is None or self.transport.is_closing()

    def write(self, data: bytes) -> None:
        if self.closing:
            raise ConnectionResetError("the connection was closed")
        assert self.transport is not None
        self.transport.write(data)

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes as they come; b"" at the end of the stream."""
        while not self._chunks:
            if self._lost is not None:
                raise self._lost
            if self._eof:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = self._chunks.popleft()
        if len(data) > n:
            self._chunks.appendleft(data[n:])
            data = data[:n]
        self._buffered -= len(data)
        if self._paused and self._buffered <= _STREAM_LIMIT // 2 and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        if self.transport is not None and self.pid == os.getpid():
            with contextlib.suppress(RuntimeError):  # its loop is closed: so is the socket
                self.transport.abort()  # nothing to flush: a request is sent whole or not at all

    async def next_event(self) -> h11.Event | type[h11.PAUSED]:
        proto = self.proto
        while True:
            event = proto.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            data = await self.read(_READ)
            if data:
                self.heard = True
            proto.receive_data(data)


class Response:
    """One answer: its status, reason and headers, and its body to read once."""

    __slots__ = (
        "_conn",
        "_done",
        "_extra",
        "_key",
        "_left",
        "_pool",
        "_released",
        "_slots",
        "_started",
        "_where",
        "content_length",
        "headers",
        "reason",
        "status",
    )

    def __init__(
        self,
        head: h11.Response,
        conn: _Conn,
        pool: Pool,
        slots: asyncio.Semaphore,
        key: tuple[str, str, int],
        where: str,
        method: str,
    ) -> None:
        self.status = head.status_code
        self.reason = head.reason.decode("latin-1")
        self.headers = Headers(head.headers)
        length = self.headers.get("content-length")
        chunked = "chunked" in (self.headers.get("transfer-encoding") or "").lower()
        self.content_length = int(length) if length is not None and not chunked else None
        self._conn: _Conn | None = conn
        self._pool, self._slots, self._key, self._where = pool, slots, key, where
        no_body = method == "HEAD" or self.status in (204, 304)
        # bytes still to come when read past h11 (a known length); None: h11 frames the body
        self._left: int | None = 0 if no_body else self.content_length
        self._done = False
        self._released = False
        self._extra = False
        self._started = False

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, as it arrives; a body that ends early raises ``body cut short``."""
        conn = self._conn
        if conn is None or self._done:
            return
        if self._started:
            raise RuntimeError("an answer's body is read once")
        self._started = True
        try:
            if self._left is not None:
                data, _ = conn.proto.trailing_data  # what h11 read past the head
                if len(data) > self._left:
                    self._extra = True  # bytes past the body: the connection is not reused
                    data = data[: self._left]
                if data:
                    self._left -= len(data)
                    yield data
                while self._left > 0:
                    data = await conn.read(min(self._left, _READ))
                    if not data:
                        raise EOFError(f"{self._left} bytes of the body never came")
                    self._left -= len(data)
                    yield data
            else:
                while True:
                    event = await conn.next_event()
                    if type(event) is h11.Data:
                        yield bytes(event.data)
                    elif type(event) is h11.EndOfMessage:
                        break
                    else:
                        raise h11.RemoteProtocolError(f"unexpected {event!r} in a body")
        except _PROTOCOL_ERRORS as exc:
            self._abandon()
            raise TransientStorageError(
                f"body cut short ({type(exc).__name__}: {exc})", self._where
            ) from exc
        self._done = True

    async def read(self, limit: int | None = None) -> bytes:
        """The body (its first ``limit`` bytes at most, the rest left unread)."""
        parts: list[bytes] = []
        got = 0
        async for chunk in self.chunks():
            parts.append(chunk)
            got += len(chunk)
            if limit is not None and got >= limit:
                break
        data = b"".join(parts)
        return data if limit is None else data[:limit]

    def release(self) -> None:
        """Give the connection back (kept when the body was read whole and both sides keep it
        alive, closed otherwise); idempotent."""
        if self._released:
            return
        self._released = True
        self._slots.release()
        conn, self._conn = self._conn, None
        if conn is not None:
            if self._left == 0 and not self._done:
                self._done = True  # no body (HEAD, 204, 304, Content-Length: 0)
            keep = self._done and self._reusable(conn)
            self._pool._give_back(self._slots, self._key, conn, keep)

    def _reusable(self, conn: _Conn) -> bool:
        proto = conn.proto
        if self._left is None:  # h11 framed the body (a body read to the close leaves the
            # transport closing, which _give_back refuses); bytes h11 holds past the body's
            # end are an answer nobody asked for: out of step with the server
            done = proto.our_state is h11.DONE and proto.their_state is h11.DONE
            return done and not proto.trailing_data[0]
        if self._extra:
            return False  # more came than the answer: out of step with the server
        if proto.their_state is not h11.SEND_BODY and proto.their_state is not h11.DONE:
            return False
        conn_header = (self.headers.get("connection") or "").lower()
        return proto.their_http_version == b"1.1" and "close" not in conn_header

    def _abandon(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __del__(self) -> None:
        if not self._released and self._pool._pid == os.getpid():
            self._done = False  # an answer dropped unreleased: its connection is closed
            with contextlib.suppress(RuntimeError):  # its loop is closed already
                self.release()


class Pool:
    """Keep-alive connections to the hosts of one store (see the module's docstring)."""

    def __init__(self, limit: int, user_agent: str = _AGENT) -> None:
        self._limit = limit
        self._agent = user_agent
        self._pid = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._idle: dict[tuple[str, str, int], list[_Conn]] = {}
        self._slots: asyncio.Semaphore | None = None
        self._tls: ssl.SSLContext | None = None
        self._made: weakref.WeakSet[_Conn] = weakref.WeakSet()

    @property
    def open_connections(self) -> int:
        """Sockets this pool opened in this process that are open now (idle, lent, or in an
        exchange)."""
        me = os.getpid()
        return sum(1 for c in self._made if c.pid == me and not c.closing)

    def _bind(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._pid != os.getpid() or self._slots is None:
            if self._pid == os.getpid() and self._loop is not None and not self._loop.is_closed():
                self._close_idle()  # another loop of this process: its sockets are ours
            self._idle = {}  # a forked child drops the parent's, untouched
            self._slots = asyncio.Semaphore(self._limit)
            self._loop, self._pid = loop, os.getpid()
        return self._slots

    async def request(
        self,
        method: str,
        url: tuple[str, str, str],
        headers: dict[str, str],
        where: str,
        tls: ssl.SSLContext | None = None,
    ) -> Response:
        """Send ``method`` to ``url`` = (scheme, host[:port], encoded path and query) and read
        the answer's head. ``tls`` verifies an https host (default: the system's CAs)."""
        scheme, netloc, target = url
        key = (scheme, *_host_port(scheme, netloc))
        slots = self._bind()
        await slots.acquire()
        try:
            lines = list(headers.items())
            if not any(name.lower() == "host" for name in headers):
                lines.append(("Host", netloc))
            lines.append(("User-Agent", self._agent))
            request = h11.Request(method=method, target=target, headers=lines)
            while True:
                conn = self._take(key)
                if conn is None:
                    conn = await self._connect(key, tls, where)
                try:
                    head = await _exchange(conn, request)
                except BaseException as exc:
                    conn.close()
                    if conn.reused and isinstance(exc, _PROTOCOL_ERRORS) and not conn.heard:
                        continue  # closed by the server while idle: send it again, fresh
                    if isinstance(exc, _PROTOCOL_ERRORS):
                        raise TransientStorageError(
                            f"connection failed ({type(exc).__name__}: {exc})", where
                        ) from exc
                    raise
                return Response(head, conn, self, slots, key, where, method)
        except BaseException:
            slots.release()
            raise

    def _take(self, key: tuple[str, str, int]) -> _Conn | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.closing or conn.unread:  # closed, or bytes came while it was idle
                conn.close()
                continue
            conn.reused = True
            return conn
        return None

    async def _connect(
        self, key: tuple[str, str, int], tls: ssl.SSLContext | None, where: str
    ) -> _Conn:
        scheme, host, port = key
        context = None
        if scheme == "https":
            if tls is None:
                if self._tls is None:
                    self._tls = ssl.create_default_context()
                tls = self._tls
            context = tls
        try:
            async with asyncio.timeout(_CONNECT_S):
                _, conn = await asyncio.get_running_loop().create_connection(
                    _Conn,
                    host,
                    port,
                    ssl=context,
                    server_hostname=host if context is not None else None,
                )
        except (OSError, TimeoutError) as exc:
            raise TransientStorageError(
                f"connection failed ({type(exc).__name__}: {exc})", where
            ) from exc
        self._made.add(conn)
        return conn

    def _give_back(
        self, slots: asyncio.Semaphore, key: tuple[str, str, int], conn: _Conn, keep: bool
    ) -> None:
        # kept only by the binding (loop and process) that lent it
        if keep and slots is self._slots and self._pid == os.getpid() and not conn.closing:
            conn.proto = h11.Connection(h11.CLIENT, max_incomplete_event_size=_MAX_HEAD)
            self._idle.setdefault(key, []).append(conn)
        else:
            conn.close()

    def _close_idle(self) -> None:
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    async def aclose(self) -> None:
        """Close the idle connections (those of this process and loop)."""
        if self._pid == os.getpid() and self._loop is asyncio.get_running_loop():
            self._close_idle()
            await asyncio.sleep(0)  # let the transports finish closing on this loop


async def _exchange(conn: _Conn, request: h11.Request) -> h11.Response:
    proto = conn.proto
    conn.heard = False
    conn.write(proto.send(request) + proto.send(h11.EndOfMessage()))
    while True:
        event = await conn.next_event()
        if type(event) is h11.Response:
            return event
        if type(event) is h11.InformationalResponse:
            continue  # 1xx: the answer follows
        raise h11.RemoteProtocolError(f"expected an answer, got {event!r}")


def _host_port(scheme: str, netloc: str) -> tuple[str, int]:
    parts = urlsplit(f"//{netloc}")  # brackets of an IPv6 literal and the port, as parsed
    return parts.hostname or netloc, parts.port or (443 if scheme == "https" else 80)
