"""Usage events in (idempotent on event_id), and sessions out: what each session did and cost.

A request's cost is the sum of its ledger entries in the current run of each month; a
session's is the sum over its requests that arrived in the window.
"""

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, func, select
from sqlalchemy.orm import Session

from app.domain.sessions import union_length
from app.domain.usage import UsageEvent
from app.domain.windows import TimeWindow
from app.models import LedgerEntry, UsageRecord
from app.storage.entry_reader import EntryReader, WindowPart, places, window_readers
from app.storage.run_repository import current_run_ids
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
    session: Session,
    *,
    window: TimeWindow,
    team: str | None,
    limit: int,
    offset: int,
    s3_endpoint_url: str | None = None,
) -> SessionList:
    """Sessions with requests arriving in the window, by first arrival; ``team`` filters.

    Each part of the window is read where its ledger is kept (the database, or the Parquet
    store of a month's run): one part is grouped and paged by its engine; a window over
    several parts merges their groups (one row per session, not per request)."""
    with window_readers(
        session, window.start, window.end, s3_endpoint_url=s3_endpoint_url
    ) as parts:
        conditions = [_usage_filter(TimeWindow(p.start, p.end), team) for p in parts]
        if len(parts) == 1:
            rows = parts[0].reader.rows(
                _by_session(conditions[0])
                .order_by(
                    func.min(UsageRecord.arrived_at), UsageRecord.session_id, UsageRecord.team
                )
                .limit(limit)
                .offset(offset)
            )
            total = parts[0].reader.rows(
                select(func.count()).select_from(_by_session(conditions[0]).subquery())
            )[0][0]
            summaries = {(row[0], row[1]): _summary(row) for row in rows}
        else:
            merged = _merged_sessions(parts, conditions)
            total = len(merged)
            ordered = sorted(merged.values(), key=_first_arrival_order)
            summaries = {(s.session_id, s.team): s for s in ordered[offset : offset + limit]}
        intervals: dict[tuple[str, str | None], list[tuple[int, int]]] = defaultdict(list)
        for part, part_conditions in zip(parts, conditions, strict=True):
            _add_intervals(part.reader, summaries, part_conditions, intervals)
        for reader in places(parts):
            _add_costs(reader, summaries, _usage_filter(window, team))
    for key, summary in summaries.items():
        summary.session_ns = union_length(intervals[key])
    return SessionList(list(summaries.values()), int(total or 0))


