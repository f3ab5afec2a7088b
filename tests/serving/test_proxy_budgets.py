"""Hard budget limits through the real proxy (fake vLLM; SQLite and PostgreSQL): a team over
its limit gets 429 while another team's requests pass, and a request in flight finishes; a
burst is admitted only as far as its reserved cost fits."""

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.domain.periods import Month
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.rate_card import RateCard
from tests.budgets.helpers import HOUR_NS, register, team_budget
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import bearer, proxy_key, serve

D = 1_000_000


def allocated_hour_ago(engine: Engine, folder: Path) -> datetime:
    """d1 billed 4.00 for one hour a few hours ago, search using half of it, ads a quarter,
    allocated: search has spent 2.00, ads 1.00. Returns the billed hour."""
    billed = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    month = Month.of(billed)
    row = focus_row(
        month=str(month),
        cost="4.00",
        ChargePeriodStart=f"{billed:%Y-%m-%dT%H:%M:%SZ}",
        ChargePeriodEnd=f"{billed + timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}",
    )
    from ingest.service import IngestOptions, ingest_billing

    with Session(engine) as session, session.begin():
        register(session)
        path = write_focus_csv(folder / "bill.csv", [row])
        ingest_billing(session.connection(), str(path), IngestOptions(source="t"))
        insert_usage(
            session.connection(),
            [
                usage_record(
                    team=team,
                    arrived=billed + timedelta(minutes=5),
                    seconds=60,
                    gpu_ns=int(HOUR_NS * share),
                )
                for team, share in (("search", 0.5), ("ads", 0.25))
            ],
        )
        run_allocation(session, Window.of_month(month), share_idle=False,
                       tag_key="specledger-deployment")  # fmt: skip
    return billed


def test_a_team_over_its_hard_limit_gets_429_and_another_team_passes(engine, db_url, tmp_path):
    billed = allocated_hour_ago(engine, tmp_path)
    search, ads = proxy_key(engine, "search"), proxy_key(engine, "ads")
    config = ProxyConfig(
        replicas=(ReplicaSpec(url="http://fake:8000", deployment="d1", name="r1"),),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        budget_refresh_s=0.1,
    )
    body = {"model": "fake-model", "prompt": "hello", "max_tokens": 4}
    slow = {"model": "fake-model", "prompt": "SLOW story", "max_tokens": 40, "stream": True}
    streamed: dict[str, object] = {}
    with (
        serve(create_proxy_app(config, transport=FakeVllm().transport())) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        assert client.post("/v1/completions", json=body, headers=bearer(search)).status_code == 200

        def stream() -> None:
            with client.stream("POST", "/v1/completions", json=slow, headers=bearer(search)) as r:
                streamed["status"], streamed["body"] = r.status_code, r.read()

        in_flight = threading.Thread(target=stream)
        in_flight.start()
        team_budget(engine, "search-cap", around=billed, hard_limit_micros=3 * D // 2)
        deadline = datetime.now(UTC) + timedelta(seconds=10)
        while (
            refused := client.post("/v1/completions", json=body, headers=bearer(search))
        ).status_code == 200:
            assert datetime.now(UTC) < deadline, "the hard limit was not enforced"
        assert client.post("/v1/completions", json=body, headers=bearer(ads)).status_code == 200
        metrics = client.get("/metrics").text
        in_flight.join(30)
    assert refused.status_code == 429
    answer = refused.json()
    assert answer["error"]["code"] == "budget_exceeded"
    assert "search-cap" in answer["error"]["message"]
    spent = Decimal(answer["budget"]["spent"])  # 2.00 allocated + the proxied requests
    assert Decimal(2) <= spent < Decimal("2.01")
    assert answer["budget"] | {"period_end": None, "spent": None} == {
        "id": answer["budget"]["id"],
        "name": "search-cap",
        "scope": "team=search",
        "currency": "USD",
        "hard_limit": "1.500000",
        "spent": None,
        "period_end": None,
    }
    assert int(refused.headers["retry-after"]) > 0
    assert streamed["status"] == 200  # the request in flight when the limit was hit finished
    assert isinstance(streamed["body"], bytes)
    assert streamed["body"].rstrip().endswith(b"data: [DONE]")
    assert 'specledger_proxy_rejected_requests_total{code="budget_exceeded"}' in metrics


@pytest.mark.parametrize("shares", [1, 2])
def test_a_burst_is_admitted_only_as_far_as_its_reserved_cost_fits_the_limit(
    engine: Engine, db_url: str, tmp_path: Path, shares: int
) -> None:
    """Twenty requests at once, with room under the hard limit for five at their expected
    cost: the rest get 429 before any has ended (no refresh happens during the burst), and
    what the admitted ones cost is counted when they end."""
    billed = allocated_hour_ago(engine, tmp_path)
    rates = RateCard(engine)
    rates.refresh()
    price = rates.price_of("d1")
    assert price is not None
    body = json.dumps({"model": "fake-model", "prompt": "SLOW story", "max_tokens": 60,
                       "stream": True}).encode()  # fmt: skip
    estimate = price.cost_of(-(-len(body) // 4), 60)
    assert estimate > 0
    headroom = (5 * estimate + estimate // 2) * shares
    # search has spent 2.00
    team_budget(engine, "search-cap", around=billed, hard_limit_micros=2 * D + headroom)
    search = proxy_key(engine, "search")
    config = ProxyConfig(
        replicas=(ReplicaSpec(url="http://fake:8000", deployment="d1", name="r1"),),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        budget_refresh_s=3600,  # the standings read at start-up hold for the whole test
        budget_shares=shares,
    )
    headers = {**bearer(search), "content-type": "application/json"}

    async def burst(base: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=base, timeout=60) as client:

            async def one() -> httpx.Response:
                response = await client.post("/v1/completions", content=body, headers=headers)
                await response.aread()
                return response

            return list(await asyncio.gather(*(one() for _ in range(20))))

    with serve(create_proxy_app(config, transport=FakeVllm().transport())) as base:
        answers = asyncio.run(burst(base))
        small = {"model": "fake-model", "prompt": "hi", "max_tokens": 2}
        after = httpx.post(f"{base}/v1/completions", json=small, headers=bearer(search))
    admitted = [a for a in answers if a.status_code == 200]
    refused = [a for a in answers if a.status_code == 429]
    assert len(admitted) == 5
    assert len(refused) == 15
    assert all(a.text.rstrip().endswith("data: [DONE]") for a in admitted)
    error = refused[0].json()["error"]
    assert error["code"] == "budget_exceeded"
    assert "would pass its hard limit" in error["message"]
    assert "this request may cost" in error["message"]
    # The five have ended: their metered cost (at most their estimate) is what is counted,
    # so a small request still fits and sees what is left: what this process used counts
    # once per share, as its admission counts it.
    assert after.status_code == 200, after.text
    left = Decimal(after.headers["x-specledger-budget-remaining"]) * D
    assert headroom - shares * (5 * estimate + 2 * price.cost_of(10, 2)) <= left <= headroom
