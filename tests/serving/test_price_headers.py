"""A price on every response through the real proxy (fake vLLM; SQLite and PostgreSQL): the
deployment's rate card (GET /v1/prices) in headers, the cost estimate of a whole response,
and what the caller's team may still spend before its hard limit."""

import json
from decimal import Decimal

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_key
from app.budgets.service import HardLimitStanding
from app.domain.attribution import ProxyGrant
from app.main import create_app
from app.settings import Settings
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.attribution import Attribution
from serving.proxy.budget_guard import BudgetGuard
from serving.proxy.rate_card import RateCard
from tests.budgets.helpers import team_budget
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import bearer, proxy_key, serve
from tests.serving.test_proxy_budgets import D, allocated_hour_ago

_BODY = {"model": "fake-model", "prompt": "hello there world", "max_tokens": 4}


def _config(db_url: str) -> ProxyConfig:
    return ProxyConfig(
        replicas=(ReplicaSpec(url="http://fake:8000", deployment="d1", name="r1"),),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        budget_refresh_s=0.1,
    )


def test_responses_carry_the_rate_card_the_estimate_and_the_teams_headroom(
    engine: Engine, db_url: str, tmp_path
) -> None:
    billed = allocated_hour_ago(engine, tmp_path)
    for name, limit in (("wide", 9 * D), ("tight", 5 * D // 2)):
        team_budget(engine, name, around=billed, hard_limit_micros=limit)
    admin = proxy_key(engine, "ops")  # any key reads prices
    with Session(engine) as session, session.begin():
        reader = create_key(session, team="ops", admin=False).secret
    with TestClient(create_app(Settings(env="test", database_url=db_url))) as api:
        card = api.get("/v1/prices", headers={"Authorization": f"Bearer {reader}"}).json()
    (d1,) = card["items"]
    search, ads = proxy_key(engine, "search"), proxy_key(engine, "ads")
    rates = RateCard(engine)  # the month's prices as the proxy loads them at start
    rates.refresh()
    price = rates.price_of("d1")
    assert price is not None
    with (
        serve(create_proxy_app(_config(db_url), transport=FakeVllm().transport())) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        whole = client.post("/v1/completions", json=_BODY, headers=bearer(search))
        streamed = client.post(
            "/v1/completions", json={**_BODY, "stream": True}, headers=bearer(search)
        )
        with_usage = client.post(
            "/v1/completions",
            json={**_BODY, "stream": True, "stream_options": {"include_usage": True}},
            headers=bearer(search),
        )
        other = client.post("/v1/completions", json=_BODY, headers=bearer(ads))
        unpriced = client.post("/v1/completions", json=_BODY, headers=bearer(admin))
    assert whole.status_code == streamed.status_code == other.status_code == 200
    for response in (whole, streamed, other, unpriced):
        assert response.headers["x-specledger-price-month"] == card["month"]
        assert response.headers["x-specledger-price-currency"] == d1["currency"] == "USD"
        assert response.headers["x-specledger-price-output-1m"] == d1["cost_per_1m_output_tokens"]
        assert response.headers["x-specledger-price-input-1m"] == d1["cost_per_1m_input_tokens"]
    # The estimate is what a gateway charges from the card: input and output at their prices.
    usage = whole.json()["usage"]
    charged = (
        Decimal(d1["cost_per_1m_input_tokens"]) * usage["prompt_tokens"]
        + Decimal(d1["cost_per_1m_output_tokens"]) * usage["completion_tokens"]
    ) / 10**6
    estimate = Decimal(whole.headers["x-specledger-cost-estimate"])
    assert estimate > 0
    assert abs(estimate - charged) <= Decimal("0.000001")
    assert "x-specledger-cost-estimate" not in streamed.headers  # sent before the tokens
    # A stream whose client asked for usage gets the estimate in its usage chunk.
    chunks = [
        json.loads(line[len("data: ") :])
        for line in with_usage.text.splitlines()
        if line.startswith("data: {")
    ]
    assert "specledger_cost_estimate" not in json.dumps(chunks[:-1])
    final = chunks[-1]["usage"]
    assert (final["prompt_tokens"], final["completion_tokens"]) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )
    assert final["specledger_cost_estimate"] == whole.headers["x-specledger-cost-estimate"]
    assert "specledger_cost_estimate" not in streamed.text  # it did not ask for usage
    # search has spent 2.00: 0.50 left before the tighter of its two hard limits, less what
    # the request holds while it runs (its prompt and max_tokens at the card's prices).
    held = price.cost_of(-(-len(whole.request.content) // 4), 4)  # _BODY's max_tokens
    remaining = Decimal(whole.headers["x-specledger-budget-remaining"])
    assert remaining == Decimal("0.50") - Decimal(held) / D
    assert whole.headers["x-specledger-budget-currency"] == "USD"
    assert Decimal(streamed.headers["x-specledger-budget-remaining"]) <= remaining
    # ads has no budget; the team header of another team shows nothing either.
    assert "x-specledger-budget-remaining" not in other.headers
    assert "x-specledger-budget-remaining" not in unpriced.headers


def test_before_any_allocation_there_are_no_price_headers(engine: Engine, db_url: str) -> None:
    search = proxy_key(engine, "search")
    with (
        serve(create_proxy_app(_config(db_url), transport=FakeVllm().transport())) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        response = client.post("/v1/completions", json=_BODY, headers=bearer(search))
    assert response.status_code == 200
    assert not [name for name in response.headers if name.startswith("x-specledger-")]


def test_only_the_teams_own_key_or_a_gateway_sees_its_budget(engine: Engine, tmp_path) -> None:
    billed = allocated_hour_ago(engine, tmp_path)
    team_budget(engine, "cap", around=billed, hard_limit_micros=3 * D)
    guard = BudgetGuard(engine)
    guard.refresh()

    def seen(grant: ProxyGrant | None) -> tuple[HardLimitStanding, int] | None:
        return guard.team_headroom(Attribution(session_id="s", team="search", grant=grant))

    own = seen(ProxyGrant(key_id=1, name="k", team="search"))
    assert own is not None
    standing, remaining = own
    assert remaining == standing.remaining_micros == 3 * D - standing.spent_micros
    assert seen(ProxyGrant(key_id=2, name="g", team="edge", gateway=True)) == own
    assert seen(ProxyGrant(key_id=3, name="k", team="ads")) is None
    assert seen(None) is None  # an anonymous request that names the team in a header


def test_the_headroom_shown_is_what_this_process_may_still_admit(engine: Engine, tmp_path) -> None:
    """With the headroom split over two processes (``--budget-shares 2``), what a process
    reserves counts twice against the budget, as its admission counts it: the header falls
    to zero exactly where this process starts to refuse."""
    billed = allocated_hour_ago(engine, tmp_path)
    team_budget(engine, "cap", around=billed, hard_limit_micros=3 * D)
    guard = BudgetGuard(engine, shares=2)
    guard.refresh()
    search = Attribution(
        session_id="s", team="search", grant=ProxyGrant(key_id=1, name="k", team="search")
    )
    before = guard.team_headroom(search)
    assert before is not None
    standing, left = before
    assert left == standing.remaining_micros > 0
    share = left // 2  # each process may admit half of what was left
    first = guard.reserve(search, "d1", share // 4)
    assert not isinstance(first, HardLimitStanding)
    after = guard.team_headroom(search)
    assert after is not None
    assert after[1] == left - 2 * (share // 4)
    guard.reserve(search, "d1", share - share // 4)
    assert guard.team_headroom(search) == (standing, left - 2 * share)
    refused = guard.reserve(search, "d1", left - 2 * share + 1)
    assert isinstance(refused, HardLimitStanding)
