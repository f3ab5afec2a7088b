"""Cost anomalies over HTTP: a team key sees its own team's."""

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from app.anomalies.service import AnomalyReport, Granularity, find_anomalies
from app.auth.deps import PrincipalDep
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.deps import NowDep, SessionDep, SettingsDep
from app.errors import RESPONSES_READ
from app.kit.schemas import Amount, Schema, money

router = APIRouter(prefix="/anomalies", tags=["anomalies"])


class DriverRead(Schema):
    dimension: str
    value: str | None
    baseline: float | None
    actual: float | None
    unit: str
    effect: Amount
    """This driver's part of the deviation (the factors add up to it exactly)."""
    description: str


class AnomalyRead(Schema):
    subject: str
    granularity: Granularity
    bucket_start: datetime
    bucket_end: datetime
    actual: Amount
    expected: Amount
    deviation: Amount
    score: float
    direction: str
    currency: str
    drivers: list[DriverRead] = Field(description="Ranked by money.")


def anomaly_read(report: AnomalyReport) -> AnomalyRead:
    found = report.anomaly
    return AnomalyRead(
        subject=str(report.subject),
        granularity=report.granularity,
        bucket_start=report.bucket_start,
        bucket_end=report.bucket_end,
        actual=money(found.actual_micros),
        expected=money(found.expected_micros),
        deviation=money(found.deviation_micros),
        score=round(found.score, 3),
        direction=str(found.direction),
        currency=report.currency,
        drivers=[
            DriverRead(
                dimension=d.dimension,
                value=d.value,
                baseline=d.baseline,
                actual=d.actual,
                unit=d.unit,
                effect=money(d.effect_micros),
                description=d.description,
            )
            for d in report.drivers
        ],
    )


@router.get("", response_model=list[AnomalyRead], responses=RESPONSES_READ)
def list_anomalies(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    now: NowDep,
    granularity: Annotated[
        Granularity, Query(description="day (weekly season) or hour (daily season).")
    ] = Granularity.day,
    buckets: Annotated[
        int, Query(ge=1, le=400, description="How many recent complete buckets to judge.")
    ] = 14,
) -> list[AnomalyRead]:
    """Cost anomalies per deployment and team in the recent buckets, newest first, each with
    its drivers in money (team, session, model, method, acceptance, idle share, volume); a
    team key sees its own team's only."""
    only = None
    if not principal.is_admin:
        assert principal.team is not None
        only = [BudgetScope(ScopeKind.team, principal.team)]
    reports = find_anomalies(
        session,
        end=now,
        granularity=granularity,
        buckets=buckets,
        currency=settings.default_currency,
        only=only,
    )
    if only is not None:  # a team's drivers name only its own sessions, models and methods
        reports = [r for r in reports if r.subject in only]
    return [anomaly_read(r) for r in reports]
