"""The proxy on a real port in front of a fake vLLM (tests/serving/fake_vllm.py), writing to
SQLite and PostgreSQL: attribution, pass-through, usage records, GPU time, failures."""

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from app.models import ReplicaIdle
from ingest.usage import load_usage
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.relay import scrape_spec_decode_counters
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import (
    assert_gpu_time_conserved,
    bearer,
    free_port,
    proxy_key,
    serve,
    usage_rows,
)

Call = tuple[str, dict[str, Any], dict[str, str]]
"""A request for :func:`run_all`: path, JSON body, headers."""

REPLICA_A = ReplicaSpec(
    url="http://fake-a:8000/v1", deployment="smol", name="a", gpus=2, spec_method="ngram", spec_k=4
)
REPLICA_B = ReplicaSpec(
    url="http://fake-b:8000", deployment="smol", name="b", gpus=2, spec_method="ngram", spec_k=4
)


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


def proxy_app(
    fake: FakeVllm | None, db_url: str | None, *replicas: ReplicaSpec, **options: Any
) -> FastAPI:
    config = ProxyConfig(
        replicas=replicas or (REPLICA_A,),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        **({"allow_anonymous": True} | options),
    )
    return create_proxy_app(config, transport=fake.transport() if fake else None)


def completion(prompt: str, max_tokens: int = 12, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "prompt": prompt, "max_tokens": max_tokens, **extra}


def chat(content: str, max_tokens: int = 12, **extra: Any) -> dict[str, Any]:
    return {
        "model": "fake-model",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        **extra,
    }


