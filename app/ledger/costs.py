"""Unit costs per session, team, deployment, model, speculation method or tag, over a month.

Costs come from the month's ledger; tokens, GPU-seconds and session-seconds from the usage
records of the requests that arrived in the month. Lines for idle and unallocated cost are
included so that the lines add up to the bill.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Select, case, func, select
from sqlalchemy.orm import Session

from app.db import epoch_us
from app.domain import measures
from app.domain.errors import Invalid
from app.domain.ledger import TAG_PREFIX, CostLabel, Dimension, EntryKind
from app.domain.money import exact_picos, format_micros, format_picos
from app.domain.periods import Month
from app.models import LedgerEntry, UsageRecord
from app.storage.entry_reader import EntryReader, entry_reader
from app.storage.run_repository import current_run_id


@dataclass
class CostLine:
    key: tuple[str, ...]
    requests: int = 0
    effective_micros: int = 0
    billed_micros: int = 0
    gpu_ns: int = 0
    session_ns: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    num_drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    idle_micros: int = 0
    effective_residual_picos: int = 0
    """What the line's exact EffectiveCost is beyond ``effective_micros`` (``app.domain.money``)."""
    billed_residual_picos: int = 0

    @property
    def effective_picos(self) -> int:
        """The line's EffectiveCost, exact."""
        return exact_picos(self.effective_micros, self.effective_residual_picos)

    @property
    def billed_picos(self) -> int:
        """The line's BilledCost, exact."""
        return exact_picos(self.billed_micros, self.billed_residual_picos)

    def to_json(self, by: Sequence[str]) -> dict[str, Any]:
        def per(amount: int, units: float, scale: float) -> str | None:
            cost = measures.unit_cost_micros(amount, units, scale)
            return None if cost is None else format_micros(cost)

        total_tokens = measures.total_tokens(self.prompt_tokens, self.completion_tokens)
        return {
            **dict(zip(by, self.key, strict=True)),
            "requests": self.requests,
            "effective_cost": format_micros(self.effective_micros),
            "billed_cost": format_micros(self.billed_micros),
            "effective_cost_exact": format_picos(self.effective_picos),
            "billed_cost_exact": format_picos(self.billed_picos),
            "gpu_seconds": measures.seconds(self.gpu_ns),
            "session_seconds": measures.seconds(self.session_ns),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": measures.acceptance_rate(self.accepted_tokens, self.draft_tokens),
            "mean_acceptance_length": measures.mean_acceptance_length(
                self.accepted_tokens, self.num_drafts
            ),
            "cost_per_1k_session_seconds": per(self.effective_micros, self.session_ns / 1e9, 1e3),
            "cost_per_1m_output_tokens": per(self.effective_micros, self.completion_tokens, 1e6),
            "cost_per_1m_tokens": per(self.effective_micros, total_tokens, 1e6),
            "cost_per_gpu_hour": per(self.effective_micros, self.gpu_ns / 3.6e12, 1),
            "idle_share": round(self.idle_micros / (self.effective_micros or 1), 4)
            if self.idle_micros
            else 0.0,
        }


def unit_costs(
    session: Session,
    *,
    month: Month,
    by: Sequence[str],
    team: str | None = None,
    s3_endpoint_url: str | None = None,
) -> list[CostLine]:
    """Cost lines of a month grouped by ``by`` (dimensions or ``tag:KEY``); ``team`` filters to
    one team. Requests count in the month they arrived in.

    The database does the grouping (one query for the requests' lines, one for the other
    entries), or DuckDB over the Parquet store when the month's run is kept there: what
    comes back is one row per line, never one per request or entry."""
    for dimension in by:
        if dimension not in tuple(Dimension) and not dimension.startswith(TAG_PREFIX):
            raise Invalid(
                f"cannot group by {dimension!r}; use one of {', '.join(Dimension)} or tag:KEY"
            )
    run_id = current_run_id(session, month)
    lines: dict[tuple[str, ...], CostLine] = {}
    with entry_reader(session, run_id, s3_endpoint_url=s3_endpoint_url) as reader:
        for row in reader.mappings(_request_lines(run_id, month, by, team)):
            key = tuple(str(row[f"key_{i}"]) for i in range(len(by)))
            lines[key] = CostLine(key, **{name: int(row[name] or 0) for name in _LINE_SUMS})
        others = _other_entries(reader, run_id, team)
    for kind, deployment, entry_team, eff, billed, eff_rest, billed_rest in others:
        key = tuple(_other_key(dimension, kind, deployment, entry_team) for dimension in by)
        line = lines.setdefault(key, CostLine(key))
        line.effective_micros += eff
        line.billed_micros += billed
        line.effective_residual_picos += eff_rest
        line.billed_residual_picos += billed_rest
        if kind is EntryKind.idle:
            line.idle_micros += eff
    return sorted(lines.values(), key=lambda line: line.key)


def _other_key(dimension: str, kind: EntryKind, deployment: str | None, team: str | None) -> str:
    if kind is EntryKind.idle:
        return deployment or CostLabel.idle if dimension == Dimension.deployment else CostLabel.idle
    if kind is EntryKind.unallocated:
        return CostLabel.unallocated
    if dimension == Dimension.team:
        return team or CostLabel.shared
    if dimension == Dimension.deployment:
        return deployment or CostLabel.shared
    return CostLabel.shared


