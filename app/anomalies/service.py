"""Cost anomalies per deployment and team, with their drivers in money.

The cost series is the budgets' spend (:func:`app.budgets.spend.spend`: the ledger where it
has allocated, metered usage at the latest unit cost after it), per day (weekly season) or
per hour (daily season). :func:`app.anomalies.rules.detect` flags buckets; for each, the
facts of the bucket and of its baseline (the same season position in the cycles before)
come from the ledger (idle) and the usage records (tokens, drafts, GPU time, and the cost
split over team, session, model and method in proportion to GPU time, as the ledger splits
a deployment-hour), and :func:`app.anomalies.rules.explain` says what moved.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select
from sqlalchemy.orm import Session

from app.alerts import Alert, AlertKind, Severity, enqueue
from app.anomalies.granularity import Granularity as Granularity
from app.anomalies.rules import (
    NOT_COVERED,
    Anomaly,
    BucketFacts,
    Driver,
    baseline_indices,
    detect,
    explain,
)
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.budgets.spend import spend
from app.db import utc_hour, utc_instant
from app.domain.ledger import EntryKind
from app.domain.money import format_micros
from app.kit.measures import sum_gpu_ns
from app.models import BillingRow, LedgerRollup, UsageRecord
from app.storage.run_repository import current_run_ids
from app.usage.unpriced import deployments_with_usage

SEASON = {Granularity.day: 7, Granularity.hour: 168}
"""Days repeat weekly; hours too (a weekday hour is not a weekend hour: judged by the day
before, weekends alone gave 72 false flags per 1,000 hours in bench.anomaly_detection)."""
CYCLES = {Granularity.day: 5, Granularity.hour: 3}
"""Seasons of history each bucket is judged from: five weeks of days, three weeks of hours."""
STEP = {Granularity.day: timedelta(days=1), Granularity.hour: timedelta(hours=1)}
DIMENSIONS = {
    "team": UsageRecord.team,
    "session": UsageRecord.session_id,
    "model": UsageRecord.model,
    "method": UsageRecord.spec_method,
}


@dataclass(frozen=True, slots=True)
class AnomalyReport:
    subject: BudgetScope
    granularity: Granularity
    bucket_start: datetime
    anomaly: Anomaly
    drivers: list[Driver]
    currency: str

    @property
    def bucket_end(self) -> datetime:
        return self.bucket_start + STEP[self.granularity]


def subjects(session: Session, start: datetime, end: datetime) -> list[BudgetScope]:
    """Every deployment and team with usage in ``[start, end)``."""
    window = (UsageRecord.finished_at >= start, UsageRecord.finished_at < end)
    found = [
        BudgetScope(kind, name)
        for kind, column in (
            (ScopeKind.deployment, UsageRecord.deployment),
            (ScopeKind.team, UsageRecord.team),
        )
        for name in session.scalars(select(column).where(*window).distinct())
        if name is not None
    ]
    return sorted(found, key=str)


def find_anomalies(
    session: Session,
    *,
    end: datetime,
    granularity: Granularity = Granularity.day,
    buckets: int | None = None,
    currency: str,
    only: Sequence[BudgetScope] | None = None,
) -> list[AnomalyReport]:
    """Anomalies in the ``buckets`` buckets before ``end`` (default: as many as the detector
    can judge beyond its warm-up, two weeks of days or two days of hours), each deployment and
    team (or ``only`` these), newest first."""
    step, season, cycles = STEP[granularity], SEASON[granularity], CYCLES[granularity]
    judged = buckets or (14 if granularity is Granularity.day else 48)
    end = _floor(end, granularity)
    start = end - step * (cycles * season + judged)
    reports = []
    loaded = _loaded_buckets(session, start, end, granularity)
    for subject in only if only is not None else subjects(session, start, end):
        series = _series(session, subject, start, end, granularity, currency)
        # A bucket with no data loaded at all (no bill, no usage) is not a drop in spend.
        flagged = [a for a in detect(series, season=season, cycles=cycles) if a.index in loaded]
        anomalous = {a.index for a in flagged}
        baselines = {}
        for found in flagged:
            baselines[found.index] = [
                i
                for i in baseline_indices(found.index, season=season, cycles=cycles)
                if i not in anomalous
            ] or baseline_indices(found.index, season=season, cycles=cycles)
        needed = sorted({a.index for a in flagged} | {i for b in baselines.values() for i in b})
        facts = _facts(session, subject, start, step, {i: series[i] for i in needed}, currency)
        for found in flagged:
            drivers = explain(
                facts[found.index],
                [facts[i] for i in baselines[found.index]],
                expected_micros=found.expected_micros,
            )
            bucket = start + step * found.index
            reports.append(AnomalyReport(subject, granularity, bucket, found, drivers, currency))
    return sorted(reports, key=lambda r: (r.bucket_start, str(r.subject)), reverse=True)


def _loaded_buckets(
    session: Session, start: datetime, end: datetime, granularity: Granularity
) -> set[int]:
    """The buckets of ``[start, end)`` that any data was loaded for: a billing row charged
    in them or a usage record (of any team or deployment) that finished in them. The others
    are days (or hours) with no data, which are not days with no spend."""
    step = STEP[granularity]
    count = int((end - start) / step)
    found: set[int] = set()
    for deployment in deployments_with_usage(session):
        # One index seek per bucket that has usage (the first record at or after ``at``, on
        # the (deployment, finished_at) index), not a read of every record in the window.
        at = start
        while at < end:
            first = session.scalar(
                select(func.min(UsageRecord.finished_at)).where(
                    UsageRecord.deployment == deployment,
                    UsageRecord.finished_at >= at,
                    UsageRecord.finished_at < end,
                )
            )
            if first is None:
                break
            index = int((utc_instant(first) - start) / step)
            found.add(index)
            at = start + step * (index + 1)
    periods = session.execute(
        select(BillingRow.charge_period_start, BillingRow.charge_period_end)
        .where(BillingRow.charge_period_start < end, BillingRow.charge_period_end > start)
        .distinct()
    )
    for first, last in periods:
        lo = max(int((utc_instant(first) - start) / step), 0)
        hi = min(-(-(utc_instant(last) - start) // step), count)
        found.update(range(lo, hi))
    return {i for i in found if 0 <= i < count}


def _floor(at: datetime, granularity: Granularity) -> datetime:
    at = at.replace(minute=0, second=0, microsecond=0)
    return at.replace(hour=0) if granularity is Granularity.day else at


def _series(
    session: Session,
    subject: BudgetScope,
    start: datetime,
    end: datetime,
    granularity: Granularity,
    currency: str,
) -> list[int]:
    found = spend(session, subject, start, end, currency=currency)
    if granularity is Granularity.day:
        return [d.total_micros for d in found.days]
    count = int((end - start) / STEP[granularity])
    totals = [0] * count
    for at, (ledger, metered) in found.hours.items():
        index = int((at - start) / STEP[granularity])
        if 0 <= index < count:
            totals[index] += ledger + metered
    return totals


def _in_subject(subject: BudgetScope) -> ColumnElement[bool]:
    column = UsageRecord.deployment if subject.kind is ScopeKind.deployment else UsageRecord.team
    return column == subject.value


def _facts(
    session: Session,
    subject: BudgetScope,
    start: datetime,
    step: timedelta,
    costs: dict[int, int],
    currency: str,
) -> dict[int, BucketFacts]:
    """What the subject cost and served in each bucket ``[start + step * i, ... + step)``
    whose index ``i`` is in ``costs`` (with the bucket's cost), read by a few queries grouped
    per hour over just those buckets, not a set of queries per bucket."""
    if not costs:
        return {}
    dialect = session.get_bind().dialect.name
    hour = utc_hour(dialect, UsageRecord.finished_at)
    window = (
        or_(
            *(
                and_(
                    UsageRecord.finished_at >= start + step * i,
                    UsageRecord.finished_at < start + step * (i + 1),
                )
                for i in costs
            )
        ),
        _in_subject(subject),
    )

    def bucket_of(hour_value: Any) -> int:
        return int((utc_instant(hour_value) - start) / step)

    sums: dict[int, list[int]] = {i: [0, 0, 0, 0] for i in costs}
    for hour_value, *values in session.execute(
        select(
            hour,
            func.sum(UsageRecord.completion_tokens),
            func.sum(UsageRecord.gpu_ns),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.accepted_tokens),
        )
        .where(*window)
        .group_by(hour)
    ):
        totals = sums.get(bucket_of(hour_value))
        if totals is not None:
            for n, value in enumerate(values):
                totals[n] += int(value or 0)
    idle = _idle(session, subject, start, step, list(costs), currency)
    value_ns: dict[str, dict[int, dict[Any, int]]] = {}
    for name, column in DIMENSIONS.items():
        if subject.kind is ScopeKind.team and name == "team":
            continue
        found: dict[int, dict[Any, int]] = {i: {} for i in costs}
        for hour_value, value, gpu_ns in session.execute(
            select(hour, column, func.sum(UsageRecord.gpu_ns)).where(*window).group_by(hour, column)
        ):
            per_value = found.get(bucket_of(hour_value))
            if per_value is not None:
                per_value[value] = per_value.get(value, 0) + int(gpu_ns or 0)
        value_ns[name] = found
    facts = {}
    for i, cost in costs.items():
        tokens, gpu_ns, drafted, accepted = sums[i]
        idle_cost, idle_ns = idle.get(i, (0, 0))
        idle_cost = max(0, min(idle_cost, cost))
        request_cost = cost - idle_cost
        by_dimension: dict[str, dict[str, int]] = {}
        for name, per_bucket in value_ns.items():
            shares: dict[str, int] = {}
            for value, ns in per_bucket[i].items():
                label = _label(value)
                if gpu_ns > 0 and ns:
                    shares[label] = shares.get(label, 0) + request_cost * ns // gpu_ns
            by_dimension[name] = shares
        facts[i] = BucketFacts(
            cost_micros=cost,
            idle_cost_micros=idle_cost,
            by_dimension=by_dimension,
            output_tokens=tokens,
            request_gpu_seconds=gpu_ns / 1e9,
            idle_gpu_seconds=idle_ns / 1e9,
            draft_tokens=drafted,
            accepted_tokens=min(accepted, drafted),
        )
    return facts


def _idle(
    session: Session,
    subject: BudgetScope,
    start: datetime,
    step: timedelta,
    buckets: list[int],
    currency: str,
) -> dict[int, tuple[int, int]]:
    """A deployment's idle cost and GPU-ns per bucket, from the current runs' rollups."""
    if subject.kind is not ScopeKind.deployment:
        return {}
    found: dict[int, tuple[int, int]] = {}
    wanted = set(buckets)
    for period_start, cost, gpu_ns in session.execute(
        select(
            LedgerRollup.charge_period_start,
            func.sum(LedgerRollup.effective_cost_micros),
            sum_gpu_ns(LedgerRollup),
        )
        .where(
            LedgerRollup.run_id.in_(current_run_ids()),
            LedgerRollup.deployment == subject.value,
            LedgerRollup.kind == EntryKind.idle,
            LedgerRollup.currency == currency,
            LedgerRollup.charge_period_start >= start + step * min(buckets),
            LedgerRollup.charge_period_start < start + step * (max(buckets) + 1),
        )
        .group_by(LedgerRollup.charge_period_start)
    ):
        i = int((utc_instant(period_start) - start) / step)
        if i in wanted:
            cost_so_far, ns_so_far = found.get(i, (0, 0))
            found[i] = (cost_so_far + int(cost or 0), ns_so_far + int(gpu_ns or 0))
    return found


def _label(value: Any) -> str:
    text = "(none)" if value is None else str(value)
    return f"{text} " if text == NOT_COVERED else text  # a name may not be the sentinel


def anomaly_alert(report: AnomalyReport, *, now: datetime) -> Alert:
    """The alert for one anomaly, named by its subject and bucket (one alert per event)."""
    anomaly, top = report.anomaly, report.drivers[:3]
    causes = "; ".join(d.description for d in top)
    return Alert(
        kind=AlertKind.anomaly,
        dedup_key=f"anomaly:{report.subject}:{report.granularity}:{report.bucket_start:%Y-%m-%dT%H}",
        title=(
            f"Cost {anomaly.direction} for {report.subject}: "
            f"{format_micros(anomaly.actual_micros)} {report.currency} vs "
            f"{format_micros(anomaly.expected_micros)} expected"
        ),
        text=f"{report.granularity} starting {report.bucket_start:%Y-%m-%d %H:%M}Z. Drivers: {causes}",
        severity=Severity.warning,
        occurred_at=now,
        details={
            "subject": str(report.subject),
            "bucket_start": report.bucket_start.isoformat(),
            "granularity": report.granularity.value,
            "actual": format_micros(anomaly.actual_micros),
            "expected": format_micros(anomaly.expected_micros),
            "deviation": format_micros(anomaly.deviation_micros),
            "score": round(anomaly.score, 2),
            "drivers": [
                {
                    "dimension": d.dimension,
                    "value": d.value,
                    "effect": format_micros(d.effect_micros),
                    "description": d.description,
                }
                for d in top
            ],
        },
    )


def raise_alerts(session: Session, *, now: datetime, currency: str) -> int:
    """Alerts for the anomalies of the last complete day and hour (one per event)."""
    created = 0
    for granularity, recent in ((Granularity.day, 1), (Granularity.hour, 1)):
        for report in find_anomalies(
            session, end=now, granularity=granularity, buckets=recent, currency=currency
        ):
            created += enqueue(session, anomaly_alert(report, now=now), now)
    return created
