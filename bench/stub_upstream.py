"""A stub vLLM server for load tests: answers at once and streams chat completions in vLLM's
exact chunk format, one token every ``--interval-ms``, at a small CPU cost per chunk.

    .venv/bin/python -m bench.stub_upstream --port 8100 [--interval-ms 20] [--model stub]

Serves ``POST /v1/chat/completions`` (streamed: a role chunk, one chunk per token up to
``max_tokens``, the usage-only chunk when ``stream_options.include_usage`` asks for it, then
``data: [DONE]``; usage on every chunk with ``continuous_usage_stats``; not streamed: one
``chat.completion``), ``GET /v1/models``, ``GET /health`` and ``GET /metrics`` (vLLM's
spec-decode counters, at zero: the stub does not speculate). HTTP/1.1 with keep-alive and
chunked bodies, as vLLM's uvicorn sends them.

Raw asyncio protocols (uvloop when installed), no web framework: the stub is the fixed
point the benchmark measures against, so it must not be what saturates. Tokens are
written by one timer per millisecond slot for all streams due then, not one timer each.
The first line printed to stdout is ``listening on PORT`` (port 0 picks a free one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import time
import uuid
from typing import Any, cast

PROMPT_TOKENS = 10
METRICS = b"""# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="%(model)s"} 0.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="%(model)s"} 0.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="%(model)s"} 0.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="%(model)s"} %(running)d.0
"""
_REASONS = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 405: b"Method Not Allowed"}


def _chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 body chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _usage(completion: int) -> bytes:
    return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}' % (
        PROMPT_TOKENS,
        PROMPT_TOKENS + completion,
        completion,
    )


class _Stream:
    """One streamed chat completion being written."""

    __slots__ = ("every", "head", "include_usage", "sent", "tokens", "transport")

    def __init__(
        self,
        transport: asyncio.Transport,
        *,
        request_id: str,
        model: str,
        tokens: int,
        include_usage: bool,
        every: bool,
    ) -> None:
        self.transport = transport
        self.head = (
            b'data: {"id":"chatcmpl-%s","object":"chat.completion.chunk","created":%d,"model":"%s"'
            % (
                request_id.encode(),
                int(time.time()),
                model.encode(),
            )
        )
        self.tokens = tokens
        self.include_usage = include_usage
        self.every = every
        self.sent = 0

    def first(self) -> bytes:
        usage = b',"usage":' + _usage(0) if self.every else b""
        return _chunk(
            self.head + b',"choices":[{"index":0,"delta":{"role":"assistant","content":""},'
            b'"logprobs":null,"finish_reason":null}]' + usage + b"}\n\n"
        )

    def next(self) -> bytes:
        """The next token's chunk, and after the last token the usage chunk and [DONE]."""
        self.sent += 1
        last = self.sent == self.tokens
        finish = b'"length","stop_reason":null' if last else b"null"
        usage = b',"usage":' + _usage(self.sent) if self.every else b""
        out = _chunk(
            self.head + b',"choices":[{"index":0,"delta":{"content":" tok%d"},'
            b'"logprobs":null,"finish_reason":%s}]%s}\n\n' % (self.sent, finish, usage)
        )
        if last:
            if self.include_usage:
                out += _chunk(self.head + b',"choices":[],"usage":' + _usage(self.sent) + b"}\n\n")
            out += _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        return out