async def _send(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    """One request; for streams, the events the client received."""
    if not body.get("stream"):
        response = await client.post(path, json=body, headers=headers)
        return {
            "status": response.status_code,
            "headers": response.headers,
            "body": response.json(),
        }
    async with client.stream("POST", path, json=body, headers=headers) as response:
        data = await response.aread()
    return {"status": response.status_code, "headers": response.headers, "raw": data}


def run_all(base_url: str, calls: list[Call]) -> list[dict[str, Any]]:
    async def main() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:
            return await asyncio.gather(*(_send(client, *call) for call in calls))

    return asyncio.run(main())


def stream_events(raw: bytes) -> list[str]:
    return [event.removeprefix("data: ") for event in raw.decode().split("\n\n") if event]


def test_requests_of_two_teams_are_recorded_with_exact_tokens_and_gpu_time(engine, db_url, fake):
    key_a, key_b = proxy_key(engine, "a"), proxy_key(engine, "b", cost_center="cc-9")
    calls, teams = [], []
    for i in range(3):
        calls.append(
            (
                "/v1/completions",
                completion(f"team a question {i}", 9 + i),
                bearer(key_a, X_Session_Id=f"sa{i}", X_Tags="env=prod,app=x"),
            )
        )
        calls.append(
            (
                "/v1/chat/completions",
                chat(f"SLOW team b chat {i}", 10 + i, stream=True),
                bearer(key_b, X_Session_Id="sb"),
            )
        )
        calls.append(
            (
                "/v1/completions",
                completion(
                    f"SLOW stream {i}", 7, stream=True, stream_options={"include_usage": True}
                ),
                bearer(key_a),
            )
        )
        teams += ["a", "b", "a"]
    with serve(proxy_app(fake, db_url, allow_anonymous=False)) as url:
        before = asyncio.run(
            scrape_spec_decode_counters(
                "http://fake-a:8000", httpx.AsyncClient(transport=fake.transport())
            )
        )
        results = run_all(url, calls)
    assert all(result["status"] == 200 for result in results)

    rows = {row["event_id"]: row for row in usage_rows(engine)}
    assert len(rows) == len(calls)
    for (_, body, headers), team, result in zip(calls, teams, results, strict=True):
        row = rows[result["headers"]["x-event-id"]]
        assert row["session_id"] == result["headers"]["x-session-id"]
        assert row["session_id"] == headers.get("X-Session-Id", row["session_id"])
        assert row["team"] == team
        assert row["status"] == "ok"
        assert row["http_status"] == 200
        assert row["completion_tokens"] == body["max_tokens"]
        text = body.get("prompt") or body["messages"][0]["content"]
        assert row["prompt_tokens"] == len(text.split())
        assert row["streamed"] == bool(body.get("stream"))
        assert row["endpoint"] == ("chat.completions" if "messages" in body else "completions")
        assert (row["deployment"], row["replica"], row["spec_method"], row["spec_k"]) == (
            "smol",
            "a",
            "ngram",
            4,
        )
        assert 0 <= row["accepted_tokens"] <= row["draft_tokens"] == 4 * row["num_drafts"]
        assert row["arrived_at"] <= row["first_token_at"] <= row["finished_at"]
        assert row["gpu_ns"] > 0
        if "usage" in result.get("body", {}):
            assert result["body"]["usage"]["completion_tokens"] == row["completion_tokens"]
    team_a = [row for row in rows.values() if row["team"] == "a" and not row["streamed"]]
    assert all(
        {k: v for k, v in row["tags"].items() if not k.startswith("specledger.")}
        == {"env": "prod", "app": "x"}
        for row in team_a
    )
    assert {row["cost_center"] for row in rows.values() if row["team"] == "b"} == {"cc-9"}
    assert max(row["concurrency"] for row in rows.values()) > 1

    after = {
        "num_drafts": fake.num_drafts,
        "num_draft_tokens": fake.num_draft_tokens,
        "num_accepted_tokens": fake.num_accepted_tokens,
    }
    assert (
        sum(row["num_drafts"] for row in rows.values())
        == after["num_drafts"] - before["num_drafts"]
    )
    assert (
        sum(row["accepted_tokens"] for row in rows.values())
        == after["num_accepted_tokens"] - before["num_accepted_tokens"]
    )
    assert_gpu_time_conserved(engine, replica="a", gpus=2)


@pytest.mark.parametrize("endpoint", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    "options",
    [
        None,
        {"include_usage": False},
        {"include_usage": True},
        {"include_usage": True, "continuous_usage_stats": True},
    ],
)
def test_stream_reaches_the_client_as_vllm_would_send_it(db_url, engine, fake, endpoint, options):
    body = (completion if endpoint == "/v1/completions" else chat)("copy me", 8, stream=True)
    if options is not None:
        body["stream_options"] = options
    direct = (
        httpx.Client(transport=httpx.MockTransport(_sync(fake)), base_url="http://fake-a:8000")
        .post(endpoint, json=body)
        .content
    )
    with serve(proxy_app(fake, db_url)) as url:
        proxied = httpx.post(url + endpoint, json=body, timeout=30)
    assert proxied.content == direct
    assert proxied.headers["content-type"].startswith("text/event-stream")
    upstream_options = fake.bodies[-1]["stream_options"]
    assert upstream_options["include_usage"]
    assert upstream_options["continuous_usage_stats"]
    (row,) = usage_rows(engine)
    assert row["completion_tokens"] == 8
    assert row["num_drafts"] > 0


def _sync(fake: FakeVllm):
    def handle(request: httpx.Request) -> httpx.Response:
        async def collect() -> httpx.Response:
            response = await fake.handle(request)
            return httpx.Response(
                response.status_code, headers=response.headers, content=await response.aread()
            )

        return asyncio.run(collect())

    return handle


def test_missing_session_id_is_generated_and_returned(db_url, engine, fake):
    with serve(proxy_app(fake, db_url)) as url:
        first = httpx.post(url + "/v1/completions", json=completion("hello"), timeout=30)
        second = httpx.post(url + "/v1/completions", json=completion("hello"), timeout=30)
    generated = first.headers["x-session-id"]
    assert len(generated) == 32
    assert generated != second.headers["x-session-id"]
    assert {row["session_id"] for row in usage_rows(engine)} == {
        generated,
        second.headers["x-session-id"],
    }


def test_cancelled_stream_records_the_tokens_produced(db_url, engine, fake):
    body = completion("SLOW long answer", 60, stream=True)
    seen = 0
    with serve(proxy_app(fake, db_url)) as url:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", url + "/v1/completions", json=body) as response,
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
    assert row["prompt_tokens"] == 3
    assert row["error"] == "the client disconnected before the end"
    assert_gpu_time_conserved(engine, replica="a", gpus=2)


def test_client_hanging_up_right_after_done_is_not_a_cancellation(db_url, engine, fake):
    # The OpenAI SDK closes the connection as soon as it reads [DONE].
    body = completion("LINGER", 6, stream=True)
    with (
        serve(proxy_app(fake, db_url)) as url,
        httpx.Client(timeout=30) as client,
        client.stream("POST", url + "/v1/completions", json=body) as response,
    ):
        for line in response.iter_lines():
            if line == "data: [DONE]":
                break
    (row,) = usage_rows(engine)
    assert (row["status"], row["completion_tokens"], row["error"]) == ("ok", 6, None)


@pytest.mark.parametrize("stream", [False, True])
def test_dead_upstream_gives_503_and_an_error_record(db_url, engine, stream):
    dead = ReplicaSpec(url=f"http://127.0.0.1:{free_port()}", deployment="smol", name="dead")
    with serve(proxy_app(None, db_url, dead)) as url:
        response = httpx.post(
            url + "/v1/completions", json=completion("hi", stream=stream), timeout=30
        )
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["code"] == "upstream_unavailable"
    assert "unreachable" in error["message"]
    (row,) = usage_rows(engine)
    assert (row["status"], row["http_status"], row["event_id"]) == (
        "error",
        503,
        response.headers["x-event-id"],
    )
    assert row["completion_tokens"] == 0
    assert_gpu_time_conserved(engine, replica="dead", gpus=1)


def test_upstream_timeout_gives_503(db_url, engine, fake):
    with serve(proxy_app(fake, db_url)) as url:
        response = httpx.post(url + "/v1/completions", json=completion("TIMEOUT"), timeout=30)
    assert response.status_code == 503
    assert "timed out" in response.json()["error"]["message"]
    (row,) = usage_rows(engine)
    assert (row["status"], row["http_status"]) == ("error", 503)


def test_upstream_errors_pass_through_and_are_recorded(db_url, engine, fake):
    with serve(proxy_app(fake, db_url)) as url:
        response = httpx.post(
            url + "/v1/completions", json=completion("FAIL400", stream=True), timeout=30
        )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "BadRequestError"
    (row,) = usage_rows(engine)
    assert (row["status"], row["http_status"], row["error"]) == (
        "error",
        400,
        "max_tokens is too large",
    )


def test_stream_failing_midway_ends_with_an_error_event(db_url, engine, fake):
    with serve(proxy_app(fake, db_url)) as url:
        response = httpx.post(
            url + "/v1/completions", json=completion("MIDFAIL", 30, stream=True), timeout=30
        )
    events = stream_events(response.content)
    assert events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == "upstream_unavailable"
    (row,) = usage_rows(engine)
    assert row["status"] == "error"
    assert "ReadError" in row["error"]
    assert row["completion_tokens"] == 1 + 5  # the two steps that arrived


def test_bad_attribution_headers_are_refused(db_url, engine, fake):
    with serve(proxy_app(fake, db_url)) as url:
        response = httpx.post(
            url + "/v1/completions", json=completion("x"), headers={"X-Tags": "novalue"}, timeout=30
        )
        metrics = httpx.get(url + "/metrics").text
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_attribution"
    assert usage_rows(engine) == []
    assert 'specledger_proxy_rejected_requests_total{code="invalid_attribution"} 1.0' in metrics


def test_models_health_and_metrics(db_url, engine, fake):
    down = ReplicaSpec(url="http://dead.invalid:8000", deployment="smol", name="down")
    with serve(proxy_app(fake, db_url, REPLICA_A, down)) as url:
        models = httpx.get(url + "/v1/models").json()
        health = httpx.get(url + "/healthz")
        httpx.post(url + "/v1/completions", json=completion("hello"), timeout=30)
        metrics = httpx.get(url + "/metrics")
    assert [model["id"] for model in models["data"]] == ["fake-model"]
    assert health.status_code == 200
    assert health.json()["status"] == "degraded"
    assert [r["healthy"] for r in health.json()["replicas"]] == [True, False]
    assert metrics.headers["content-type"].startswith("text/plain")
    assert (
        'specledger_proxy_requests_total{deployment="smol",endpoint="completions",status="ok"} 1.0'
    ) in metrics.text
    assert 'specledger_proxy_tokens_total{deployment="smol",kind="completion"} 12.0' in (
        metrics.text
    )


def test_least_in_flight_routing_and_failover(db_url, engine, fake):
    dead = ReplicaSpec(url="http://dead.invalid:8000", deployment="smol", name="dead")
    calls: list[Call] = [
        ("/v1/completions", completion(f"SLOW {i}", 40, stream=True), {}) for i in range(6)
    ]
    with serve(proxy_app(fake, db_url, dead, REPLICA_A, REPLICA_B)) as url:
        first = httpx.post(url + "/v1/completions", json=completion("x"), timeout=30)
        results = run_all(url, calls)
    assert first.status_code == 503  # the dead replica is tried first, then avoided
    assert all(result["status"] == 200 for result in results)
    by_replica: dict[str, int] = {}
    for row in usage_rows(engine):
        by_replica[row["replica"]] = by_replica.get(row["replica"], 0) + 1
    assert by_replica["dead"] == 1
    assert by_replica["a"] + by_replica["b"] == 6
    assert min(by_replica["a"], by_replica["b"]) >= 2  # 3/3 unless one finished early
    for name in ("dead", "a", "b"):
        assert_gpu_time_conserved(engine, replica=name, gpus=2 if name != "dead" else 1)


def test_idle_windows_tile_the_wall_time(db_url, engine, fake):
    with serve(proxy_app(fake, db_url, idle_window_s=0.15)) as url:
        for _ in range(3):
            httpx.post(url + "/v1/completions", json=completion("SLOW hi", stream=True), timeout=30)
            time.sleep(0.3)
    with engine.connect() as conn:
        windows = conn.execute(select(func.count()).select_from(ReplicaIdle)).scalar_one()
    assert windows >= 2
    wall_ns = assert_gpu_time_conserved(engine, replica="a", gpus=2)
    assert wall_ns >= 0.9e9


def test_jsonl_log_loads_into_the_database_idempotently(db_url, engine, fake, tmp_path: Path):
    log = tmp_path / "usage.jsonl"
    calls: list[Call] = [
        ("/v1/completions", completion(f"q {i}", stream=i % 2 == 0), {}) for i in range(5)
    ]
    with serve(proxy_app(fake, None, jsonl_path=log)) as url:
        run_all(url, calls)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [line["record"] for line in lines].count("usage") == 5
    assert "." not in "".join(
        str(v)
        for line in lines
        for k, v in line.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    )
    first = load_usage(engine, [log])
    again = load_usage(engine, [log])
    assert (first.usage_inserted, first.idle_inserted) == (5, 1)
    assert (again.usage_inserted, again.usage_already_present, again.idle_inserted) == (0, 5, 0)
    assert_gpu_time_conserved(engine, replica="a", gpus=2)


def test_routing_by_load_sends_light_load_to_speculation_and_the_rest_to_plain(
    fake, tmp_path: Path
):
    plain = ReplicaSpec(url="http://fake-p:8000", deployment="smol", name="plain", gpus=2)
    log = tmp_path / "usage.jsonl"
    calls: list[Call] = [
        ("/v1/completions", completion(f"SLOW {i}", 40, stream=True), {}) for i in range(6)
    ]
    with serve(proxy_app(fake, None, REPLICA_A, plain, jsonl_path=log, speculate_up_to=2)) as url:
        alone = httpx.post(url + "/v1/completions", json=completion("x"), timeout=30)
        results = run_all(url, calls)
    assert alone.status_code == 200
    assert all(result["status"] == 200 for result in results)
    replicas = [
        json.loads(line)["replica"]
        for line in log.read_text().splitlines()
        if json.loads(line).get("event_id")
    ]
    # Alone: speculate. Six at once: loads 1 and 2 speculate, loads 3 to 6 go plain.
    assert replicas[0] == "a"
    assert sorted(replicas[1:]) == ["a", "a", "plain", "plain", "plain", "plain"]


def test_routing_by_load_needs_a_speculating_and_a_plain_replica():
    with pytest.raises(ValueError, match="at least one speculating and one plain"):
        ProxyConfig(replicas=(REPLICA_A, REPLICA_B), speculate_up_to=4, allow_anonymous=True)
