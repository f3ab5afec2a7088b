"""Brownout through the real proxy (fake vLLM; SQLite and PostgreSQL): as a team's spend
nears its hard limit the proxy first warns, then routes its requests to a cheaper deployment
(metered to the team there, tagged with the step), then refuses; each step is shown on the
budget and alerted once."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi.testclient import TestClient
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.auth.service import create_key
from app.budgets import service
from app.budgets.rules.steps import BudgetStep, StepAction, step_in_force
from app.deployments.service import add_deployment, add_replica
from app.domain.alerts import AlertKind
from app.domain.periods import Month
from app.main import create_app
from app.models import UsageRecord
from app.settings import Settings
from ingest.service import IngestOptions, ingest_billing
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.rate_card import RateCard
from tests.budgets.helpers import HOUR_NS, team_budget
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import bearer, proxy_key, serve

D = 1_000_000
PROMPT = "tell me a story"


def two_deployments_allocated(engine: Engine, folder: Path) -> datetime:
    """d1 billed 4.00 and the cheaper d2 1.00 for one hour a few hours ago; search used half
    of each, ads a quarter of d1; allocated: search has spent 2.50. Returns the hour."""
    billed = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=3)
    month = Month.of(billed)
    start = f"{billed:%Y-%m-%dT%H:%M:%SZ}"
    end = f"{billed + timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}"
    rows = [
        focus_row(month=str(month), cost="4.00", ChargePeriodStart=start, ChargePeriodEnd=end),
        focus_row(month=str(month), cost="1.00", ChargePeriodStart=start, ChargePeriodEnd=end,
                  ResourceId="i-2", Tags='{"specledger-deployment": "d2"}'),
    ]  # fmt: skip
    with Session(engine) as session, session.begin():
        for name, resource in (("d1", "i-1"), ("d2", "i-2")):
            add_deployment(session, name=name)
            add_replica(session, deployment=name, name=f"{name}-r", gpus=1, resource_id=resource)
        path = write_focus_csv(folder / "bill.csv", rows)
        ingest_billing(session.connection(), str(path), IngestOptions(source="t"))
        insert_usage(
            session.connection(),
            [
                usage_record(
                    team=team,
                    deployment=deployment,
                    replica=f"{deployment}-r",
                    arrived=billed + timedelta(minutes=5),
                    seconds=60,
                    gpu_ns=int(HOUR_NS * share),
                )
                for team, deployment, share in (
                    ("search", "d1", 0.5),
                    ("ads", "d1", 0.25),
                    ("search", "d2", 0.5),
                )
            ],
        )
        run_allocation(session, Window.of_month(month), share_idle=False,
                       tag_key="specledger-deployment")  # fmt: skip
    return billed


def test_the_steps_fire_in_order_then_the_limit_refuses(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    billed = two_deployments_allocated(engine, tmp_path)
    rates = RateCard(engine)
    rates.refresh()
    d1, d2 = rates.price_of("d1"), rates.price_of("d2")
    assert d1 is not None
    assert d2 is not None
    words, max_tokens = len(PROMPT.split()), 20
    per_request = d1.cost_of(words, max_tokens)  # what one request on d1 settles at
    assert 0 < d2.cost_of(words, max_tokens) < per_request
    spent = 5 * D // 2
    limit = spent + 12 * per_request
    # Warn from about two requests on, route from about five.
    warn = BudgetStep(-(-100 * (spent + 2 * per_request) // limit), StepAction.warn)
    route = BudgetStep(-(-100 * (spent + 5 * per_request) // limit), StepAction.route, "d2")
    assert warn.at_percent < route.at_percent
    midnight = billed.replace(hour=0)
    budget_id = team_budget(
        engine, "cap", around=billed, hard_limit_micros=limit, amount_micros=limit,
        steps=[route, warn],
    )  # fmt: skip
    search = proxy_key(engine, "search")
    config = ProxyConfig(
        replicas=(
            ReplicaSpec(url="http://one:8000", deployment="d1", name="r1", model="fake-model"),
            ReplicaSpec(url="http://two:8000", deployment="d2", name="r2", model="cheap-model"),
        ),
        database_url=db_url,
        tick_interval_s=0.05,
        sink_flush_interval_s=0.05,
        budget_refresh_s=3600,  # only what this proxy counts moves spend during the test
    )
    fake = FakeVllm()
    body = {"model": "fake-model", "prompt": PROMPT, "max_tokens": max_tokens}
    seen: list[tuple[int, str | None, str | None]] = []  # status, step header, model served
    expected: list[str] = []
    counted = spent
    with serve(create_proxy_app(config, transport=fake.transport())) as base:
        for _ in range(60):
            answer = httpx.post(f"{base}/v1/completions", json=body, headers=bearer(search))
            step = step_in_force((warn, route), hard_limit_micros=limit, spent_micros=counted)
            expected.append("none" if step is None else str(step.action))
            header = answer.headers.get("x-specledger-budget-step")
            seen.append((answer.status_code, header, fake.bodies[-1]["model"]))
            if answer.status_code != 200:
                break
            usage = answer.json()["usage"]
            price = d2 if header and header.startswith("route") else d1
            counted += price.cost_of(usage["prompt_tokens"], usage["completion_tokens"])
    statuses = [status for status, _, _ in seen]
    assert statuses[-1] == 429, "the hard limit never refused"
    assert set(statuses[:-1]) == {200}
    actions = [header.split(";")[0] if header else "none" for _, header, _ in seen[:-1]]
    assert actions == expected[:-1]
    assert actions[0] == "none"
    assert {"none", "warn", "route"} == set(actions)
    assert actions == sorted(actions, key=["none", "warn", "route"].index)  # in order
    for _, header, served in seen[:-1]:
        assert (served == "cheap-model") == bool(header and header.startswith("route"))
    first_warn = next(h for _, h, _ in seen if h and h.startswith("warn"))
    assert first_warn == f"warn; at={warn.at_percent}; budget=cap"
    first_route = next(h for _, h, _ in seen if h and h.startswith("route"))
    assert first_route == f"route; at={route.at_percent}; budget=cap; to=d2"
    # Metered to the team on the deployment that served it, tagged with the step.
    with Session(engine) as session:
        records = session.execute(
            select(UsageRecord.deployment, UsageRecord.team, UsageRecord.tags)
            .where(UsageRecord.model.in_(["fake-model", "cheap-model"]))
            .order_by(UsageRecord.arrived_at)
        ).all()
    assert len(records) == len(seen) - 1
    assert [r.deployment for r in records] == [
        "d2" if action == "route" else "d1" for action in actions
    ]
    assert {r.team for r in records} == {"search"}
    assert [r.tags.get("specledger.budget_step") for r in records] == [
        None if action == "none" else f"{action}:cap" for action in actions
    ]
    # The budget shows its steps; each is alerted once a period (a step's dedup key).
    with Session(engine) as session, session.begin():
        reader = create_key(session, team="search", admin=False).secret
    with TestClient(create_app(Settings(env="test", database_url=db_url))) as api:
        shown = api.get(f"/v1/budgets/{budget_id}", headers={"Authorization": f"Bearer {reader}"})
    assert shown.status_code == 200
    steps = shown.json()["steps"]
    assert [(s["at_percent"], s["action"], s["route_to"]) for s in steps] == [
        (warn.at_percent, "warn", None),
        (route.at_percent, "route", "d2"),
    ]
    with Session(engine) as session:
        now = datetime.now(UTC)
        report = service.report(session, service.get_budget(session, "cap"), now=now)
        alerts = [
            a for a in service.budget_alerts(report, now=now) if a.kind is AlertKind.budget_step
        ]
    assert [a.dedup_key for a in alerts] == [
        f"budget-step:{budget_id}:{midnight:%Y-%m-%d}:{s.at_percent}" for s in report.steps_taken
    ]
    assert set(report.steps_taken) <= {warn, route}
    for step, since in report.steps_taken.items():
        assert next(s for s in steps if s["at_percent"] == step.at_percent)["taken_since"] == (
            since.isoformat().replace("+00:00", "Z")
        )
