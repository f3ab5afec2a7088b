"""A bare HTTP/1.1 relay, the anchor the metering proxy's cost is measured against: what any
reverse proxy must do, and nothing more.

    .venv/bin/python -m bench.bare_relay --upstream 127.0.0.1:8100 [--port 0]

Per client connection it reads a request (head and ``content-length`` body), forwards it
unchanged over its own connection to the upstream (opened on the first request, kept for
the next), and copies the response bytes back as they arrive, following the response's
framing (``content-length`` or chunked) only to know where it ends. No header rewriting,
no parsing of the body, no metering. Raw asyncio protocols on uvloop when installed. The
first line printed to stdout is ``listening on PORT``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import cast

from bench.stub_upstream import run_loop


class _ResponseFraming:
    """Where an HTTP/1.1 response ends, fed the bytes as they pass (never buffered for the
    client: only the framing state is kept)."""

    def __init__(self) -> None:
        self.head = b""
        self.in_head = True
        self.remaining = 0
        """Body bytes left: of the whole body (content-length) or of this chunk."""
        self.chunked = False
        self.size_line = b""
        self.state = "size"  # chunked: size, data, data-crlf, trailer
        self.done = False

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        while view and not self.done:
            if self.in_head:
                self.head += bytes(view)
                end = self.head.find(b"\r\n\r\n")
                if end < 0:
                    return
                rest = self.head[end + 4 :]
                lines = self.head[:end].lower().split(b"\r\n")
                self.in_head = False
                for line in lines[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip() == b"transfer-encoding" and b"chunked" in value:
                        self.chunked = True
                    elif name.strip() == b"content-length":
                        self.remaining = int(value)
                if not self.chunked and self.remaining == 0:
                    self.done = True
                view = memoryview(rest)
            elif not self.chunked:
                take = min(self.remaining, len(view))
                self.remaining -= take
                view = view[take:]
                self.done = self.remaining == 0
            elif self.state == "size" or self.state == "trailer":
                self.size_line += bytes(view)
                end = self.size_line.find(b"\r\n")
                if end < 0:
                    return
                line, rest = self.size_line[:end], self.size_line[end + 2 :]
                self.size_line = b""
                view = memoryview(rest)
                if self.state == "trailer":
                    self.done = line == b""
                    continue
                self.remaining = int(line.split(b";")[0], 16)
                self.state = "data" if self.remaining else "trailer"
            elif self.state == "data":
                take = min(self.remaining, len(view))
                self.remaining -= take
                view = view[take:]
                if self.remaining == 0:
                    self.state, self.remaining = "data-crlf", 2
            else:  # the CRLF after a chunk's data
                take = min(self.remaining, len(view))
                self.remaining -= take
                view = view[take:]
                if self.remaining == 0:
                    self.state = "size"


class _Upstream(asyncio.Protocol):
    def __init__(self, client: _Client) -> None:
        self.client = client
        self.framing = _ResponseFraming()

    def data_received(self, data: bytes) -> None:
        client = self.client
        if client.transport is not None:
            client.transport.write(data)
        self.framing.feed(data)
        if self.framing.done:
            self.framing = _ResponseFraming()
            client.response_done()

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.upstream_lost()


class _Client(asyncio.Protocol):
    """One client connection and its upstream connection."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream_address = upstream
        self.transport: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.buffer = b""
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.next_request()

    def next_request(self) -> None:
        if self.busy:
            return
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return
        length = 0
        for line in self.buffer[:end].lower().split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip() == b"content-length":
                length = int(value)
        if len(self.buffer) < end + 4 + length:
            return
        request = self.buffer[: end + 4 + length]
        self.buffer = self.buffer[end + 4 + length :]
        self.busy = True
        if self.upstream is None or self.upstream.is_closing():
            asyncio.get_running_loop().create_task(self.connect_and_send(request))
        else:
            self.upstream.write(request)

    async def connect_and_send(self, request: bytes) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(
                lambda: _Upstream(self), *self.upstream_address
            )
        except OSError:
            if self.transport is not None:
                self.transport.write(
                    b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                )
                self.transport.close()
            return
        self.upstream = transport
        transport.write(request)

    def response_done(self) -> None:
        self.busy = False
        self.next_request()

    def upstream_lost(self) -> None:
        self.upstream = None
        if self.busy and self.transport is not None:
            self.transport.close()  # the response ended early: so does the client's

    def connection_lost(self, exc: Exception | None) -> None:
        if self.upstream is not None:
            self.upstream.close()


async def serve(port: int, upstream: tuple[str, int]) -> None:
    """Relay until cancelled; prints ``listening on PORT`` once bound."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Client(upstream), "127.0.0.1", port, backlog=8192, reuse_address=True
    )
    print(f"listening on {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT of the server to relay to.")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    host, _, upstream_port = args.upstream.rpartition(":")
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(serve(args.port, (host or "127.0.0.1", int(upstream_port))))


if __name__ == "__main__":
    main()
