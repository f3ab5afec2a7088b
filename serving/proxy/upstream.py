"""The proxy's leg to the model servers: one request, its status and headers, its body read
by read.

:class:`Http11Upstream` is a small HTTP/1.1 client on asyncio protocols with httptools'
parser and a keep-alive pool per server: each read of the socket is one wake-up of the
relay, with no per-read locks, pools or streams in between (httpx spent most of the
proxy's time per relayed event on those). :class:`HttpxUpstream` does the same through an
:class:`httpx.AsyncClient`, for tests that put a fake engine behind an httpx transport.

Errors are :class:`UpstreamError`: ``connect`` (refused, unresolvable, connect timeout),
``timeout`` (no byte for ``read_timeout_s``) or ``read`` (the connection broke).
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, cast
from urllib.parse import urlsplit

import httptools

if TYPE_CHECKING:
    import httpx

__all__ = ["Http11Upstream", "HttpxUpstream", "Upstream", "UpstreamError", "UpstreamResponse"]

ErrorKind = Literal["connect", "timeout", "read"]

_HIGH_WATER = 1 << 20
"""Bytes buffered from a server before its socket stops being read (a slow client)."""


class UpstreamError(Exception):
    """A model server that could not be reached, went quiet or broke the connection."""

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind


class UpstreamResponse(Protocol):
    """A response whose body is still to be read."""

    status_code: int
    headers: list[tuple[bytes, bytes]]
    """As received, names lower-case."""

    def header(self, name: bytes) -> bytes | None:
        """The first value of a header (``name`` lower-case)."""
        ...

    def chunks(self) -> AsyncIterator[bytes]:
        """The body, one item per read of the socket (what has arrived since the last)."""
        ...

    async def read(self) -> bytes:
        """The whole body."""
        ...

    async def aclose(self) -> None:
        """Done with it: a fully read response's connection goes back to the pool; any other
        is closed at once (the server sees the request aborted)."""
        ...


class Upstream(Protocol):
    """Sends requests to the model servers."""

    async def send(
        self, method: str, url: str, *, headers: Mapping[str, str], content: bytes
    ) -> UpstreamResponse:
        """Send a request and wait for the response's status and headers.

        Raises:
            UpstreamError: If the server cannot be reached, times out or breaks off.
        """
        ...

    async def aclose(self) -> None: ...


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key == name:
            return value
    return None


# --- HTTP/1.1 on asyncio -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Origin:
    scheme: str
    host: str
    port: int

    @property
    def netloc(self) -> str:
        default = 443 if self.scheme == "https" else 80
        host = f"[{self.host}]" if ":" in self.host else self.host  # an IPv6 literal
        return host if self.port == default else f"{host}:{self.port}"


class _Connection(asyncio.Protocol):
    """One keep-alive connection to a server; one response at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout_s: float) -> None:
        self.loop = loop
        self.read_timeout_s = read_timeout_s
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.status_code = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.complete = False
        self.keep_alive = False
        self.received = False
        self.error: UpstreamError | None = None
        self.body: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.waiter: asyncio.Future[None] | None = None
        self.last_ns = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # asyncio protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        self.received = True
        self.last_ns = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:  # pragma: no cover - never asked for
            self._fail(UpstreamError("read", "the model server switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError("read", f"malformed HTTP from the model server: {exc}"))
        if self.buffered > _HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and self.error is None:
            if self.headers_done and not self._framed():
                self.complete = True  # a body that ends with the connection
            else:
                detail = f": {exc!r}" if exc else ""
                self.error = UpstreamError(
                    "read", f"the model server closed the connection{detail}"
                )
        self._wake()

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        self.status_code = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()
        self.headers_done = True

    def on_body(self, body: bytes) -> None:
        self.body.append(body)
        self.buffered += len(body)

    def on_message_complete(self) -> None:
        self.complete = True

    # the response side
    def _framed(self) -> bool:
        return (
            _header(self.headers, b"content-length") is not None
            or _header(self.headers, b"transfer-encoding") is not None
        )

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        self.abort()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()
        self._wake()

    def _timed_out(self) -> None:
        self.timer = None
        if self.complete or self.error is not None or self.closed:
            return
        left = self.last_ns + self.read_timeout_s - self.loop.time()
        if left > 0:  # data came since the timer was set: wait the rest
            self.timer = self.loop.call_later(left, self._timed_out)
            return
        self._fail(
            UpstreamError("timeout", f"no answer from the model server in {self.read_timeout_s} s")
        )

    def arm(self) -> None:
        self.last_ns = self.loop.time()
        self.timer = self.loop.call_later(self.read_timeout_s, self._timed_out)

    def disarm(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    async def wait(self) -> None:
        """Until something arrives, the response completes, or the connection fails."""
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self) -> bytes:
        body = self.body
        data = body.popleft() if len(body) == 1 else b"".join(body)
        body.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data


class _Response:
    __slots__ = ("_conn", "_pool", "_released", "headers", "status_code")

    def __init__(self, conn: _Connection, pool: _Pool) -> None:
        self._conn = conn
        self._pool = pool
        self._released = False
        self.status_code = conn.status_code
        self.headers = conn.headers

    def header(self, name: bytes) -> bytes | None:
        return _header(self.headers, name)

    async def chunks(self) -> AsyncIterator[bytes]:
        conn = self._conn
        while True:
            if conn.body:
                yield conn.take()
                continue
            if conn.error is not None:
                raise conn.error
            if conn.complete:
                return
            await conn.wait()

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.chunks()])

    async def aclose(self) -> None:
        if self._released:
            return
        self._released = True
        conn = self._conn
        conn.disarm()
        if conn.complete and conn.keep_alive and conn.error is None and not conn.closed:
            self._pool.release(conn)
        else:
            conn.abort()


