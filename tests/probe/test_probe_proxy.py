"""A probe run through the real metering proxy (the fake vLLM behind it; SQLite and
PostgreSQL): stored with the right figures, and its requests metered and charged under the
probe team, on the probed deployment only."""

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from app.cli.probe import probe_app
from app.models import ProbeRun
from app.probe import ProbeKeyRefused, load_probe_set, run_probe
from app.probe.probe_set import ProbeSet
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import proxy_key, serve, usage_rows

NOW = datetime(2026, 12, 5, 9, 30, tzinfo=UTC)
K = 4


@pytest.fixture
def fake() -> FakeVllm:
    """The fake engine; its final usage chunk carries vLLM's ``acceptance_histogram`` (a
    decode step of n tokens accepted n - 1 drafts)."""
    return FakeVllm(k=K)


@pytest.fixture
def proxy(fake: FakeVllm, engine: Engine, db_url: str) -> Iterator[str]:
    config = ProxyConfig(
        replicas=(
            ReplicaSpec(url="http://fake:8000", deployment="smol", name="a", spec_method="ngram",
                        spec_k=K),
            ReplicaSpec(url="http://fake:8001", deployment="big", name="b", spec_method="ngram",
                        spec_k=K),
        ),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        key_refresh_s=0.1,
    )  # fmt: skip
    with serve(create_proxy_app(config, transport=httpx.MockTransport(fake.handle))) as url:
        yield url


def _expected(max_tokens: int) -> dict[str, Any]:
    """What the fake answers one request with: its steps, drafts and histogram."""
    steps = FakeVllm.steps(max_tokens)[1:]
    histogram = [0] * (K + 1)
    for size in steps:
        histogram[size - 1] += 1
    return {
        "steps": len(steps),
        "drafted": K * len(steps),
        "accepted": sum(size - 1 for size in steps),
        "histogram": histogram,
    }


def _records(engine: Engine, session_id: str, count: int) -> list[dict[str, Any]]:
    """The proxy's usage records of one probe run, once its sink has written them all."""
    deadline = time.monotonic() + 20
    while True:
        rows = [r for r in usage_rows(engine) if r["session_id"] == session_id]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def test_a_probe_run_is_stored_with_its_figures_and_charged_to_the_probe_team(proxy, engine, fake):
    key = proxy_key(engine, "probe", deployments=("smol",))
    probe_set = load_probe_set()
    with Session(engine, expire_on_commit=False) as session:
        run = run_probe(
            session, deployment="smol", proxy_url=proxy, api_key=key, now=NOW, concurrency=2
        )
        session.commit()
    one = _expected(64)  # every prompt of v1 asks for 64 tokens; the fake gives them all
    n = len(probe_set.prompts)
    assert (one["steps"], one["drafted"], one["accepted"]) == (23, 92, 40)
    assert one["histogram"] == [6, 6, 5, 0, 6]
    assert (run.requests, run.ok, run.error) == (n, n, None)
    assert (run.deployment, run.model, run.team, run.concurrency) == (
        "smol", "fake-model", "probe", 2,
    )  # fmt: skip
    assert (run.probe_set_version, run.probe_set_sha256) == ("v1", probe_set.sha256)
    assert run.output_tokens == 64 * n
    assert (run.num_drafts, run.draft_tokens, run.accepted_tokens) == (23 * n, 92 * n, 40 * n)
    assert run.acceptance_rate == pytest.approx(40 / 92)
    assert run.acceptance_histogram == [6 * n, 6 * n, 5 * n, 0, 6 * n]
    assert run.acceptance_per_position == pytest.approx([17 / 23, 11 / 23, 6 / 23, 6 / 23])
    assert run.tokens_per_s is not None
    assert run.tokens_per_s > 0
    assert run.tpot_p50_ms is not None
    assert run.tpot_p90_ms is not None
    assert 0 < run.tpot_p50_ms <= run.tpot_p90_ms
    assert run.started_at == NOW < run.finished_at
    assert [b["temperature"] for b in fake.bodies] == [0.0] * n
    assert [b["max_tokens"] for b in fake.bodies] == [64] * n

    records = _records(engine, run.session_id, n)
    assert len(records) == n
    assert {(r["team"], r["deployment"], r["status"]) for r in records} == {("probe", "smol", "ok")}
    assert {r["tags"]["probe_set"] for r in records} == {"v1"}
    assert sum(r["draft_tokens"] for r in records) == run.draft_tokens
    assert sum(r["accepted_tokens"] for r in records) == run.accepted_tokens
    assert sum(r["completion_tokens"] for r in records) == run.output_tokens
    assert all(r["gpu_ns"] > 0 for r in records)  # metered, so allocated and charged
    with Session(engine) as session:
        assert session.scalars(select(ProbeRun.id)).all() == [run.id]


