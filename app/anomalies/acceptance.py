"""Acceptance drift per deployment: a CUSUM on hourly production acceptance against the
deployment's own baseline (:mod:`app.anomalies.rules.acceptance_drift`), with what it costs."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.alerts import Alert, AlertKind, Severity
from app.anomalies.rules import verified_per_output_token
from app.anomalies.rules.acceptance_drift import AcceptanceBucket, detect_drop
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.budgets.spend import spend
from app.db import utc_hour, utc_instant
from app.domain.money import format_micros
from app.models import UsageRecord

HOUR = timedelta(hours=1)
BASELINE_DAYS = 7
WATCH_DAYS = 7


@dataclass(frozen=True, slots=True)
class AcceptanceDrift:
    deployment: str
    change_at: datetime
    """The estimated first hour of the lower acceptance."""
    alarm_at: datetime
    baseline_rate: float
    recent_rate: float
    cost_micros: int
    """What the extra verification work has cost since the change: the deployment's spend
    since then times the share of GPU work that the lost acceptance added."""
    currency: str


def acceptance_drifts(
    session: Session,
    *,
    now: datetime,
    currency: str,
    baseline_days: int = BASELINE_DAYS,
    watch_days: int = WATCH_DAYS,
) -> list[AcceptanceDrift]:
    """Deployments whose hourly acceptance fell from their baseline (the first
    ``baseline_days`` of the last ``baseline_days + watch_days``), one alarm each."""
    end = now.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(days=baseline_days + watch_days)
    hour = utc_hour(session.get_bind().dialect.name, UsageRecord.finished_at)
    rows = session.execute(
        select(
            UsageRecord.deployment,
            hour,
            func.sum(UsageRecord.accepted_tokens),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.completion_tokens),
        )
        .where(
            UsageRecord.finished_at >= start,
            UsageRecord.finished_at < end,
            UsageRecord.draft_tokens > 0,
        )
        .group_by(UsageRecord.deployment, hour)
    )
    hours = int((end - start) / HOUR)
    series: dict[str, list[tuple[int, int, int]]] = defaultdict(lambda: [(0, 0, 0)] * hours)
    for deployment, at, accepted, drafted, output in rows:
        index = int((utc_instant(at) - start) / HOUR)
        if 0 <= index < hours:
            series[deployment][index] = (int(accepted), int(drafted), int(output))
    found = []
    for deployment, values in sorted(series.items()):
        buckets = [AcceptanceBucket(accepted=a, drafted=d) for a, d, _ in values]
        usable = sum(1 for b in buckets[: baseline_days * 24] if b.drafted > 0)
        if usable < 3:
            continue
        alarm = detect_drop(buckets, baseline=baseline_days * 24)
        if alarm is None:
            continue
        change_at = start + HOUR * alarm.change_index
        before = _work_per_token(values[: baseline_days * 24])
        after = _work_per_token(values[alarm.change_index :])
        spent = spend(
            session, BudgetScope(ScopeKind.deployment, deployment), change_at, end,
            currency=currency,
        ).total_micros  # fmt: skip
        extra = 0 if after <= before else round(spent * (1 - before / after))
        found.append(
            AcceptanceDrift(
                deployment=deployment,
                change_at=change_at,
                alarm_at=start + HOUR * alarm.alarm_index,
                baseline_rate=alarm.baseline_rate,
                recent_rate=alarm.recent_rate,
                cost_micros=extra,
                currency=currency,
            )
        )
    return found


def _work_per_token(values: list[tuple[int, int, int]]) -> float:
    return verified_per_output_token(
        accepted=sum(a for a, _, _ in values),
        drafted=sum(d for _, d, _ in values),
        output=sum(o for _, _, o in values),
    )


def drift_alert(drift: AcceptanceDrift, *, now: datetime) -> Alert:
    """One alert per deployment and change."""
    return Alert(
        kind=AlertKind.acceptance_drift,
        dedup_key=f"acceptance-drift:{drift.deployment}:{drift.change_at:%Y-%m-%dT%H}",
        title=(
            f"Acceptance of {drift.deployment} fell from {drift.baseline_rate:.0%} to "
            f"{drift.recent_rate:.0%}"
        ),
        text=(
            f"Since about {drift.change_at:%Y-%m-%d %H:00}Z (CUSUM alarm at "
            f"{drift.alarm_at:%H:00}Z); the extra verification work has cost about "
            f"{format_micros(drift.cost_micros)} {drift.currency} since. Check the drafter "
            "(a changed model or prompt mix), lower k, or switch speculation off."
        ),
        severity=Severity.warning,
        occurred_at=now,
        details={
            "deployment": drift.deployment,
            "change_at": drift.change_at.isoformat(),
            "alarm_at": drift.alarm_at.isoformat(),
            "baseline_rate": round(drift.baseline_rate, 4),
            "recent_rate": round(drift.recent_rate, 4),
            "cost": format_micros(drift.cost_micros),
            "currency": drift.currency,
        },
    )
