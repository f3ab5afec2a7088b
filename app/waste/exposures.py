"""The exposures the waste report's own sources judge, gathered where the ledger keeps them
(the database, or a month's Parquet store): speculative requests per scope, requests above
breakeven, idle cost per deployment. Counts are summed over a window's parts, costs per place.
"""

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import Session

from app.breakeven.rules.curve import BreakevenCurve
from app.db import utc_instant
from app.domain.findings import AcceptanceGroup, Scope
from app.domain.ledger import COMPUTE_METHODS, CostLabel, EntryKind
from app.domain.windows import TimeWindow
from app.models import BillingRow, Deployment, LedgerEntry, Replica, UsageRecord
from app.storage.entry_reader import EntryReader, WindowPart, places
from app.storage.run_repository import current_run_ids
from app.waste.rules import BreakevenExposure, IdleExposure, unused_capacity_cost


def acceptance_groups(
    parts: Sequence[WindowPart], window: TimeWindow, team: str | None
) -> dict[Scope, dict[str, AcceptanceGroup]]:
    """Speculative requests per scope and key: counted over the parts, priced per place."""
    groups: dict[Scope, dict[str, AcceptanceGroup]] = {scope: {} for scope in _SCOPES}
    for part in parts:
        usage = _speculative_usage(part.start, part.end, team)
        for scope, column in _SCOPES.items():
            for group in _acceptance_groups(part.reader, scope, column, usage):
                _add_group(groups[scope], group)
    usage = _speculative_usage(window.start, window.end, team)
    for reader in places(parts):
        for scope, column in _SCOPES.items():
            for key, cost in _group_costs(reader, column, usage, UsageRecord.draft_tokens > 0):
                _add_cost(groups[scope], key, cost)
    return groups


def above_breakeven(
    parts: Sequence[WindowPart],
    curves: Mapping[str, BreakevenCurve],
    window: TimeWindow,
    team: str | None,
) -> dict[str, BreakevenExposure]:
    """Requests above each deployment's breakeven: counted over the parts, priced per
    place."""
    above: dict[str, BreakevenExposure] = {}
    for part in parts:
        usage = _speculative_usage(part.start, part.end, team)
        for deployment, curve in curves.items():
            exposure = _above(part.reader, deployment, curve.breakeven_concurrency, usage)
            above[deployment] = _add_exposure(above.get(deployment), exposure)
    usage = _speculative_usage(window.start, window.end, team)
    for reader in places(parts):
        for deployment, curve in curves.items():
            for _, cost in _group_costs(
                reader,
                UsageRecord.deployment,
                [*usage, UsageRecord.deployment == deployment],
                UsageRecord.concurrency > curve.breakeven_concurrency,
            ):
                above[deployment] = replace(
                    above[deployment], cost_micros=above[deployment].cost_micros + cost
                )
    return above


def idle_by_deployment(session: Session, parts: Sequence[WindowPart]) -> dict[str, tuple[int, int]]:
    idle: dict[str, tuple[int, int]] = {}
    for part in parts:
        totals = _idle_totals(part.reader, part.start, part.end)
        for deployment, shared in _shared_idle(session, part.reader, part.start, part.end).items():
            known_idle, known_total = totals.get(deployment, (0, 0))
            totals[deployment] = (known_idle + shared, known_total)
        for deployment, (part_idle, part_total) in totals.items():
            known_idle, known_total = idle.get(deployment, (0, 0))
            idle[deployment] = (known_idle + part_idle, known_total + part_total)
    return idle


_SCOPES: dict[Scope, Any] = {
    Scope.deployment: UsageRecord.deployment,
    Scope.team: UsageRecord.team,
    Scope.session: UsageRecord.session_id,
}


def _speculative_usage(
    start: datetime, end: datetime, team: str | None
) -> list[ColumnElement[bool]]:
    usage = [
        UsageRecord.arrived_at >= start,
        UsageRecord.arrived_at < end,
        UsageRecord.spec_method != "none",
    ]
    if team is not None:
        usage.append(UsageRecord.team == team)
    return usage