def test_keys_that_would_hide_or_misroute_the_probe_are_refused(proxy, engine, fake):
    refused = {
        "another team's key": proxy_key(engine, "search", deployments=("smol",)),
        "a key for every deployment": proxy_key(engine, "probe"),
        "a key for two deployments": proxy_key(engine, "probe", deployments=("smol", "big")),
        "an unknown key": "slk_" + "x" * 43,
    }
    for what, key in refused.items():
        with Session(engine) as session, pytest.raises(ProbeKeyRefused) as caught:
            run_probe(session, deployment="smol", proxy_url=proxy, api_key=key, now=NOW)
        assert "keys create --proxy --team probe --deployments smol" in caught.value.message, what
    assert fake.bodies == []
    assert usage_rows(engine) == []


def test_a_failed_request_is_stored_with_the_run(proxy, engine, tmp_path: Path):
    path = tmp_path / "mini.jsonl"
    lines = [
        {"id": "ok", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12},
        {"id": "bad", "messages": [{"role": "user", "content": "FAIL400"}], "max_tokens": 12},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    probe_set: ProbeSet = load_probe_set(path)
    key = proxy_key(engine, "probe", deployments=("smol",))
    with Session(engine, expire_on_commit=False) as session:
        run = run_probe(session, deployment="smol", proxy_url=proxy, api_key=key,
                        probe_set=probe_set, now=NOW)  # fmt: skip
        session.commit()
    assert (run.requests, run.ok, run.probe_set_version) == (2, 1, "mini")
    assert run.error is not None
    assert run.error.startswith("bad: HTTP 400")
    assert run.output_tokens == 12
    assert run.acceptance_rate == pytest.approx(
        _expected(12)["accepted"] / _expected(12)["drafted"]
    )


def test_the_cli_runs_lists_and_judges_probes(proxy, engine, cli_env, monkeypatch):
    runner = CliRunner()
    key = proxy_key(engine, "probe", deployments=("smol",))
    args = ["run", "--deployment", "smol", "--proxy-url", proxy, "--json"]
    missing = runner.invoke(probe_app, args)
    assert missing.exit_code == 2
    assert "SPECLEDGER_PROBE_KEY" in missing.output
    monkeypatch.setenv("SPECLEDGER_PROBE_KEY", key)
    ran = runner.invoke(probe_app, args)
    assert ran.exit_code == 0, ran.output
    row = json.loads(ran.output)
    assert (row["team"], row["ok"], row["requests"], row["probe_set"]) == ("probe", 16, 16, "v1")
    assert row["acceptance_per_position"] == [round(x / 23, 4) for x in (17, 11, 6, 6)]
    assert runner.invoke(probe_app, [*args[:-1], "--concurrency", "4"]).exit_code == 0

    listed = runner.invoke(probe_app, ["list", "--json"])
    assert listed.exit_code == 0, listed.output
    runs = json.loads(listed.output)
    assert [(r["concurrency"], r["id"]) for r in runs] == [(4, row["id"] + 1), (1, row["id"])]
    text = runner.invoke(probe_app, ["list", "--deployment", "smol"]).output
    assert "acceptance  43.5% (per position 74% 48% 26% 26%)" in text

    drift = runner.invoke(probe_app, ["drift", "--json"])
    assert drift.exit_code == 0, drift.output
    series = json.loads(drift.output)
    assert [(s["concurrency"], s["runs"], s["drift"]) for s in series] == [(1, 1, None),
                                                                            (4, 1, None)]  # fmt: skip
    assert "collecting the baseline (1/24)" in runner.invoke(probe_app, ["drift"]).output

    monkeypatch.setenv("SPECLEDGER_PROBE_KEY", proxy_key(engine, "search"))
    refused = runner.invoke(probe_app, args)
    assert refused.exit_code == 2
    assert "bills team 'search'" in refused.output
