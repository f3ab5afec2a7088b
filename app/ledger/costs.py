"""Unit costs per session, team, deployment, model, speculation method or tag, over a month.

Costs come from the month's ledger; tokens, GPU-seconds and session-seconds from the usage
records of the requests that arrived in the month. Lines for idle and unallocated cost are
included so that the lines add up to the bill.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.errors import Invalid
from app.domain.ledger import TAG_PREFIX, CostLabel, Dimension, EntryKind
from app.domain.money import format_micros
from app.domain.periods import Month
from app.domain.sessions import session_totals_arrays
from app.kit.epoch import to_ns
from app.ledger.repository import current_run_id
from app.models import LedgerEntry, UsageRecord


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

    def to_json(self, by: Sequence[str]) -> dict[str, Any]:
        def per(amount: int, units: float, scale: float) -> str | None:
            return format_micros(round(amount * scale / units)) if units else None

        total_tokens = self.prompt_tokens + self.completion_tokens
        return {
            **dict(zip(by, self.key, strict=True)),
            "requests": self.requests,
            "effective_cost": format_micros(self.effective_micros),
            "billed_cost": format_micros(self.billed_micros),
            "gpu_seconds": round(self.gpu_ns / 1e9, 3),
            "session_seconds": round(self.session_ns / 1e9, 3),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted_tokens,
            "acceptance_rate": round(self.accepted_tokens / self.draft_tokens, 4)
            if self.draft_tokens
            else None,
            "mean_acceptance_length": round(
                (self.accepted_tokens + self.num_drafts) / self.num_drafts, 3
            )
            if self.num_drafts
            else None,
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
) -> list[CostLine]:
    """Cost lines of a month grouped by ``by`` (dimensions or ``tag:KEY``); ``team`` filters to
    one team. Requests count in the month they arrived in."""
    for dimension in by:
        if dimension not in tuple(Dimension) and not dimension.startswith(TAG_PREFIX):
            raise Invalid(
                f"cannot group by {dimension!r}; use one of {', '.join(Dimension)} or tag:KEY"
            )
    run_id = current_run_id(session, str(month))
    usage = _usage(session, month.start, month.end, team)
    cost_by_event = _cost_by_event(session, run_id)
    other = _other_entries(session, run_id, team)
    lines: dict[tuple[str, ...], CostLine] = {}
    _add_usage(lines, usage, cost_by_event, by)
    for kind, deployment, entry_team, eff, billed in other:
        key = tuple(_other_key(dimension, kind, deployment, entry_team) for dimension in by)
        line = lines.setdefault(key, CostLine(key))
        line.effective_micros += eff
        line.billed_micros += billed
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


def _usage(session: Session, start: datetime, end: datetime, team: str | None) -> list[Any]:
    query = select(UsageRecord).where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
    if team is not None:
        query = query.where(UsageRecord.team == team)
    return list(session.scalars(query.order_by(UsageRecord.id)))


def _cost_by_event(session: Session, run_id: int | None) -> dict[str, tuple[int, int]]:
    if run_id is None:
        return {}
    return {
        str(event): (int(eff), int(billed))
        for event, eff, billed in session.execute(
            select(
                LedgerEntry.event_id,
                func.sum(LedgerEntry.effective_cost_micros),
                func.sum(LedgerEntry.billed_cost_micros),
            )
            .where(LedgerEntry.run_id == run_id, LedgerEntry.event_id.is_not(None))
            .group_by(LedgerEntry.event_id)
        )
    }


def _other_entries(
    session: Session, run_id: int | None, team: str | None
) -> list[tuple[EntryKind, str | None, str | None, int, int]]:
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
    return [(k, d, t, int(e), int(b)) for k, d, t, e, b in session.execute(query)]


def _key_of(record: UsageRecord, dimension: str) -> str:
    if dimension.startswith(TAG_PREFIX):
        value = (record.tags or {}).get(dimension.removeprefix(TAG_PREFIX))
        return CostLabel.untagged if value is None else str(value)
    value = {
        Dimension.team: record.team,
        Dimension.session: record.session_id,
        Dimension.deployment: record.deployment,
        Dimension.model: record.model,
        Dimension.method: record.spec_method,
        Dimension.cost_center: record.cost_center,
    }[Dimension(dimension)]
    return CostLabel.none if value is None else str(value)


def _add_usage(
    lines: dict[tuple[str, ...], CostLine],
    usage: list[UsageRecord],
    cost_by_event: dict[str, tuple[int, int]],
    by: Sequence[str],
) -> None:
    if not usage:
        return
    keys = [tuple(_key_of(r, d) for d in by) for r in usage]
    sessions = [r.session_id for r in usage]
    arrived = to_ns([r.arrived_at for r in usage])
    finished = to_ns([r.finished_at for r in usage])
    # Session-seconds: the union of each session's request intervals, within each line.
    pair_ids: dict[tuple[tuple[str, ...], str], int] = {}
    pair_index = np.array(
        [pair_ids.setdefault((k, s), len(pair_ids)) for k, s in zip(keys, sessions, strict=True)],
        np.int64,
    )
    union_ns = session_totals_arrays(pair_index, arrived, finished, n_sessions=len(pair_ids))
    for (key, _), index in pair_ids.items():
        lines.setdefault(key, CostLine(key)).session_ns += int(union_ns[index])
    for key, record in zip(keys, usage, strict=True):
        line = lines.setdefault(key, CostLine(key))
        eff, billed = cost_by_event.get(record.event_id, (0, 0))
        line.requests += 1
        line.effective_micros += eff
        line.billed_micros += billed
        line.gpu_ns += record.gpu_ns
        line.prompt_tokens += record.prompt_tokens
        line.cached_tokens += record.cached_tokens
        line.completion_tokens += record.completion_tokens
        line.num_drafts += record.num_drafts
        line.draft_tokens += record.draft_tokens
        line.accepted_tokens += record.accepted_tokens