def _acceptance_groups(
    reader: EntryReader, scope: Scope, column: Any, usage: list[ColumnElement[bool]]
) -> list[AcceptanceGroup]:
    """One part's speculative requests per key of ``scope``, their cost left at zero (it
    is added per place: see :func:`_group_costs`)."""
    rejected = UsageRecord.draft_tokens - UsageRecord.accepted_tokens
    drafted_col, accepted_col = UsageRecord.draft_tokens, UsageRecord.accepted_tokens
    query = (
        select(
            column,
            func.count(),
            func.sum(UsageRecord.num_drafts),
            func.sum(drafted_col),
            func.sum(accepted_col),
            func.sum(UsageRecord.prompt_tokens + UsageRecord.completion_tokens + rejected),
            func.max(UsageRecord.spec_k),
            func.min(UsageRecord.spec_method),
            func.max(UsageRecord.spec_method),
            func.sum(accepted_col * accepted_col),
            func.sum(accepted_col * drafted_col),
            func.sum(drafted_col * drafted_col),
        )
        .where(*usage, UsageRecord.draft_tokens > 0)
        .group_by(column)
    )
    return [
        AcceptanceGroup(
            scope=scope,
            key=_label(key),
            method=low_method if low_method == high_method else "mixed",
            k=None if k is None else int(k),
            requests=int(n),
            num_drafts=int(drafts or 0),
            draft_tokens=int(drafted or 0),
            accepted_tokens=int(accepted or 0),
            scheduled_tokens=int(scheduled or 0),
            cost_micros=0,
            accepted_sq=int(accepted_sq or 0),
            accepted_drafted=int(cross or 0),
            drafted_sq=int(drafted_sq or 0),
        )
        for (
            key,
            n,
            drafts,
            drafted,
            accepted,
            scheduled,
            k,
            low_method,
            high_method,
            accepted_sq,
            cross,
            drafted_sq,
        ) in reader.rows(query)
    ]


def _label(key: Any) -> str:
    return CostLabel.none if key is None else str(key)


def _group_costs(
    reader: EntryReader, column: Any, usage: list[ColumnElement[bool]], *more: Any
) -> list[tuple[str, int]]:
    """The effective cost kept in one place of the requests matching ``usage`` and
    ``more``, per value of ``column``."""
    rows = reader.rows(
        select(column, func.sum(LedgerEntry.effective_cost_micros))
        .join(LedgerEntry, LedgerEntry.event_id == UsageRecord.event_id)
        .where(*usage, *more, LedgerEntry.run_id.in_(current_run_ids()))
        .group_by(column)
    )
    return [(_label(key), int(cost or 0)) for key, cost in rows]


def _add_cost(groups: dict[str, AcceptanceGroup], key: str, cost: int) -> None:
    if key in groups:
        groups[key] = replace(groups[key], cost_micros=groups[key].cost_micros + cost)


def _add_group(groups: dict[str, AcceptanceGroup], found: AcceptanceGroup) -> None:
    """Fold one part's group into the window's (same scope and key)."""
    known = groups.get(found.key)
    if known is None:
        groups[found.key] = found
        return
    groups[found.key] = replace(
        known,
        method=known.method if known.method == found.method else "mixed",
        k=max((k for k in (known.k, found.k) if k is not None), default=None),
        requests=known.requests + found.requests,
        num_drafts=known.num_drafts + found.num_drafts,
        draft_tokens=known.draft_tokens + found.draft_tokens,
        accepted_tokens=known.accepted_tokens + found.accepted_tokens,
        scheduled_tokens=known.scheduled_tokens + found.scheduled_tokens,
        cost_micros=known.cost_micros + found.cost_micros,
        accepted_sq=known.accepted_sq + found.accepted_sq,
        accepted_drafted=known.accepted_drafted + found.accepted_drafted,
        drafted_sq=known.drafted_sq + found.drafted_sq,
    )


def _above(
    reader: EntryReader, deployment: str, breakeven: float, usage: list[ColumnElement[bool]]
) -> BreakevenExposure:
    """One part's requests above breakeven, their cost left at zero (added per place)."""
    if reader.dialect == "sqlite":
        seconds = (
            func.julianday(UsageRecord.finished_at) - func.julianday(UsageRecord.arrived_at)
        ) * 86_400.0
    else:
        seconds = func.extract("epoch", UsageRecord.finished_at - UsageRecord.arrived_at)
    ((n, total_seconds, concurrency, low_method, high_method),) = reader.rows(
        select(
            func.count(),
            func.sum(seconds),
            func.sum(UsageRecord.concurrency),
            func.min(UsageRecord.spec_method),
            func.max(UsageRecord.spec_method),
        ).where(*usage, UsageRecord.deployment == deployment, UsageRecord.concurrency > breakeven)
    )
    n = int(n or 0)
    return BreakevenExposure(
        deployment=deployment,
        method=low_method if low_method == high_method else "mixed",
        requests=n,
        seconds=float(total_seconds or 0.0),
        mean_concurrency=float(concurrency or 0) / n if n else 0.0,
        cost_micros=0,
    )


