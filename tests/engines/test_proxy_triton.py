"""The proxy in front of Triton's OpenAI frontend (TensorRT-LLM backend): its health path,
stream options it documents, tokens counted from the stream when ``usage`` is null, and its
Prometheus page parsed. Triton cannot run here; the stand-in answers in the documented
shapes (triton-inference-server/server python/openai README; tests/fixtures/engines)."""

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.conftest import FIXTURES
from tests.serving.proxy_helpers import serve, usage_rows

PAGE = (FIXTURES / "engines" / "triton_metrics.txt").read_text(encoding="utf-8")
REPLICA = ReplicaSpec(
    engine="triton", url="http://triton:9000", deployment="tri", name="tri0", spec_method="Eagle3"
)


class FakeTriton:
    def __init__(self) -> None:
        self.paths: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: httpx.Request) -> httpx.Response:
        self.paths.append(request.url.path)
        if request.url.path == "/health/ready":
            return httpx.Response(200)
        if request.url.path == "/metrics":
            return httpx.Response(200, text=PAGE)
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(404)
        self.bodies.append(json.loads(await request.aread()))

        async def events() -> AsyncIterator[bytes]:
            for word in ("It", " looks", " like", " a", " test"):
                chunk = {"id": "cmpl-1", "object": "chat.completion.chunk", "usage": None,
                         "choices": [{"index": 0, "delta": {"content": word}}]}  # fmt: skip
                yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return httpx.Response(200, content=events(), headers={"content-type": "text/event-stream"})


def test_a_triton_stream_is_metered_by_its_chunks_and_its_metrics_parsed(engine, db_url):
    fake = FakeTriton()
    config = ProxyConfig(
        replicas=(REPLICA,),
        database_url=db_url,
        allow_anonymous=True,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        counter_check_s=0.05,
    )
    app = create_proxy_app(config, transport=httpx.MockTransport(fake.handle))
    body = {"model": "ensemble", "messages": [{"role": "user", "content": "hi"}], "stream": True}

    with serve(app) as base_url:
        with httpx.stream("POST", base_url + "/v1/chat/completions", json=body) as response:
            raw = response.read()
        health = httpx.get(base_url + "/healthz").json()
        time.sleep(0.2)  # a counter check or two

    assert response.status_code == 200
    assert raw.endswith(b"data: [DONE]\n\n")
    assert fake.bodies[0]["stream_options"] == {"include_usage": True}
    assert health["replicas"][0]["healthy"] is True
    assert "/health/ready" in fake.paths
    (row,) = usage_rows(engine)
    assert (row["completion_tokens"], row["draft_tokens"], row["accepted_tokens"]) == (5, 0, 0)
    assert row["spec_method"] == "Eagle3"
    metrics = app.state.proxy.replicas[0].engine_metrics
    assert metrics is not None
    assert metrics.trt_llm[("request_metrics", "active")] == 2
    assert metrics.model_total("request_success") == 24
