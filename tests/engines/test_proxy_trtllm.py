"""The proxy in front of a TensorRT-LLM replica: tokens from its OpenAI answers, drafted and
accepted tokens from its iteration stats, split over the requests in flight.

``trtllm-serve`` cannot run here; the replica is a stand-in behind an httpx transport that
answers with the documented formats (tests/fixtures/engines, written from the docs). Its
``/metrics`` hands out the fixture's iterations once, while both requests are in flight,
and an empty list afterwards (the queue empties on read)."""

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.conftest import FIXTURES
from tests.serving.proxy_helpers import assert_gpu_time_conserved, serve, usage_rows

ENGINES = FIXTURES / "engines"
ITERATIONS = json.loads((ENGINES / "trtllm_iteration_stats.json").read_text(encoding="utf-8"))
ANSWER = json.loads((ENGINES / "trtllm_chat_completion.json").read_text(encoding="utf-8"))
REPLICA = ReplicaSpec(
    engine="trtllm",
    url="http://trtllm:8000",
    deployment="scaled",
    name="t0",
    gpus=4,
    spec_method="Eagle3",
    spec_k=4,
)


def _sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


@dataclass
class FakeTrtllm:
    in_flight: int = 0
    drained: asyncio.Event | None = None
    metrics_reads: int = 0
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.drained is None:
            self.drained = asyncio.Event()
        if request.url.path == "/health":
            return httpx.Response(200)
        if request.url.path == "/metrics":
            self.metrics_reads += 1
            served = self.in_flight == 2 and not self.drained.is_set()
            if served:
                self.drained.set()
            return httpx.Response(200, json=ITERATIONS if served else [])
        body = json.loads(await request.aread())
        self.bodies.append(body)
        self.in_flight += 1
        try:
            await asyncio.wait_for(self.drained.wait(), timeout=10)
            await asyncio.sleep(0.05)
        finally:
            self.in_flight -= 1
        if not body.get("stream"):
            return httpx.Response(200, json=ANSWER)
        chunks: list[dict[str, Any]] = [
            {"id": "c1", "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": "New"}}]},
            {"id": "c1", "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"content": " York"}, "finish_reason": "stop"}]},
            {"id": "c1", "object": "chat.completion.chunk", "choices": [],
             "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}},
        ]  # fmt: skip

        async def events() -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield _sse(chunk)
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=events(), headers={"content-type": "text/event-stream"})


def test_acceptance_comes_from_iteration_stats_apportioned_to_the_requests(engine, db_url):
    fake = FakeTrtllm()
    config = ProxyConfig(
        replicas=(REPLICA,),
        database_url=db_url,
        allow_anonymous=True,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        iteration_poll_s=0.05,
    )
    message = {"model": "TinyLlama", "messages": [{"role": "user", "content": "Where?"}]}

    async def both(base_url: str) -> tuple[httpx.Response, httpx.Response]:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            return await asyncio.gather(
                client.post("/v1/chat/completions", json=message),
                client.post("/v1/chat/completions", json={**message, "stream": True}),
            )

    with serve(create_proxy_app(config, transport=fake.transport())) as base_url:
        plain, streamed = asyncio.run(both(base_url))
        health = httpx.get(base_url + "/healthz").json()

    assert plain.status_code == streamed.status_code == 200
    assert plain.json() == ANSWER
    assert health["replicas"][0]["healthy"] is True
    stream_body = next(body for body in fake.bodies if body.get("stream"))
    assert stream_body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    rows = usage_rows(engine)
    assert len(rows) == 2
    by_tokens = {row["prompt_tokens"]: row for row in rows}
    assert (by_tokens[28]["completion_tokens"], by_tokens[20]["completion_tokens"]) == (12, 2)
    # The rank-0 iterations drafted 8 + 8 + 4 = 20 tokens and accepted 5 + 3 + 4 = 12; both
    # requests were in flight through all three, so all of it lands on them.
    assert sum(row["draft_tokens"] for row in rows) == 20
    assert sum(row["accepted_tokens"] for row in rows) == 12
    assert sum(row["num_drafts"] for row in rows) == 2 + 2 + 1
    for row in rows:
        assert 0 < row["accepted_tokens"] <= row["draft_tokens"]
        assert (row["spec_method"], row["spec_k"], row["replica"]) == ("Eagle3", 4, "t0")
    assert_gpu_time_conserved(engine, replica="t0", gpus=4)