def _add_exposure(known: BreakevenExposure | None, found: BreakevenExposure) -> BreakevenExposure:
    """Fold one part's exposure above breakeven into the window's."""
    if known is None or known.requests == 0:
        return found
    if found.requests == 0:
        return known
    requests = known.requests + found.requests
    return replace(
        known,
        method=known.method if known.method == found.method else "mixed",
        requests=requests,
        seconds=known.seconds + found.seconds,
        mean_concurrency=(
            known.mean_concurrency * known.requests + found.mean_concurrency * found.requests
        )
        / requests,
    )


def _idle_totals(reader: EntryReader, start: datetime, end: datetime) -> dict[str, tuple[int, int]]:
    """Per deployment: (idle, idle + requests) effective cost of charge periods starting
    in ``[start, end)``."""
    totals: dict[str, tuple[int, int]] = {}
    for deployment, kind, amount in reader.rows(
        select(
            LedgerEntry.deployment, LedgerEntry.kind, func.sum(LedgerEntry.effective_cost_micros)
        )
        .where(
            LedgerEntry.run_id.in_(current_run_ids()),
            LedgerEntry.charge_period_start >= start,
            LedgerEntry.charge_period_start < end,
            LedgerEntry.kind.in_((EntryKind.request, EntryKind.idle)),
            LedgerEntry.deployment.is_not(None),
        )
        .group_by(LedgerEntry.deployment, LedgerEntry.kind)
    ):
        idle, total = totals.get(str(deployment), (0, 0))
        amount = int(amount or 0)
        is_idle = str(kind) == EntryKind.idle
        totals[str(deployment)] = (idle + (amount if is_idle else 0), total + amount)
    return totals


def _shared_idle(
    session: Session, reader: EntryReader, start: datetime, end: datetime
) -> dict[str, int]:
    """Per deployment: the cost of the unused GPU capacity of compute pools that have no
    idle line because idle was shared to their requests (``--share-idle``), so the idle
    finding does not vanish with the sharing: each such pool's cost times its unused share
    of GPUs x charge period (the pool's replica's GPUs, found by its first row's
    ResourceId, else the deployment's)."""
    is_idle = LedgerEntry.kind == EntryKind.idle
    is_request = LedgerEntry.kind == EntryKind.request
    pools = [
        (str(deployment), int(pool), first, last, int(cost or 0), int(used or 0))
        for deployment, pool, first, last, cost, used, idle_entries in reader.rows(
            select(
                LedgerEntry.deployment,
                LedgerEntry.pool_id,
                LedgerEntry.charge_period_start,
                LedgerEntry.charge_period_end,
                func.sum(case((is_request, LedgerEntry.effective_cost_micros), else_=0)),
                func.sum(case((is_request, LedgerEntry.gpu_ns), else_=0)),
                func.sum(case((is_idle, 1), else_=0)),
            )
            .where(
                LedgerEntry.run_id.in_(current_run_ids()),
                LedgerEntry.charge_period_start >= start,
                LedgerEntry.charge_period_start < end,
                LedgerEntry.kind.in_((EntryKind.request, EntryKind.idle)),
                LedgerEntry.method.in_(COMPUTE_METHODS),
                LedgerEntry.deployment.is_not(None),
                LedgerEntry.pool_id.is_not(None),
            )
            .group_by(
                LedgerEntry.deployment,
                LedgerEntry.pool_id,
                LedgerEntry.charge_period_start,
                LedgerEntry.charge_period_end,
            )
        )
        if not idle_entries and first is not None and last is not None
    ]
    if not pools:
        return {}
    by_resource: dict[str, int] = {}
    by_deployment: dict[str, int] = {}
    for name, resource, gpus in session.execute(
        select(Deployment.name, Replica.resource_id, Replica.gpus).join(
            Deployment, Deployment.id == Replica.deployment_id
        )
    ):
        by_deployment[name] = by_deployment.get(name, 0) + int(gpus)
        if resource:
            by_resource[resource] = int(gpus)
    resources = dict(
        session.execute(
            select(BillingRow.id, BillingRow.resource_id).where(
                BillingRow.id.in_(sorted({pool for _, pool, *_ in pools}))
            )
        ).all()
    )
    shared: dict[str, int] = {}
    for deployment, pool, first, last, cost, used in pools:
        resource = resources.get(pool)
        gpus = by_resource.get(resource, 0) if resource else 0
        gpus = gpus or by_deployment.get(deployment, 0)
        seconds_ns = (utc_instant(last) - utc_instant(first)) // timedelta(microseconds=1) * 1000
        capacity = gpus * seconds_ns
        shared[deployment] = shared.get(deployment, 0) + unused_capacity_cost(
            cost, used_ns=used, capacity_ns=capacity
        )
    return shared


def idle_exposures(session: Session, totals: dict[str, tuple[int, int]]) -> list[IdleExposure]:
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