class Stub:
    """The shared state: the model name, the token interval and the timer slots."""

    def __init__(self, *, model: str, interval_s: float) -> None:
        self.model = model
        self.interval_ms = max(1, round(interval_s * 1000))
        self.loop = asyncio.get_running_loop()
        self.slots: dict[int, list[_Stream]] = {}
        self.running = 0
        self.origin = self.loop.time()

    def schedule(self, stream: _Stream, due_ms: int) -> None:
        slot = self.slots.get(due_ms)
        if slot is None:
            self.slots[due_ms] = slot = []
            self.loop.call_at(self.origin + due_ms / 1000, self._fire, due_ms)
        slot.append(stream)

    def start(self, stream: _Stream) -> None:
        self.running += 1
        stream.transport.write(stream.first())
        now_ms = math.ceil((self.loop.time() - self.origin) * 1000)
        self.schedule(stream, now_ms + self.interval_ms)

    def _fire(self, due_ms: int) -> None:
        for stream in self.slots.pop(due_ms):
            if stream.transport.is_closing():
                self.running -= 1
                continue
            stream.transport.write(stream.next())
            if stream.sent < stream.tokens:
                self.schedule(stream, due_ms + self.interval_ms)
            else:
                self.running -= 1


class _Connection(asyncio.Protocol):
    """One client connection: parse requests (keep-alive), answer each."""

    def __init__(self, stub: Stub) -> None:
        self.stub = stub
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buffer) < end + 4 + length:
                return
            body = self.buffer[end + 4 : end + 4 + length]
            self.buffer = self.buffer[end + 4 + length :]
            method, path, *_ = head[0].split(" ")
            self.handle(method, path.partition("?")[0], body)

    def respond(self, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
            % (status, _REASONS[status], content_type, len(body), body)
        )

    def handle(self, method: str, path: str, body: bytes) -> None:
        assert self.transport is not None
        if path == "/v1/chat/completions" and method == "POST":
            try:
                request: dict[str, Any] = json.loads(body)
            except ValueError:
                self.respond(400, b'{"error":"bad json"}')
                return
            self.chat(request)
        elif path == "/health" and method == "GET":
            self.respond(200, b"")
        elif path == "/v1/models" and method == "GET":
            self.respond(200, json.dumps(_models(self.stub.model)).encode())
        elif path == "/metrics" and method == "GET":
            page = METRICS % {b"model": self.stub.model.encode(), b"running": self.stub.running}
            self.respond(200, page, b"text/plain; version=0.0.4; charset=utf-8")
        else:
            self.respond(404, b'{"detail":"Not Found"}')

    def chat(self, request: dict[str, Any]) -> None:
        assert self.transport is not None
        tokens = int(request.get("max_tokens") or 16)
        model = str(request.get("model") or self.stub.model)
        if not request.get("stream"):
            body = {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": " tok" * tokens},
                        "logprobs": None,
                        "finish_reason": "length",
                        "stop_reason": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": PROMPT_TOKENS,
                    "total_tokens": PROMPT_TOKENS + tokens,
                    "completion_tokens": tokens,
                },
            }
            self.respond(200, json.dumps(body).encode())
            return
        options = request.get("stream_options") or {}
        include_usage = bool(options.get("include_usage"))
        stream = _Stream(
            self.transport,
            request_id=uuid.uuid4().hex,
            model=model,
            tokens=tokens,
            include_usage=include_usage,
            every=include_usage and bool(options.get("continuous_usage_stats")),
        )
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
            b"transfer-encoding: chunked\r\n\r\n"
        )
        self.stub.start(stream)


def _models(model: str) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [
            {
                "id": model,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": model,
                "parent": None,
                "max_model_len": 2048,
                "permission": [],
            }
        ],
    }


async def serve(port: int, *, model: str, interval_s: float) -> None:
    """Serve until cancelled; prints ``listening on PORT`` once bound."""
    stub = Stub(model=model, interval_s=interval_s)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connection(stub), "127.0.0.1", port, backlog=8192, reuse_address=True
    )
    bound = server.sockets[0].getsockname()[1]
    print(f"listening on {bound}", flush=True)
    async with server:
        await server.serve_forever()


def run_loop(main: Any) -> None:
    """Run a coroutine on uvloop when it is installed, else asyncio's loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
    else:
        uvloop.run(main)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--model", default="stub")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        run_loop(serve(args.port, model=args.model, interval_s=args.interval_ms / 1000))


if __name__ == "__main__":
    main()