class _Pool:
    """Idle keep-alive connections to one server, most recently used first."""

    def __init__(self, origin: _Origin, ssl_context: ssl.SSLContext | None) -> None:
        self.origin = origin
        self.ssl_context = ssl_context
        self.idle: list[_Connection] = []

    def acquire(self) -> _Connection | None:
        while self.idle:
            conn = self.idle.pop()
            if not conn.closed and conn.transport is not None and not conn.transport.is_closing():
                return conn
        return None

    def release(self, conn: _Connection) -> None:
        conn._reset()
        self.idle.append(conn)

    def close(self) -> None:
        for conn in self.idle:
            conn.abort()
        self.idle.clear()


class Http11Upstream:
    """HTTP/1.1 to the model servers over asyncio, with keep-alive pooling."""

    def __init__(self, *, connect_timeout_s: float, read_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._pools: dict[_Origin, _Pool] = {}
        self._ssl: ssl.SSLContext | None = None

    def _pool(self, origin: _Origin) -> _Pool:
        pool = self._pools.get(origin)
        if pool is None:
            context = None
            if origin.scheme == "https":
                self._ssl = self._ssl or ssl.create_default_context()
                context = self._ssl
            pool = self._pools[origin] = _Pool(origin, context)
        return pool

    async def _connect(self, pool: _Pool) -> _Connection:
        loop = asyncio.get_running_loop()
        origin = pool.origin
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop, self.read_timeout_s),
                    origin.host,
                    origin.port,
                    ssl=pool.ssl_context,
                )
        except TimeoutError:
            raise UpstreamError(
                "connect",
                f"connecting to {origin.netloc} timed out after {self.connect_timeout_s} s",
            ) from None
        except OSError as exc:
            raise UpstreamError("connect", f"cannot connect to {origin.netloc}: {exc}") from None
        return conn

    async def send(
        self, method: str, url: str, *, headers: Mapping[str, str], content: bytes
    ) -> UpstreamResponse:
        parts = urlsplit(url)
        scheme = parts.scheme or "http"
        origin = _Origin(
            scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80)
        )
        pool = self._pool(origin)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = [f"{method} {target} HTTP/1.1\r\nhost: {origin.netloc}\r\n"]
        for name, value in headers.items():
            head.append(f"{name}: {value}\r\n")
        head.append(f"content-length: {len(content)}\r\n\r\n")
        request = "".join(head).encode("latin-1") + content
        for attempt in (0, 1):
            conn = pool.acquire()
            reused = conn is not None
            if conn is None:
                conn = await self._connect(pool)
            try:
                return await self._exchange(conn, pool, request)
            except UpstreamError:
                # A kept-alive connection the server closed meanwhile: nothing was
                # processed, so try once more on a fresh one.
                if reused and attempt == 0 and not conn.received:
                    continue
                raise
            except BaseException:
                conn.abort()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _exchange(self, conn: _Connection, pool: _Pool, request: bytes) -> _Response:
        assert conn.transport is not None
        conn.transport.write(request)
        conn.arm()
        while not conn.headers_done:
            if conn.error is not None:
                conn.disarm()
                conn.abort()
                raise conn.error
            await conn.wait()
        return _Response(conn, pool)

    async def aclose(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


# --- through httpx (tests with a fake engine behind an httpx transport) ------------------------


class _HttpxResponse:
    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status_code = response.status_code
        self.headers = [(k.lower(), v) for k, v in response.headers.raw]

    def header(self, name: bytes) -> bytes | None:
        return _header(self.headers, name)

    async def chunks(self) -> AsyncIterator[bytes]:
        import httpx

        try:
            async for data in self._response.aiter_raw():
                yield data
        except httpx.HTTPError as exc:
            raise _from_httpx(exc) from None

    async def read(self) -> bytes:
        import httpx

        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise _from_httpx(exc) from None

    async def aclose(self) -> None:
        await self._response.aclose()


def _from_httpx(exc: Exception) -> UpstreamError:
    import httpx

    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout):
        return UpstreamError("connect", repr(exc))
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamError("timeout", repr(exc))
    return UpstreamError("read", repr(exc))


class HttpxUpstream:
    """Requests through an :class:`httpx.AsyncClient` (whose transport a test may fake)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def send(
        self, method: str, url: str, *, headers: Mapping[str, str], content: bytes
    ) -> UpstreamResponse:
        import httpx

        request = self.client.build_request(method, url, content=content, headers=headers)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise _from_httpx(exc) from None
        return _HttpxResponse(response)

    async def aclose(self) -> None:
        return None
