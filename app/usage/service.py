"""Usage events in (idempotent on event_id), and sessions out: what each session did and cost.

A request's cost is the sum of its ledger entries in the current run of each month; a
session's is the sum over its requests that arrived in the window.
"""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from app.domain.sessions import union_length
from app.domain.usage import UsageEvent
from app.domain.windows import TimeWindow
from app.ledger.repository import current_run_ids, refuse_store_runs
from app.models import LedgerEntry, UsageRecord
from app.usage.repository import insert_usage


def ingest_events(session: Session, events: Sequence[UsageEvent]) -> int:
    """Store usage events in the request's transaction, skipping stored event ids.

    Returns:
        How many were new.
    """
    return insert_usage(session.connection(), events)


@dataclass(slots=True)
class SessionSummary:
    session_id: str
    team: str | None
    first_arrival: datetime
    last_finish: datetime
    requests: int = 0
    deployments: list[str] = field(default_factory=list)
    session_ns: int = 0
    gpu_ns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    effective_micros: int = 0
    billed_micros: int = 0


@dataclass(slots=True)
class SessionList:
    items: list[SessionSummary]
    total: int


def _usage_filter(window: TimeWindow | None, team: str | None) -> list[ColumnElement[bool]]:
    conditions: list[ColumnElement[bool]] = []
    if window is not None:
        conditions += [UsageRecord.arrived_at >= window.start, UsageRecord.arrived_at < window.end]
    if team is not None:
        conditions.append(UsageRecord.team == team)
    return conditions


def list_sessions(
    session: Session, *, window: TimeWindow, team: str | None, limit: int, offset: int
) -> SessionList:
    """Sessions with requests arriving in the window, by first arrival; ``team`` filters."""
    refuse_store_runs(session, "the session list", window=(window.start, window.end))
    conditions = _usage_filter(window, team)
    grouped = (
        select(
            UsageRecord.session_id,
            UsageRecord.team,
            func.min(UsageRecord.arrived_at),
            func.max(UsageRecord.finished_at),
            func.count(),
            func.sum(UsageRecord.gpu_ns),
            func.sum(UsageRecord.prompt_tokens),
            func.sum(UsageRecord.completion_tokens),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.accepted_tokens),
        )
        .where(*conditions)
        .group_by(UsageRecord.session_id, UsageRecord.team)
    )
    total = session.scalar(select(func.count()).select_from(grouped.subquery())) or 0
    page = session.execute(
        grouped.order_by(func.min(UsageRecord.arrived_at), UsageRecord.session_id, UsageRecord.team)
        .limit(limit)
        .offset(offset)
    ).all()
    summaries = {
        (sid, t): SessionSummary(
            session_id=sid,
            team=t,
            first_arrival=first,
            last_finish=last,
            requests=int(n),
            gpu_ns=int(gpu or 0),
            prompt_tokens=int(p or 0),
            completion_tokens=int(c or 0),
            draft_tokens=int(d or 0),
            accepted_tokens=int(a or 0),
        )
        for sid, t, first, last, n, gpu, p, c, d, a in page
    }
    _add_intervals_and_costs(session, summaries, conditions)
    return SessionList(list(summaries.values()), int(total))


def _add_intervals_and_costs(
    session: Session,
    summaries: dict[tuple[str, str | None], SessionSummary],
    conditions: list[ColumnElement[bool]],
) -> None:
    if not summaries:
        return
    ids = sorted({sid for sid, _ in summaries})
    scoped = [*conditions, UsageRecord.session_id.in_(ids)]
    intervals: dict[tuple[str, str | None], list[tuple[int, int]]] = defaultdict(list)
    deployments: dict[tuple[str, str | None], set[str]] = defaultdict(set)
    for sid, team, deployment, arrived, finished in session.execute(
        select(
            UsageRecord.session_id,
            UsageRecord.team,
            UsageRecord.deployment,
            UsageRecord.arrived_at,
            UsageRecord.finished_at,
        ).where(*scoped)
    ):
        intervals[(sid, team)].append((_ns(arrived), _ns(finished)))
        deployments[(sid, team)].add(deployment)
    for sid, team, eff, billed in session.execute(
        select(
            UsageRecord.session_id,
            UsageRecord.team,
            func.sum(LedgerEntry.effective_cost_micros),
            func.sum(LedgerEntry.billed_cost_micros),
        )
        .join(LedgerEntry, LedgerEntry.event_id == UsageRecord.event_id)
        .where(*scoped, LedgerEntry.run_id.in_(current_run_ids()))
        .group_by(UsageRecord.session_id, UsageRecord.team)
    ):
        if (sid, team) in summaries:
            summaries[(sid, team)].effective_micros = int(eff or 0)
            summaries[(sid, team)].billed_micros = int(billed or 0)
    for key, summary in summaries.items():
        summary.session_ns = union_length(intervals.get(key, []))
        summary.deployments = sorted(deployments.get(key, set()))


def _ns(instant: datetime) -> int:
    return int(instant.timestamp()) * 10**9 + instant.microsecond * 1000


@dataclass(slots=True)
class RequestCost:
    record: UsageRecord
    effective_micros: int
    billed_micros: int


@dataclass(slots=True)
class SessionRequests:
    summary: SessionSummary
    requests: list[RequestCost]
    total_requests: int


def get_session(
    session: Session, session_id: str, *, team: str | None, limit: int, offset: int
) -> SessionRequests | None:
    """One session's totals and requests (in arrival order), or None if it has no request
    visible to ``team``."""
    conditions = [*_usage_filter(None, team), UsageRecord.session_id == session_id]
    records = list(
        session.scalars(
            select(UsageRecord).where(*conditions).order_by(UsageRecord.arrived_at, UsageRecord.id)
        )
    )
    if not records:
        return None
    costs = {
        event: (int(eff or 0), int(billed or 0))
        for event, eff, billed in session.execute(
            select(
                LedgerEntry.event_id,
                func.sum(LedgerEntry.effective_cost_micros),
                func.sum(LedgerEntry.billed_cost_micros),
            )
            .join(UsageRecord, UsageRecord.event_id == LedgerEntry.event_id)
            .where(*conditions, LedgerEntry.run_id.in_(current_run_ids()))
            .group_by(LedgerEntry.event_id)
        )
    }
    teams = {r.team for r in records}
    summary = SessionSummary(
        session_id=session_id,
        team=records[0].team if len(teams) == 1 else None,
        first_arrival=min(r.arrived_at for r in records),
        last_finish=max(r.finished_at for r in records),
        requests=len(records),
        deployments=sorted({r.deployment for r in records}),
        session_ns=union_length((_ns(r.arrived_at), _ns(r.finished_at)) for r in records),
        gpu_ns=sum(r.gpu_ns for r in records),
        prompt_tokens=sum(r.prompt_tokens for r in records),
        completion_tokens=sum(r.completion_tokens for r in records),
        draft_tokens=sum(r.draft_tokens for r in records),
        accepted_tokens=sum(r.accepted_tokens for r in records),
        effective_micros=sum(c[0] for c in costs.values()),
        billed_micros=sum(c[1] for c in costs.values()),
    )
    page = records[offset : offset + limit]
    return SessionRequests(
        summary, [RequestCost(r, *costs.get(r.event_id, (0, 0))) for r in page], len(records)
    )
