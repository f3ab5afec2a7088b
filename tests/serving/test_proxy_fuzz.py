"""The metering proxy fuzzed (schemathesis) in front of a stub vLLM, writing to SQLite and
PostgreSQL: whatever a client sends (bodies, attribution headers, methods), the proxy never
answers a 5xx nor a traceback while its replica is up.

The proxy takes its bodies raw, so its OpenAPI document names none; the fuzzer is given
OpenAI's shapes and the attribution headers, and sends what breaks them too. The stub is
tests/serving/fake_vllm.py behind the checks vLLM makes first: a body that is not a
completion request is vLLM's 400, not a crash of the stub."""

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.python.asgi import shutdown_lifespans
from sqlalchemy import Engine

from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.serving.fake_vllm import FakeVllm

REPLICA = ReplicaSpec(
    url="http://fake-a:8000/v1", deployment="smol", name="a", gpus=2, spec_method="ngram", spec_k=4
)
MAX_TOKENS = 64
"""The stub's context: longer asks are a 400, as from vLLM."""

_TEXT = {"type": "string", "maxLength": 200}
_OPTIONS = {
    "model": {"type": "string", "maxLength": 64},
    "max_tokens": {"type": "integer", "minimum": 1, "maximum": MAX_TOKENS},
    "stream": {"type": "boolean"},
    "stream_options": {
        "type": "object",
        "properties": {
            "include_usage": {"type": "boolean"},
            "continuous_usage_stats": {"type": "boolean"},
        },
    },
}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/completions": {
        "type": "object",
        "properties": {"prompt": _TEXT, **_OPTIONS},
        "required": ["prompt"],
    },
    "/v1/chat/completions": {
        "type": "object",
        "properties": {
            "messages": {
                "type": "array",
                "minItems": 1,
                "maxItems": 4,
                "items": {
                    "type": "object",
                    "properties": {
                        "role": {"enum": ["system", "user", "assistant"]},
                        "content": _TEXT,
                    },
                    "required": ["role", "content"],
                },
            },
            **_OPTIONS,
        },
        "required": ["messages"],
    },
}
ATTRIBUTION = ["X-Session-Id", "X-Team", "X-Cost-Center", "X-Tags"]

FUZZ_SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)


def proxy_document() -> dict[str, Any]:
    """The proxy's OpenAPI document with the request bodies and headers it reads."""
    document = copy.deepcopy(
        create_proxy_app(ProxyConfig(replicas=(REPLICA,), allow_anonymous=True)).openapi()
    )
    for path, body in BODIES.items():
        operation = document["paths"][path]["post"]
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": body}},
        }
        operation["parameters"] = [
            {"name": name, "in": "header", "required": False, "schema": {"type": "string"}}
            for name in ATTRIBUTION
        ]
    return document


schema = schemathesis.openapi.from_dict(proxy_document())


class StubVllm:
    """:class:`FakeVllm` behind vLLM's own request checks (a 400 with an OpenAI error)."""

    def __init__(self) -> None:
        self.fake = FakeVllm()

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if request.method != "POST":
            return await self.fake.handle(request)
        try:
            body = json.loads(await request.aread())
        except ValueError:
            return self.bad_request("the body is not JSON")
        problem = self.problem(request.url.path, body)
        if problem:
            return self.bad_request(problem)
        body.setdefault("max_tokens", 16)
        # FakeVllm obeys words in capitals (a read timeout, a slow stream...); vLLM does not.
        if "prompt" in body:
            body["prompt"] = body["prompt"].lower()
        for message in body.get("messages", []):
            message["content"] = message["content"].lower()
        checked = httpx.Request(
            "POST", request.url, headers={"content-type": "application/json"}, json=body
        )
        return await self.fake.handle(checked)

    @staticmethod
    def problem(path: str, body: Any) -> str | None:
        if not isinstance(body, dict):
            return "the body is not a JSON object"
        max_tokens = body.get("max_tokens", 16)
        if type(max_tokens) is not int or not 1 <= max_tokens <= MAX_TOKENS:
            return f"max_tokens must be an integer from 1 to {MAX_TOKENS}"
        if path.endswith("/chat/completions"):
            messages = body.get("messages")
            if not isinstance(messages, list) or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages
            ):
                return "messages must be a list of messages with text content"
        elif not isinstance(body.get("prompt"), str):
            return "prompt must be a string"
        return None

    @staticmethod
    def bad_request(message: str) -> httpx.Response:
        error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
        return httpx.Response(400, json={"error": error})


@pytest.fixture
def proxy(engine: Engine, db_url: str) -> Iterator[FastAPI]:
    config = ProxyConfig(
        replicas=(REPLICA,),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        allow_anonymous=True,
    )
    try:
        yield create_proxy_app(config, transport=StubVllm().transport())
    finally:
        shutdown_lifespans()  # schemathesis keeps an app started until the process exits


@schema.parametrize()
@FUZZ_SETTINGS
def test_no_route_answers_a_server_error(case: Case[Any], proxy: FastAPI) -> None:
    response = case.call(app=proxy)
    request = f"{case.method} {case.formatted_path} headers={case.headers!r} body={case.body!r}"
    answer = f"{request} -> {response.status_code}: {response.content[:2000]!r}"
    assert response.status_code < 500, answer
    assert b"Traceback" not in response.content, answer