def _by_session(conditions: list[ColumnElement[bool]]) -> Select[*tuple[Any, ...]]:
    return (
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


def _summary(row: Sequence[Any]) -> SessionSummary:
    sid, team, first, last, n, gpu, prompt, completion, drafted, accepted = row
    return SessionSummary(
        session_id=sid,
        team=team,
        first_arrival=first.astimezone(UTC),
        last_finish=last.astimezone(UTC),
        requests=int(n),
        gpu_ns=int(gpu or 0),
        prompt_tokens=int(prompt or 0),
        completion_tokens=int(completion or 0),
        draft_tokens=int(drafted or 0),
        accepted_tokens=int(accepted or 0),
    )


def _merged_sessions(
    parts: Sequence[WindowPart], conditions: Sequence[list[ColumnElement[bool]]]
) -> dict[tuple[str, str | None], SessionSummary]:
    merged: dict[tuple[str, str | None], SessionSummary] = {}
    for part, part_conditions in zip(parts, conditions, strict=True):
        for row in part.reader.rows(_by_session(part_conditions)):
            found = _summary(row)
            key = (found.session_id, found.team)
            known = merged.setdefault(key, found)
            if known is not found:
                known.first_arrival = min(known.first_arrival, found.first_arrival)
                known.last_finish = max(known.last_finish, found.last_finish)
                for name in _SUMMED:
                    setattr(known, name, getattr(known, name) + getattr(found, name))
    return merged


_SUMMED = (
    "requests",
    "gpu_ns",
    "prompt_tokens",
    "completion_tokens",
    "draft_tokens",
    "accepted_tokens",
)


def _first_arrival_order(summary: SessionSummary) -> tuple[datetime, str, bool, str]:
    """The SQL order: first arrival, session id, team (no team last, as PostgreSQL and
    DuckDB sort nulls)."""
    return (
        summary.first_arrival,
        summary.session_id,
        summary.team is None,
        summary.team or "",
    )


def _add_intervals(
    reader: EntryReader,
    summaries: dict[tuple[str, str | None], SessionSummary],
    conditions: list[ColumnElement[bool]],
    intervals: dict[tuple[str, str | None], list[tuple[int, int]]],
) -> None:
    """Add one part's request intervals and deployments to the sessions."""
    if not summaries:
        return
    ids = sorted({sid for sid, _ in summaries})
    for sid, team, deployment, arrived, finished in reader.rows(
        select(
            UsageRecord.session_id,
            UsageRecord.team,
            UsageRecord.deployment,
            UsageRecord.arrived_at,
            UsageRecord.finished_at,
        ).where(*conditions, UsageRecord.session_id.in_(ids))
    ):
        found = summaries.get((sid, team))
        if found is not None:
            intervals[(sid, team)].append((_ns(arrived), _ns(finished)))
            if deployment not in found.deployments:
                found.deployments = sorted([*found.deployments, deployment])


def _add_costs(
    reader: EntryReader,
    summaries: dict[tuple[str, str | None], SessionSummary],
    conditions: list[ColumnElement[bool]],
) -> None:
    """Add the cost of the sessions' requests (arriving in the window) kept in one place."""
    if not summaries:
        return
    ids = sorted({sid for sid, _ in summaries})
    for sid, team, eff, billed in reader.rows(
        select(
            UsageRecord.session_id,
            UsageRecord.team,
            func.sum(LedgerEntry.effective_cost_micros),
            func.sum(LedgerEntry.billed_cost_micros),
        )
        .join(LedgerEntry, LedgerEntry.event_id == UsageRecord.event_id)
        .where(
            *conditions,
            UsageRecord.session_id.in_(ids),
            LedgerEntry.run_id.in_(current_run_ids()),
        )
        .group_by(UsageRecord.session_id, UsageRecord.team)
    ):
        found = summaries.get((sid, team))
        if found is not None:
            found.effective_micros += int(eff or 0)
            found.billed_micros += int(billed or 0)


def _ns(instant: datetime) -> int:
    return int(instant.timestamp()) * 10**9 + instant.microsecond * 1000


@dataclass(frozen=True, slots=True)
class RequestUsage:
    """What a session's page shows of one request, wherever its record is kept."""

    event_id: str
    team: str | None
    deployment: str
    replica: str
    model: str
    spec_method: str
    spec_k: int | None
    arrived_at: datetime
    finished_at: datetime
    prompt_tokens: int
    completion_tokens: int
    draft_tokens: int
    accepted_tokens: int
    gpu_ns: int
    concurrency: int
    status: str


_REQUEST_COLUMNS = [getattr(UsageRecord, name) for name in RequestUsage.__dataclass_fields__]


@dataclass(slots=True)
class RequestCost:
    record: RequestUsage
    effective_micros: int
    billed_micros: int


@dataclass(slots=True)
class SessionRequests:
    summary: SessionSummary
    requests: list[RequestCost]
    total_requests: int


_ALL_TIME = TimeWindow(datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC))


def get_session(
    session: Session,
    session_id: str,
    *,
    team: str | None,
    limit: int,
    offset: int,
    s3_endpoint_url: str | None = None,
) -> SessionRequests | None:
    """One session's totals and requests (in arrival order), or None if it has no request
    visible to ``team``. Requests and costs are read where the ledger keeps them."""
    conditions = [*_usage_filter(None, team), UsageRecord.session_id == session_id]
    records: list[RequestUsage] = []
    costs: dict[str, tuple[int, int]] = {}
    with window_readers(
        session, _ALL_TIME.start, _ALL_TIME.end, s3_endpoint_url=s3_endpoint_url
    ) as parts:
        for part in parts:
            in_part = _usage_filter(TimeWindow(part.start, part.end), None)
            query = select(*_REQUEST_COLUMNS).where(*conditions, *in_part)
            for row in part.reader.mappings(
                query.order_by(UsageRecord.arrived_at, UsageRecord.event_id)
            ):
                row["arrived_at"] = row["arrived_at"].astimezone(UTC)
                row["finished_at"] = row["finished_at"].astimezone(UTC)
                records.append(RequestUsage(**row))
        if not records:
            return None
        for reader in places(parts):
            for event, eff, billed in reader.rows(
                select(
                    LedgerEntry.event_id,
                    func.sum(LedgerEntry.effective_cost_micros),
                    func.sum(LedgerEntry.billed_cost_micros),
                )
                .join(UsageRecord, UsageRecord.event_id == LedgerEntry.event_id)
                .where(*conditions, LedgerEntry.run_id.in_(current_run_ids()))
                .group_by(LedgerEntry.event_id)
            ):
                known = costs.get(event, (0, 0))
                costs[event] = (known[0] + int(eff or 0), known[1] + int(billed or 0))
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
