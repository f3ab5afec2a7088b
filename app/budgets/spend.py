"""A scope's spend per day: the ledger where it has allocated, metered usage priced at the
deployment's latest unit cost after that (see :mod:`app.budgets.rules.budget`)."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.orm import Session

from app.budgets.rules.budget import BudgetScope, ScopeKind, UnitPrice
from app.db import utc_hour, utc_instant
from app.domain.ledger import EntryKind
from app.models import AllocationRun, LedgerEntry, LedgerRollup, UsageRecord
from app.storage.run_repository import current_run_ids

PRICE_WINDOW = timedelta(days=1)
"""The unit cost used for metered usage comes from the ledger's last allocated day."""


@dataclass(frozen=True, slots=True)
class DaySpend:
    day: date
    ledger_micros: int
    metered_micros: int

    @property
    def total_micros(self) -> int:
        return self.ledger_micros + self.metered_micros


@dataclass(frozen=True, slots=True)
class SpendBreakdown:
    """A scope's spend in ``[start, end)``, per UTC day."""

    start: datetime
    end: datetime
    days: tuple[DaySpend, ...]
    hours: dict[datetime, tuple[int, int]]
    """Hours with spend: (ledger, metered) micros by the hour's start."""
    metered_gpu_ns: int
    """GPU time of the usage the ledger does not cover yet (estimated, not allocated)."""
    covered_until: dict[str, datetime]
    """Per deployment, the end of the last hour the ledger has allocated."""
    unpriced: tuple[str, ...]
    """Deployments with usage after the ledger but no unit cost yet (no allocation): their
    usage counts as zero until one runs."""

    @property
    def ledger_micros(self) -> int:
        return sum(d.ledger_micros for d in self.days)

    @property
    def metered_micros(self) -> int:
        return sum(d.metered_micros for d in self.days)

    @property
    def total_micros(self) -> int:
        return self.ledger_micros + self.metered_micros

    def between(self, start: date, end: date) -> int:
        """Total of the days in ``[start, end)``."""
        return sum(d.total_micros for d in self.days if start <= d.day < end)


def spend(
    session: Session,
    scope: BudgetScope,
    start: datetime,
    end: datetime,
    *,
    currency: str,
    metered_before: datetime | None = None,
) -> SpendBreakdown:
    """The spend of ``scope`` in ``[start, end)``, per UTC day, in ``currency``; with
    ``metered_before``, only of the metered usage that finished before it (the proxy counts
    what ends after it itself: :mod:`app.budgets.rules.admission`)."""
    ledger: dict[datetime, int] = defaultdict(int)
    for charge_hour, micros in session.execute(_ledger_hours(scope, start, end, currency)):
        ledger[_hour_of(utc_instant(charge_hour))] += int(micros or 0)
    # A cost center's or tag's ledger part joins entries to usage in the database, so hours
    # allocated into a Parquet store are not covered for them: they stay metered.
    covered = _covered_until(
        session, currency, in_database_only=scope.kind in (ScopeKind.cost_center, ScopeKind.tag)
    )
    metered_ns: dict[tuple[str, datetime], int] = defaultdict(int)
    dialect = session.get_bind().dialect.name
    hour = utc_hour(dialect, UsageRecord.finished_at)
    metered_until = end if metered_before is None else min(end, metered_before)
    usage = (
        select(UsageRecord.deployment, hour, func.sum(UsageRecord.gpu_ns))
        .where(
            UsageRecord.finished_at >= start,
            UsageRecord.finished_at < metered_until,
            _usage_in(scope),
            _not_allocated(covered),
        )
        .group_by(UsageRecord.deployment, hour)
    )
    for deployment, hour_value, gpu_ns in session.execute(usage):
        at = utc_instant(hour_value)
        boundary = covered.get(deployment)
        if boundary is None or at >= boundary:
            metered_ns[(deployment, at)] += int(gpu_ns or 0)
    prices = {
        name: _unit_price(session, scope, name, covered[name], currency)
        for name in {name for name, _ in metered_ns}
        if name in covered
    }
    metered: dict[datetime, int] = defaultdict(int)
    for (deployment, at), gpu_ns in metered_ns.items():
        price = prices.get(deployment)
        metered[at] += price.cost_of(gpu_ns) if price else 0
    hours = {
        at: (ledger.get(at, 0), metered.get(at, 0)) for at in sorted(set(ledger) | set(metered))
    }
    by_day: dict[date, list[int]] = defaultdict(lambda: [0, 0])
    for at, (in_ledger, estimated) in hours.items():
        by_day[at.date()][0] += in_ledger
        by_day[at.date()][1] += estimated
    first, last = start.date(), (end - timedelta(microseconds=1)).date()
    days = tuple(
        DaySpend(day, *by_day.get(day, (0, 0)))
        for day in (first + timedelta(days=n) for n in range((last - first).days + 1))
    )
    unpriced = sorted({name for name, _ in metered_ns if prices.get(name) is None})
    return SpendBreakdown(
        start=start,
        end=end,
        days=days,
        hours=hours,
        metered_gpu_ns=sum(metered_ns.values()),
        covered_until=covered,
        unpriced=tuple(unpriced),
    )


