"""Waste findings over a window: gather the exposures from the database, judge them with
:mod:`app.domain.waste`.

A team's view is built from its own requests only (its deployments, its team, its sessions;
speculation above breakeven in its traffic). Idle GPU time belongs to no team, so idle
findings are for admin views only.
"""

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from app.breakeven.service import breakeven_curves
from app.domain.ledger import CostLabel, EntryKind
from app.domain.waste import (
    AcceptanceGroup,
    BreakevenExposure,
    Finding,
    IdleExposure,
    Scope,
    Thresholds,
    above_breakeven_finding,
    idle_findings,
    low_acceptance_findings,
)
from app.domain.windows import TimeWindow
from app.ledger.repository import current_run_ids, refuse_store_runs
from app.models import Deployment, LedgerEntry, Replica, UsageRecord


@dataclass(slots=True)
class WasteReport:
    window: TimeWindow
    observed_seconds: float
    """The part of the window that has passed: the basis of the monthly estimates."""
    currency: str
    findings: list[Finding]


def find_waste(
    session: Session,
    *,
    window: TimeWindow,
    team: str | None,
    thresholds: Thresholds,
    now: datetime,
    default_currency: str,
) -> WasteReport:
    """Every finding in the window, largest estimated monthly cost first."""
    refuse_store_runs(session, "waste findings", window=(window.start, window.end))
    observed = (min(window.end, max(now, window.start)) - window.start).total_seconds()
    observed = observed if observed > 0 else window.seconds
    usage = [
        UsageRecord.arrived_at >= window.start,
        UsageRecord.arrived_at < window.end,
        UsageRecord.spec_method != "none",
    ]
    if team is not None:
        usage.append(UsageRecord.team == team)
    costs = (
        select(
            LedgerEntry.event_id.label("event_id"),
            func.sum(LedgerEntry.effective_cost_micros).label("cost"),
        )
        .where(LedgerEntry.run_id.in_(current_run_ids()), LedgerEntry.event_id.is_not(None))
        .group_by(LedgerEntry.event_id)
        .subquery()
    )
    findings: list[Finding] = []
    for scope, column in (
        (Scope.deployment, UsageRecord.deployment),
        (Scope.team, UsageRecord.team),
        (Scope.session, UsageRecord.session_id),
    ):
        groups = _acceptance_groups(session, scope, column, usage, costs)
        findings += low_acceptance_findings(groups, thresholds, window_seconds=observed)
    for deployment, curve in breakeven_curves(session).items():
        exposure = _above(session, deployment, curve.breakeven_concurrency, usage, costs)
        finding = above_breakeven_finding(curve, exposure, window_seconds=observed)
        if finding is not None:
            findings.append(finding)
    if team is None:
        findings += idle_findings(_idle(session, window), thresholds, window_seconds=observed)
    findings.sort(key=lambda f: (-f.monthly_cost_micros, f.kind, f.scope, f.key))
    return WasteReport(window, observed, _currency(session, window) or default_currency, findings)


def _acceptance_groups(
    session: Session, scope: Scope, column: Any, usage: list[ColumnElement[bool]], costs: Any
) -> list[AcceptanceGroup]:
    rejected = UsageRecord.draft_tokens - UsageRecord.accepted_tokens
    query = (
        select(
            column,
            func.count(),
            func.sum(UsageRecord.num_drafts),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.accepted_tokens),
            func.sum(UsageRecord.prompt_tokens + UsageRecord.completion_tokens + rejected),
            func.sum(func.coalesce(costs.c.cost, 0)),
            func.max(UsageRecord.spec_k),
            func.min(UsageRecord.spec_method),
            func.max(UsageRecord.spec_method),
        )
        .outerjoin(costs, costs.c.event_id == UsageRecord.event_id)
        .where(*usage, UsageRecord.draft_tokens > 0)
        .group_by(column)
    )
    return [
        AcceptanceGroup(
            scope=scope,
            key=CostLabel.none if key is None else str(key),
            method=low_method if low_method == high_method else "mixed",
            k=None if k is None else int(k),
            requests=int(n),
            num_drafts=int(drafts or 0),
            draft_tokens=int(drafted or 0),
            accepted_tokens=int(accepted or 0),
            scheduled_tokens=int(scheduled or 0),
            cost_micros=int(cost or 0),
        )
        for key, n, drafts, drafted, accepted, scheduled, cost, k, low_method, high_method in session.execute(
            query
        )
    ]


def _above(
    session: Session,
    deployment: str,
    breakeven: float,
    usage: list[ColumnElement[bool]],
    costs: Any,
) -> BreakevenExposure:
    if session.get_bind().dialect.name == "sqlite":
        seconds = (
            func.julianday(UsageRecord.finished_at) - func.julianday(UsageRecord.arrived_at)
        ) * 86_400.0
    else:
        seconds = func.extract("epoch", UsageRecord.finished_at - UsageRecord.arrived_at)
    n, total_seconds, concurrency, cost, low_method, high_method = session.execute(
        select(
            func.count(),
            func.sum(seconds),
            func.sum(UsageRecord.concurrency),
            func.sum(func.coalesce(costs.c.cost, 0)),
            func.min(UsageRecord.spec_method),
            func.max(UsageRecord.spec_method),
        )
        .outerjoin(costs, costs.c.event_id == UsageRecord.event_id)
        .where(*usage, UsageRecord.deployment == deployment, UsageRecord.concurrency > breakeven)
    ).one()
    n = int(n or 0)
    return BreakevenExposure(
        deployment=deployment,
        method=low_method if low_method == high_method else "mixed",
        requests=n,
        seconds=float(total_seconds or 0.0),
        mean_concurrency=float(concurrency or 0) / n if n else 0.0,
        cost_micros=int(cost or 0),
    )


def _idle(session: Session, window: TimeWindow) -> list[IdleExposure]:
    in_window = [
        LedgerEntry.run_id.in_(current_run_ids()),
        LedgerEntry.charge_period_start >= window.start,
        LedgerEntry.charge_period_start < window.end,
        LedgerEntry.kind.in_((EntryKind.request, EntryKind.idle)),
        LedgerEntry.deployment.is_not(None),
    ]
    totals: dict[str, list[int]] = {}
    for deployment, kind, amount in session.execute(
        select(
            LedgerEntry.deployment, LedgerEntry.kind, func.sum(LedgerEntry.effective_cost_micros)
        )
        .where(*in_window)
        .group_by(LedgerEntry.deployment, LedgerEntry.kind)
    ):
        entry = totals.setdefault(str(deployment), [0, 0])
        entry[1] += int(amount or 0)
        if kind is EntryKind.idle:
            entry[0] += int(amount or 0)
    replicas = Counter(
        name
        for (name,) in session.execute(
            select(Deployment.name).join(Replica, Replica.deployment_id == Deployment.id)
        )
    )
    return [
        IdleExposure(
            deployment=name, idle_micros=idle, gpu_micros=total, replicas=replicas.get(name, 1)
        )
        for name, (idle, total) in sorted(totals.items())
    ]


def _currency(session: Session, window: TimeWindow) -> str | None:
    return session.scalar(
        select(LedgerEntry.currency)
        .where(
            LedgerEntry.run_id.in_(current_run_ids()),
            LedgerEntry.charge_period_start >= window.start,
            LedgerEntry.charge_period_start < window.end,
        )
        .limit(1)
    )
