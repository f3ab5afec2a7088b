"""The proxy's own HTTP/1.1 client to the replicas, over real sockets: a fake vLLM on a real
port (tests/serving/fake_vllm_server.py), the proxy on another, records in SQLite and
PostgreSQL. Streams and whole answers, exact tokens and GPU time, usage taken out of the
chunks unless asked for, keep-alive reuse, a client hanging up (the upstream request is
aborted), a replica that never answers, and one that drops the connection mid-stream."""

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.serving.fake_vllm import FakeVllm
from tests.serving.fake_vllm_server import FakeVllmServer
from tests.serving.proxy_helpers import (
    assert_gpu_time_conserved,
    bearer,
    proxy_key,
    serve,
    usage_rows,
)


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


@pytest.fixture
def upstream(fake: FakeVllm) -> Iterator[tuple[FakeVllmServer, str]]:
    app = FakeVllmServer(fake)
    with serve(app) as url:
        yield app, url


def proxy_config(url: str, db_url: str, **options: Any) -> ProxyConfig:
    replica = ReplicaSpec(url=url + "/v1", deployment="smol", name="a", gpus=2, spec_method="ngram",
                          spec_k=4)  # fmt: skip
    return ProxyConfig(
        replicas=(replica,),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        **options,
    )


def _events(raw: bytes) -> list[Any]:
    return [
        "[DONE]" if part == "data: [DONE]" else json.loads(part.removeprefix("data: "))
        for part in raw.decode().split("\n\n")
        if part
    ]


async def _call(client: httpx.AsyncClient, path: str, body: dict[str, Any], key: str) -> Any:
    if not body.get("stream"):
        response = await client.post(path, json=body, headers=bearer(key))
        assert response.status_code == 200, response.text
        return response.json()
    async with client.stream("POST", path, json=body, headers=bearer(key)) as response:
        assert response.status_code == 200
        assert response.headers["x-event-id"]
        return _events(await response.aread())


def test_streams_and_answers_of_two_teams_through_real_sockets(engine, db_url, upstream, fake):
    server, url = upstream
    keys = {"a": proxy_key(engine, "a"), "b": proxy_key(engine, "b")}
    chat = {"model": "fake-model", "messages": [{"role": "user", "content": "say four words"}]}
    calls: list[tuple[str, str, dict[str, Any]]] = []
    for i in range(12):
        team = "ab"[i % 2]
        if i % 3 == 0:
            calls.append((team, "/v1/completions", {"model": "fake-model", "prompt": "one two",
                                                    "max_tokens": 5 + i}))  # fmt: skip
        elif i % 3 == 1:
            calls.append((team, "/v1/chat/completions", {**chat, "max_tokens": 5 + i,
                                                         "stream": True}))  # fmt: skip
        else:
            options = {"include_usage": True, "continuous_usage_stats": i % 2 == 0}
            calls.append((team, "/v1/completions", {"model": "fake-model", "prompt": "a b c",
                          "max_tokens": 5 + i, "stream": True, "stream_options": options}))  # fmt: skip

    async def main() -> list[Any]:
        async with httpx.AsyncClient(base_url=proxy_url, timeout=30) as client:
            return await asyncio.gather(*(_call(client, p, b, keys[t]) for t, p, b in calls))

    with serve(create_proxy_app(proxy_config(url, db_url))) as proxy_url:
        answers = asyncio.run(main())
        for _ in range(2):  # again, over the connections kept alive
            asyncio.run(main())
    for (_, _, body), answer in zip(calls, answers, strict=True):
        if not body.get("stream"):
            assert answer["usage"]["completion_tokens"] == body["max_tokens"]
            continue
        assert answer[-1] == "[DONE]"
        chunks = answer[:-1]
        options = body.get("stream_options", {})
        with_choices = [c for c in chunks if c["choices"]]
        usage_only = [c for c in chunks if not c["choices"]]
        assert len(usage_only) == (1 if options.get("include_usage") else 0)
        assert all(("usage" in c) == options.get("continuous_usage_stats", False)
                   for c in with_choices)  # fmt: skip
    rows = usage_rows(engine)
    assert len(rows) == 3 * len(calls)
    assert all(row["status"] == "ok" for row in rows)
    by_team = {"a": 0, "b": 0}
    for row in rows:
        by_team[row["team"]] += 1
    assert by_team == {"a": 18, "b": 18}
    expected = sorted(body["max_tokens"] for _, _, body in calls for _ in range(3))
    assert sorted(row["completion_tokens"] for row in rows) == expected
    assert all(row["gpu_ns"] > 0 for row in rows)
    assert_gpu_time_conserved(engine, replica="a", gpus=2)
    # 36 requests over kept-alive connections: at most the 12 opened for the first burst
    assert len(server.clients) <= len(calls)


def test_a_client_hanging_up_aborts_the_upstream_request(engine, db_url, upstream, fake):
    _, url = upstream
    body = {"model": "fake-model", "prompt": "SLOW long answer", "max_tokens": 60, "stream": True}
    seen = 0
    with serve(create_proxy_app(proxy_config(url, db_url, allow_anonymous=True))) as proxy_url:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", proxy_url + "/v1/completions", json=body) as response,
        ):
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    seen += len(json.loads(line[6:])["choices"][0]["text"].split())
                    if seen >= 6:
                        break
        deadline = time.monotonic() + 10
        while fake.aborted == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert fake.aborted == 1, "the upstream request was not aborted"
    (row,) = usage_rows(engine)
    assert row["status"] == "cancelled"
    assert seen <= row["completion_tokens"] < 60
    assert row["error"] == "the client disconnected before the end"
    assert_gpu_time_conserved(engine, replica="a", gpus=2)


@pytest.mark.parametrize("stream", [False, True])
def test_a_replica_that_never_answers_times_out_with_503(engine, db_url, upstream, stream):
    _, url = upstream
    config = proxy_config(url, db_url, allow_anonymous=True, read_timeout_s=0.5)
    body = {"model": "fake-model", "prompt": "TIMEOUT", "max_tokens": 4, "stream": stream}
    with serve(create_proxy_app(config)) as proxy_url:
        response = httpx.post(proxy_url + "/v1/completions", json=body, timeout=30)
    assert response.status_code == 503
    assert "timed out" in response.json()["error"]["message"]
    (row,) = usage_rows(engine)
    assert (row["status"], row["http_status"]) == ("error", 503)
    assert_gpu_time_conserved(engine, replica="a", gpus=2)


def test_a_connection_dropped_mid_stream_ends_the_stream_with_an_error(engine, db_url, upstream):
    _, url = upstream
    body = {"model": "fake-model", "prompt": "MIDFAIL", "max_tokens": 12, "stream": True}
    with serve(create_proxy_app(proxy_config(url, db_url, allow_anonymous=True))) as proxy_url:
        response = httpx.post(proxy_url + "/v1/completions", json=body, timeout=30)
        after = httpx.post(
            proxy_url + "/v1/completions",
            json={"model": "fake-model", "prompt": "fine", "max_tokens": 3},
            timeout=30,
        )
    events = _events(response.content)
    assert events[-1] == "[DONE]"
    assert events[-2]["error"]["code"] == "upstream_unavailable"
    assert after.status_code == 200
    failed, ok = usage_rows(engine)
    assert failed["status"] == "error"
    assert failed["error"].startswith("upstream stream failed")
    assert 0 < failed["completion_tokens"] < 12
    assert ok["status"] == "ok"
    assert_gpu_time_conserved(engine, replica="a", gpus=2)
