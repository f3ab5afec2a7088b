"""A deployment with a bill, usage and an allocation: the ground budgets are checked on."""

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.budgets import service as budgets
from app.budgets.rules.budget import BudgetScope, PeriodKind
from app.budgets.rules.steps import BudgetStep
from app.deployments.service import add_deployment, add_replica
from app.domain.periods import Month
from ingest.service import IngestOptions, ingest_billing
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

OCTOBER = Month(2026, 10)
HOUR_NS = 3600 * 10**9


def hour(h: int) -> datetime:
    return datetime(2026, 10, 1, tzinfo=UTC) + timedelta(hours=h)


def register(session: Session) -> None:
    add_deployment(session, name="d1")
    add_replica(session, deployment="d1", name="r1", gpus=1, resource_id="i-1")


def bill(session: Session, folder: Path, hours: range, cost: str, name: str) -> None:
    """One GPU row per hour for d1 at ``cost`` (a FOCUS file, ingested)."""
    rows = [focus_row(hour=h, cost=cost) for h in hours]
    path = write_focus_csv(folder / f"{name}.csv", rows)
    ingest_billing(session.connection(), str(path), IngestOptions(source=name))


def use(session: Session, hours: range, *, team: str, share: float, **extra: Any) -> None:
    """One request per hour for ``team`` holding ``share`` of the hour's GPU time."""
    insert_usage(
        session.connection(),
        [
            usage_record(
                team=team,
                arrived=hour(h) + timedelta(minutes=10),
                seconds=60,
                gpu_ns=int(HOUR_NS * share),
                **extra,
            )
            for h in hours
        ],
    )


def allocate(session: Session) -> None:
    run_allocation(session, Window.of_month(OCTOBER), share_idle=False,
                   tag_key="specledger-deployment")  # fmt: skip


def daily_bills(session: Session, folder: Path, days: list[datetime], cost: str) -> None:
    """d1 billed ``cost`` on each of ``days``, loaded as one file per month."""
    rows = [
        focus_row(
            month=str(Month.of(start)),
            cost=cost,
            ChargePeriodStart=f"{start:%Y-%m-%dT%H:%M:%SZ}",
            ChargePeriodEnd=f"{start + timedelta(days=1):%Y-%m-%dT%H:%M:%SZ}",
        )
        for start in days
    ]
    for month in sorted({Month.of(start) for start in days}):
        mine = [r for r in rows if r["ChargePeriodStart"].startswith(str(month))]
        path = write_focus_csv(folder / f"{month}.csv", mine)
        ingest_billing(session.connection(), str(path), IngestOptions(source=str(month)))


def team_budget(
    engine: Engine,
    name: str,
    *,
    around: datetime,
    hard_limit_micros: int,
    amount_micros: int = 10 * 10**6,
    steps: Sequence[BudgetStep] = (),
) -> int:
    """A budget for team search over the three days from the midnight before ``around``,
    with a hard limit (and ``steps``); returns its id."""
    midnight = around.replace(hour=0, minute=0, second=0, microsecond=0)
    with Session(engine) as session, session.begin():
        return budgets.create_budget(
            session,
            budgets.NewBudget(
                name=name,
                scope=BudgetScope.parse("team=search"),
                amount_micros=amount_micros,
                currency="USD",
                period=PeriodKind.custom,
                start=midnight,
                end=midnight + timedelta(days=3),
                hard_limit_micros=hard_limit_micros,
                steps=steps,
            ),
        ).id
