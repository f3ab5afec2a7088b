"""The proxy checks its metered spec-decode sums against vLLM's own counters: a meter that
drifts from the engine is reported, not silent."""

import time
from typing import Any

import httpx

from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.vllm_metrics import EngineCounterCheck
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import serve

ZERO = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}


def _counters(drafts: int, tokens: int, accepted: int) -> dict[str, int]:
    return {"num_drafts": drafts, "num_draft_tokens": tokens, "num_accepted_tokens": accepted}


def test_the_check_needs_a_quiet_baseline_and_follows_a_restart():
    check = EngineCounterCheck()
    assert check.observe(_counters(10, 40, 20), quiet=False) is None  # busy: no baseline
    assert check.observe(_counters(10, 40, 20), quiet=True) is None  # the baseline
    check.record(num_drafts=5, draft_tokens=20, accepted_tokens=9)
    assert check.observe(_counters(15, 60, 29), quiet=True) == ZERO
    check.record(num_drafts=1, draft_tokens=4, accepted_tokens=1)
    assert check.observe(_counters(19, 76, 33), quiet=True) == _counters(3, 12, 3)
    assert check.observe(_counters(2, 8, 1), quiet=True) is None  # restarted: new baseline
    assert check.drift is None


def _health(client: httpx.Client) -> dict[str, Any]:
    replica: dict[str, Any] = client.get("/healthz").json()["replicas"][0]
    return replica


def _wait_for(client: httpx.Client, drift: dict[str, int]) -> None:
    deadline = time.monotonic() + 10
    while _health(client)["engine_counter_drift"] != drift:
        assert time.monotonic() < deadline, _health(client)
        time.sleep(0.05)


def test_metered_requests_match_the_engine_and_unmetered_traffic_shows_as_drift(tmp_path):
    fake = FakeVllm()
    config = ProxyConfig(
        replicas=(ReplicaSpec(url="http://fake:8000", deployment="smol", name="a"),),
        jsonl_path=tmp_path / "usage.jsonl",
        allow_anonymous=True,
        tick_interval_s=0.05,
        counter_check_s=0.05,
    )
    body = {"model": "fake-model", "prompt": "hello there", "max_tokens": 9}
    with (
        serve(create_proxy_app(config, transport=fake.transport())) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        for _ in range(4):
            assert client.post("/v1/completions", json=body).status_code == 200
        assert fake.num_drafts > 0
        _wait_for(client, ZERO)
        # Traffic the proxy never saw (a client calling vLLM directly).
        fake.num_drafts += 3
        fake.num_draft_tokens += 12
        fake.num_accepted_tokens += 5
        _wait_for(client, _counters(3, 12, 5))
        metrics = client.get("/metrics").text
    assert (
        'specledger_proxy_engine_counter_drift{counter="num_draft_tokens",deployment="smol",'
        'replica="a"} 12.0'
    ) in metrics
    assert 'result="drift"' in metrics