def _hour_of(at: datetime) -> datetime:
    return at.replace(minute=0, second=0, microsecond=0)


def _not_allocated(covered: dict[str, datetime]) -> ColumnElement[bool]:
    """Usage after the ledger's last allocated hour of its deployment (so the query reads
    only the unallocated tail through the (deployment, finished_at) index)."""
    return or_(
        UsageRecord.deployment.not_in(list(covered)),
        *(
            and_(UsageRecord.deployment == name, UsageRecord.finished_at >= boundary)
            for name, boundary in covered.items()
        ),
    )


def _usage_in(scope: BudgetScope) -> ColumnElement[bool]:
    if scope.kind is ScopeKind.team:
        return UsageRecord.team == scope.value
    if scope.kind is ScopeKind.cost_center:
        return UsageRecord.cost_center == scope.value
    if scope.kind is ScopeKind.deployment:
        return UsageRecord.deployment == scope.value
    key, value = scope.tag
    matches: ColumnElement[bool] = UsageRecord.tags[key].as_string() == value
    return matches


def _ledger_hours(
    scope: BudgetScope, start: datetime, end: datetime, currency: str
) -> Select[datetime | None, int]:
    """Allocated cost per charge hour: rollups for a team or deployment; for a cost center
    or tag, the request entries joined to their usage records (entries kept in a Parquet
    store are not joined: their hours count as metered)."""
    if scope.kind in (ScopeKind.team, ScopeKind.deployment):
        column = LedgerRollup.team if scope.kind is ScopeKind.team else LedgerRollup.deployment
        return (
            select(LedgerRollup.charge_period_start, func.sum(LedgerRollup.effective_cost_micros))
            .where(
                LedgerRollup.run_id.in_(current_run_ids()),
                LedgerRollup.charge_period_start >= start,
                LedgerRollup.charge_period_start < end,
                LedgerRollup.kind != EntryKind.unallocated,
                LedgerRollup.currency == currency,
                column == scope.value,
            )
            .group_by(LedgerRollup.charge_period_start)
        )
    return (
        select(LedgerEntry.charge_period_start, func.sum(LedgerEntry.effective_cost_micros))
        .join(UsageRecord, UsageRecord.event_id == LedgerEntry.event_id)
        .where(
            LedgerEntry.run_id.in_(current_run_ids()),
            LedgerEntry.kind == EntryKind.request,
            LedgerEntry.charge_period_start >= start,
            LedgerEntry.charge_period_start < end,
            LedgerEntry.currency == currency,
            _usage_in(scope),
        )
        .group_by(LedgerEntry.charge_period_start)
    )


def _covered_until(
    session: Session, currency: str, *, in_database_only: bool
) -> dict[str, datetime]:
    runs = current_run_ids()
    if in_database_only:
        runs = runs.where(AllocationRun.store_uri.is_(None))
    query = (
        select(LedgerRollup.deployment, func.max(LedgerRollup.charge_period_end))
        .where(
            LedgerRollup.run_id.in_(runs),
            LedgerRollup.deployment.is_not(None),
            LedgerRollup.kind.in_([EntryKind.request, EntryKind.idle]),
            LedgerRollup.currency == currency,
        )
        .group_by(LedgerRollup.deployment)
    )
    return {
        name: utc_instant(end)
        for name, end in session.execute(query)
        if name is not None and end is not None
    }


def _unit_price(
    session: Session, scope: BudgetScope, deployment: str, covered: datetime, currency: str
) -> UnitPrice | None:
    """The deployment's cost per metered GPU-nanosecond over its last allocated day: request
    cost only for a team, cost center or tag (idle is not theirs unless shared back), all of
    the deployment's cost for a deployment budget."""
    is_request = LedgerRollup.kind == EntryKind.request
    row = session.execute(
        select(
            func.sum(LedgerRollup.effective_cost_micros).filter(is_request),
            func.sum(LedgerRollup.effective_cost_micros),
            func.sum(LedgerRollup.gpu_ns).filter(is_request),
        ).where(
            LedgerRollup.run_id.in_(current_run_ids()),
            LedgerRollup.deployment == deployment,
            LedgerRollup.kind != EntryKind.unallocated,
            LedgerRollup.currency == currency,
            LedgerRollup.charge_period_start >= covered - PRICE_WINDOW,
        )
    ).one()
    request_cost, all_cost, request_ns = (int(v or 0) for v in row)
    if request_ns <= 0:
        return None
    cost = all_cost if scope.kind is ScopeKind.deployment else request_cost
    return UnitPrice(cost_micros=cost, gpu_ns=request_ns)
