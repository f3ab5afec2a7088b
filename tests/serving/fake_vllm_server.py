""":class:`FakeVllm` on a real port: an ASGI app (served by uvicorn) that answers with what
the fake's handler returns, so the proxy's own HTTP client is tested over real sockets.

What the fake raises becomes what a real server does: ``httpx.ReadTimeout`` (``TIMEOUT``)
a server that never answers, an error mid-stream (``MIDFAIL``) a dropped connection. A
client that hangs up closes the fake's stream (counted in ``fake.aborted``).
"""

import asyncio
import contextlib
from typing import Any

import httpx
from starlette.types import Receive, Scope, Send

from tests.serving.fake_vllm import FakeVllm

__all__ = ["FakeVllmServer"]


class FakeVllmServer:
    """ASGI front of a :class:`FakeVllm`."""

    def __init__(self, fake: FakeVllm) -> None:
        self.fake = fake
        self.clients: set[tuple[str, int]] = set()
        """The client sockets that sent requests (one per connection)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while (message := await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        self.clients.add(tuple(scope["client"]))
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"]]
        request = httpx.Request(
            scope["method"], f"http://fake{scope['path']}", headers=headers, content=body
        )
        task = asyncio.create_task(self._answer(request, send))
        hangup = asyncio.create_task(self._hangup(receive))
        done, _ = await asyncio.wait({task, hangup}, return_when=asyncio.FIRST_COMPLETED)
        for pending in (task, hangup):
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.ReadError):
                await pending
        del done

    @staticmethod
    async def _hangup(receive: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def _answer(self, request: httpx.Request, send: Any) -> None:
        try:
            response = await self.fake.handle(request)
        except httpx.ReadTimeout:
            await asyncio.sleep(3600)  # a server that never answers
            return
        raw_headers = [
            (k.encode(), v.encode())
            for k, v in response.headers.items()
            if k.lower() not in ("content-length", "transfer-encoding")
        ]
        await send({"type": "http.response.start", "status": response.status_code,
                    "headers": raw_headers})  # fmt: skip
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            try:
                async for chunk in response.aiter_raw():
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except httpx.ReadError:
                return  # uvicorn drops a connection whose response did not end
        else:
            await send({"type": "http.response.body", "body": response.content, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