def _other_entries(
    reader: EntryReader, run_id: int | None, team: str | None
) -> list[tuple[EntryKind, str | None, str | None, int, int, int, int]]:
    """Entries not tied to a request: idle, shared (team-level) and unallocated."""
    if run_id is None:
        return []
    query = (
        select(
            LedgerEntry.kind,
            LedgerEntry.deployment,
            LedgerEntry.team,
            func.sum(LedgerEntry.effective_cost_micros),
            func.sum(LedgerEntry.billed_cost_micros),
            func.sum(LedgerEntry.effective_cost_residual_picos),
            func.sum(LedgerEntry.billed_cost_residual_picos),
        )
        .where(
            LedgerEntry.run_id == run_id,
            LedgerEntry.event_id.is_(None),
            LedgerEntry.kind != EntryKind.adjustment,
        )
        .group_by(LedgerEntry.kind, LedgerEntry.deployment, LedgerEntry.team)
    )
    if team is not None:  # a team sees only its own shared costs
        query = query.where(LedgerEntry.team == team)
    rows = []
    for kind, deployment, entry_team, *amounts in reader.rows(query):
        eff, billed, eff_rest, billed_rest = (int(v or 0) for v in amounts)
        rows.append((EntryKind(kind), deployment, entry_team, eff, billed, eff_rest, billed_rest))
    return rows


def _key_column(dimension: str) -> ColumnElement[Any]:
    """The value a request has on a dimension, with the label of a missing one."""
    if dimension.startswith(TAG_PREFIX):
        tag = UsageRecord.tags[dimension.removeprefix(TAG_PREFIX)].as_string()
        return func.coalesce(tag, CostLabel.untagged.value)
    column = {
        Dimension.team: UsageRecord.team,
        Dimension.session: UsageRecord.session_id,
        Dimension.deployment: UsageRecord.deployment,
        Dimension.model: UsageRecord.model,
        Dimension.method: UsageRecord.spec_method,
        Dimension.cost_center: UsageRecord.cost_center,
    }[Dimension(dimension)]
    return func.coalesce(column, CostLabel.none.value)


def _request_lines(
    run_id: int | None, month: Month, by: Sequence[str], team: str | None
) -> Select[Any]:
    """One row per line of the month's requests: its key (``key_<i>``) and the CostLine
    fields of :data:`_LINE_SUMS`.

    Session-seconds are the union of each session's request intervals within the line: over
    a (line, session)'s requests ordered by arrival, each adds the part of its interval past
    the latest finish before it."""
    per_event = select(
        LedgerEntry.event_id,
        func.sum(LedgerEntry.effective_cost_micros).label("effective"),
        func.sum(LedgerEntry.billed_cost_micros).label("billed"),
        func.sum(LedgerEntry.effective_cost_residual_picos).label("effective_rest"),
        func.sum(LedgerEntry.billed_cost_residual_picos).label("billed_rest"),
    ).where(LedgerEntry.run_id == (run_id or 0), LedgerEntry.event_id.is_not(None))
    if team is not None:
        # Only the team's requests' entries, found from its requests by event_id: not the
        # whole run's entries summed per request and most of them thrown away.
        mine = UsageRecord.__table__.alias("mine")
        per_event = per_event.join(mine, mine.c.event_id == LedgerEntry.event_id).where(
            mine.c.team == team, mine.c.arrived_at >= month.start, mine.c.arrived_at < month.end
        )
    cost = per_event.group_by(LedgerEntry.event_id).subquery()
    usage = (
        select(
            *(_key_column(d).label(f"key_{i}") for i, d in enumerate(by)),
            UsageRecord.session_id.label("session"),
            epoch_us(UsageRecord.arrived_at).label("arrived"),
            epoch_us(UsageRecord.finished_at).label("finished"),
            func.coalesce(cost.c.effective, 0).label("effective"),
            func.coalesce(cost.c.billed, 0).label("billed"),
            func.coalesce(cost.c.effective_rest, 0).label("effective_rest"),
            func.coalesce(cost.c.billed_rest, 0).label("billed_rest"),
            *(getattr(UsageRecord, name) for name in _USAGE_SUMS),
        )
        .outerjoin(cost, cost.c.event_id == UsageRecord.event_id)
        .where(UsageRecord.arrived_at >= month.start, UsageRecord.arrived_at < month.end)
    )
    if team is not None:
        usage = usage.where(UsageRecord.team == team)
    u = usage.subquery()
    keys = [u.c[f"key_{i}"] for i in range(len(by))]
    reach = func.max(u.c.finished).over(
        partition_by=[*keys, u.c.session], order_by=[u.c.arrived, u.c.finished], rows=(None, -1)
    )
    w = select(u, reach.label("reach")).subquery()
    start = case((w.c.reach > w.c.arrived, w.c.reach), else_=w.c.arrived)
    covered = case((w.c.finished > start, w.c.finished - start), else_=0)
    wkeys = [w.c[f"key_{i}"] for i in range(len(by))]
    return select(
        *wkeys,
        func.count().label("requests"),
        func.sum(w.c.effective).label("effective_micros"),
        func.sum(w.c.billed).label("billed_micros"),
        func.sum(w.c.effective_rest).label("effective_residual_picos"),
        func.sum(w.c.billed_rest).label("billed_residual_picos"),
        (func.sum(covered) * 1000).label("session_ns"),
        *(func.sum(w.c[name]).label(name) for name in _USAGE_SUMS),
    ).group_by(*wkeys)


_USAGE_SUMS = (
    "gpu_ns",
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "num_drafts",
    "draft_tokens",
    "accepted_tokens",
)
"""Usage columns summed per line, as named on UsageRecord and CostLine."""
_LINE_SUMS = (
    "requests",
    "effective_micros",
    "billed_micros",
    "effective_residual_picos",
    "billed_residual_picos",
    "session_ns",
    *_USAGE_SUMS,
)
