"""A billed and allocated month plus a load sweep, for the dashboard tests.

Two deployments (``d1`` prototype tier, ngram; ``d2`` scaled tier, a draft model) serve three
teams over 48 hours of October 2026. Each charge hour bills both instances; a networking row per
day is shared evenly between the teams; a storage row matches no deployment (unallocated).
Team ``ads-platform`` drafts poorly on ``d2`` (acceptance 30%).
"""

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.budgets import service as budgets
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.db import unit_of_work
from app.deployments.service import add_deployment, add_replica
from app.domain.periods import Month
from app.models import Sweep, SweepPointRecord
from ingest.service import IngestOptions, ingest_billing
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

MONTH = "2026-10"
TEAMS = ("search", "ads-platform", "research-lab")
HOURS = 48
START = datetime(2026, 10, 1, tzinfo=UTC)
SWEEP_LEVELS = (1, 2, 4, 8, 16)
# DESIGN.md, measured over HTTP on the CPU engine: output tokens/s.
SWEEP_BASELINE = (28.8, 52.5, 110.1, 159.6, 204.5)
SWEEP_NGRAM = (49.4, 68.0, 86.3, 109.0, 134.7)


@dataclass(frozen=True)
class Seeded:
    month: str
    sweep_id: int
    bill_micros: int


def _iso(instant: datetime) -> str:
    return f"{instant:%Y-%m-%dT%H:%M:%SZ}"


def _hour_row(hour: int, *, deployment: str, resource: str, cost: str) -> dict[str, str]:
    start = START + timedelta(hours=hour)
    return focus_row(
        MONTH,
        cost=cost,
        ResourceId=resource,
        ChargePeriodStart=_iso(start),
        ChargePeriodEnd=_iso(start + timedelta(hours=1)),
        Tags=json.dumps({"specledger-deployment": deployment}),
    )


def billing_rows() -> list[dict[str, str]]:
    rows = []
    for hour in range(HOURS):
        rows.append(_hour_row(hour, deployment="d1", resource="i-d1", cost="5.672"))
        rows.append(_hour_row(hour, deployment="d2", resource="i-d2", cost="21.957642"))
    for day in range(2):
        start = START + timedelta(days=day)
        rows.append(
            focus_row(
                MONTH,
                cost="3.25",
                ServiceCategory="Networking",
                ResourceId="",
                ServiceName="EFA",
                ChargePeriodStart=_iso(start),
                ChargePeriodEnd=_iso(start + timedelta(days=1)),
                Tags=json.dumps({"specledger-deployment": "d1"}),
            )
        )
        rows.append(
            focus_row(
                MONTH,
                cost="1.10",
                ServiceCategory="Storage",
                ResourceId="vol-9",
                ServiceName="EBS",
                ChargePeriodStart=_iso(start),
                ChargePeriodEnd=_iso(start + timedelta(days=1)),
                Tags=json.dumps({"project": "elsewhere"}),
            )
        )
    return rows


def usage_rows() -> list[dict[str, Any]]:
    # (deployment, replica, team, method, k, accepted of 80 drafted, requests per hour)
    plan = [
        ("d1", "r1", "search", "ngram", 4, 56, 3),
        ("d1", "r1", "ads-platform", "ngram", 4, 48, 2),
        ("d2", "r2", "ads-platform", "draft_model", 3, 24, 2),
        ("d2", "r2", "research-lab", "draft_model", 3, 44, 1),
    ]
    gpus = {"d1": 4, "d2": 8}
    share = {"d1": 0.45, "d2": 0.8}  # of the replica's GPUs a request keeps busy
    rows = []
    for hour in range(HOURS):
        busy = 1.0 + (hour % 24) / 12  # a daily load curve: 1x at midnight, ~3x at 23:00
        for deployment, replica, team, method, k, accepted, per_hour in plan:
            for i in range(per_hour):
                arrived = START + timedelta(hours=hour, minutes=2 + 11 * i + (hour % 7))
                seconds = 300.0 * busy + 300 + 7 * i
                rows.append(
                    usage_record(
                        deployment=deployment,
                        replica=replica,
                        team=team,
                        session_id=f"{team}-{hour // 6}-{i}",
                        arrived=arrived,
                        seconds=seconds,
                        gpu_ns=int(seconds * 1e9 * gpus[deployment] * share[deployment]),
                        spec_method=method,
                        spec_k=k,
                        draft_tokens=80,
                        num_drafts=20,
                        accepted_tokens=accepted + (hour % 5) - 2,
                        prompt_tokens=400 + 10 * i,
                        completion_tokens=int(900 * busy),
                        concurrency=1 + (hour + i) % 8,
                        tags={"app": "chat"},
                    )
                )
    return rows


def add_sweep(engine: Engine, *, fit: dict[str, Any] | None = None) -> int:
    with Session(engine) as session, session.begin():
        sweep = Sweep(
            name="ngram vs none, CPU engine",
            deployment="d1",
            created_at=datetime(2026, 10, 3, tzinfo=UTC),
            settings={},
            fit=fit,
        )
        session.add(sweep)
        session.flush()
        for config, method, k, rates in (
            ("none", "none", 0, SWEEP_BASELINE),
            ("ngram-k4", "ngram", 4, SWEEP_NGRAM),
        ):
            for level, rate in zip(SWEEP_LEVELS, rates, strict=True):
                session.add(
                    SweepPointRecord(
                        sweep_id=sweep.id,
                        config=config,
                        method=method,
                        k=k,
                        concurrency=level,
                        output_tokens_per_s=rate,
                        tpot_p50_s=level / rate,
                        metrics={
                            "acceptance_rate": 0.35 if k else None,
                            "mean_acceptance_length": 2.4 if k else None,
                        },
                    )
                )
        return sweep.id


def seed_month(engine: Engine, folder: Path) -> Seeded:
    """Bill, register, meter and allocate October 2026; add a sweep. Returns what was made."""
    rows = billing_rows()
    ingest_billing(engine, str(write_focus_csv(folder / "bill.csv", rows)), IngestOptions())
    with Session(engine) as session, session.begin():
        add_deployment(session, name="d1", tier="prototype", shared_policy="even")
        add_replica(session, deployment="d1", name="r1", gpus=4, resource_id="i-d1")
        add_deployment(session, name="d2", tier="scaled")
        add_replica(session, deployment="d2", name="r2", gpus=8, resource_id="i-d2")
    insert_usage(engine, usage_rows())
    with unit_of_work(engine) as session:
        run_allocation(
            session,
            Window.of_month(Month.parse(MONTH)),
            share_idle=False,
            tag_key="specledger-deployment",
        )
    bill = sum(round(float(r["EffectiveCost"]) * 10**6) for r in rows)
    with unit_of_work(engine) as session:
        for team in TEAMS:  # a budget per team: the budgets page shows each team its own
            budgets.create_budget(
                session,
                budgets.NewBudget(
                    name=f"{team}-monthly",
                    scope=BudgetScope(ScopeKind.team, team),
                    amount_micros=500 * 10**6,
                    currency="USD",
                    hard_limit_micros=600 * 10**6,
                ),
            )
    return Seeded(month=MONTH, sweep_id=add_sweep(engine), bill_micros=bill)
