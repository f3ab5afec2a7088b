"""The collector over real HTTP (uvicorn in a thread): OTLP in, the proxy's records out."""

import gzip
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from app.domain.attribution import UNATTRIBUTED, VIA_TAG
from serving.collector.app import CollectorConfig, create_collector_app
from serving.collector.timeline import ReplicaInfo
from tests.collector.otlp import export, request_span
from tests.serving.proxy_helpers import proxy_key, serve, usage_rows

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def config(tmp_path: Path, **overrides) -> CollectorConfig:
    return CollectorConfig(
        replicas={"replica-a": ReplicaInfo(deployment="dep", replica="a-0", gpus=2, model="m")},
        jsonl_path=tmp_path / "usage.jsonl",
        tick_interval_s=0.05,
        **overrides,
    )


def test_export_becomes_usage_and_idle_records(tmp_path):
    body = export(
        request_span(1, prompt=10, completion=20, trace_state="specledger=team:ads;session:s1"),
        request_span(2, prompt=30, completion=5),
    )
    with serve(create_collector_app(config(tmp_path, trust_callers=True))) as url:
        response = httpx.post(f"{url}/v1/traces", content=gzip.compress(body),
                              headers=PROTOBUF | {"Content-Encoding": "gzip"})  # fmt: skip
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/x-protobuf"
        ExportTraceServiceResponse.FromString(response.content)
        health = httpx.get(f"{url}/healthz").json()
    assert health["replicas"]["replica-a"]["spans"] == 2
    rows = records(tmp_path / "usage.jsonl")
    usage = {r["event_id"][:32]: r for r in rows if r["record"] == "usage"}
    (idle,) = [r for r in rows if r["record"] == "replica_idle"]
    first, second = usage[f"{1:032x}"], usage[f"{2:032x}"]
    assert (first["team"], first["session_id"], first["tags"][VIA_TAG]) == ("ads", "s1", "caller")
    assert (second["team"], second["session_id"]) == (UNATTRIBUTED, f"trace-{2:032x}")
    assert (first["deployment"], first["replica"], first["model"]) == ("dep", "a-0", "m")
    assert (first["prompt_tokens"], first["completion_tokens"]) == (10, 20)
    # Both ran 0.5 s side by side on 2 GPUs: 1 GPU-second in all; the replica was idle from
    # then until the watermark (now minus the lateness), when the window closed.
    # (less under one GPU-ns per request, which rounding leaves to idle)
    assert 2 * 500_000_000 - 2 < first["gpu_ns"] + second["gpu_ns"] <= 2 * 500_000_000
    wall_ns = (_instant(idle["end_at"]) - _instant(idle["start_at"])) // timedelta(microseconds=1)
    assert first["gpu_ns"] + second["gpu_ns"] + idle["gpu_ns"] == 2 * wall_ns * 1000


def test_malformed_export_is_refused_with_the_field_and_changes_nothing(tmp_path):
    bad = export(request_span(1), request_span(2, extra={"gen_ai.usage.prompt_tokens": 1.5}))
    with serve(create_collector_app(config(tmp_path))) as url:
        response = httpx.post(f"{url}/v1/traces", content=bad, headers=PROTOBUF)
        assert response.status_code == 400
        message = response.json()["error"]["message"]
        assert message.startswith(
            'resource_spans[0].scope_spans[0].spans[1].attributes["gen_ai.usage.prompt_tokens"]'
        )
        assert "double_value 1.5" in message
        garbage = httpx.post(f"{url}/v1/traces", content=b"\xff\xff", headers=PROTOBUF)
        assert garbage.status_code == 400
        assert garbage.json()["error"]["message"].startswith("body: not an OTLP")
        as_json = httpx.post(f"{url}/v1/traces", json={"resourceSpans": []})
        assert as_json.status_code == 415
        assert "http/protobuf" in as_json.json()["error"]["message"]
        health = httpx.get(f"{url}/healthz").json()
    assert health["replicas"] == {}
    assert health["refused_exports"] == 3
    assert not (tmp_path / "usage.jsonl").read_text()


def test_strict_replicas_refuses_an_unknown_replica(tmp_path):
    with serve(create_collector_app(config(tmp_path, strict_replicas=True))) as url:
        response = httpx.post(
            f"{url}/v1/traces", content=export(request_span(1), service="rogue"), headers=PROTOBUF
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "resource: unknown replica 'rogue'"


def test_without_trust_an_anonymous_caller_cannot_name_its_team(tmp_path):
    body = export(request_span(1, trace_state="specledger=team:ads;session:s1"))
    with serve(create_collector_app(config(tmp_path))) as url:
        assert httpx.post(f"{url}/v1/traces", content=body, headers=PROTOBUF).status_code == 200
        assert httpx.get(f"{url}/healthz").json()["overruled_attributions"] == 1
    (usage,) = [r for r in records(tmp_path / "usage.jsonl") if r["record"] == "usage"]
    assert (usage["team"], usage["session_id"]) == (UNATTRIBUTED, "s1")


@pytest.mark.usefixtures("db_url")
def test_a_key_decides_the_team_and_is_required(tmp_path, db_url, engine):
    secret = proxy_key(engine, "search", cost_center="cc-search")
    body = export(request_span(1, trace_state="specledger=team:ads;session:s1"))
    app = create_collector_app(
        CollectorConfig(database_url=db_url, require_key=True, tick_interval_s=0.05)
    )
    with serve(app) as url:
        missing = httpx.post(f"{url}/v1/traces", content=body, headers=PROTOBUF)
        assert missing.status_code == 401
        wrong = httpx.post(f"{url}/v1/traces", content=body,
                           headers=PROTOBUF | {"Authorization": "Bearer slk_nope"})  # fmt: skip
        assert wrong.status_code == 401
        keyed = httpx.post(f"{url}/v1/traces", content=body,
                           headers=PROTOBUF | {"Authorization": f"Bearer {secret}"})  # fmt: skip
        assert keyed.status_code == 200
    (row,) = usage_rows(engine)
    assert (row["team"], row["cost_center"], row["session_id"]) == ("search", "cc-search", "s1")
    assert row["tags"][VIA_TAG] == "key"
