"""A real HTTP receiver for alert deliveries (uvicorn in a thread), shared by the tests."""

import asyncio
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse

from bench.common import serve


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    """Records every POST. The first segment of the path says how to answer:

    * ``ok/…``: 200;
    * ``flaky/…``: 500 to the first request on that path, then 200;
    * ``slow/…``: 200 after 50 ms (so concurrent deliverers overlap).
    """

    def __init__(self) -> None:
        self.url = ""
        self._requests: list[Received] = []
        self._lock = threading.Lock()

    def requests(self, prefix: str = "") -> list[Received]:
        with self._lock:
            return [r for r in self._requests if r.path.startswith(prefix)]

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/{path:path}")
        async def receive(path: str, request: Request) -> PlainTextResponse:
            body = await request.body()
            with self._lock:
                self._requests.append(Received(path, dict(request.headers), body))
                seen = sum(r.path == path for r in self._requests)
            mode = path.split("/", 1)[0]
            if mode == "flaky" and seen == 1:
                return PlainTextResponse("upstream broke\n", status_code=500)
            if mode == "slow":
                await asyncio.sleep(0.05)
            return PlainTextResponse("ok")

        return app


@pytest.fixture(scope="session")
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    with serve(receiver.app()) as url:
        receiver.url = url
        yield receiver


@pytest.fixture
def down_url() -> str:
    """A local URL nothing listens on: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"
