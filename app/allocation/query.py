"""Allocation queries over the ledger, OpenCost style: a window, an aggregate, a step.

The ledger of record is the current run of each month. Its entries are read by charge
period (adjustments to a closed month carry that month's start), grouped in SQL by charge
hour and the aggregate's dimensions, and cut into steps here. ``idle=share`` hands each
pool's idle remainder (a pool is the billing rows split together) to its request groups in proportion to their
GPU-seconds (largest remainder, so the total is unchanged); rows that had no request keep
their idle line. A team's view is computed after sharing, so it gets exactly its share.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from app.domain.allocation import split_by_weight
from app.domain.ledger import TAG_PREFIX, CostLabel, Dimension, EntryKind
from app.domain.windows import Step, TimeWindow, bucket_bounds
from app.kit.measures import sum_gpu_ns
from app.models import LedgerEntry, LedgerRollup, UsageRecord
from app.storage.entry_reader import EntryReader, entry_reader
from app.storage.run_repository import current_run_ids

_ENTRY_COLUMNS: dict[str, Any] = {
    Dimension.team: LedgerEntry.team,
    Dimension.session: LedgerEntry.session_id,
    Dimension.deployment: LedgerEntry.deployment,
}
_USAGE_COLUMNS: dict[str, Any] = {
    Dimension.model: UsageRecord.model,
    Dimension.method: UsageRecord.spec_method,
    Dimension.cost_center: UsageRecord.cost_center,
}


class CostMetric(StrEnum):
    effective = "effective"
    """FOCUS EffectiveCost: amortised, for unit cost."""
    billed = "billed"
    """FOCUS BilledCost: cash, for invoice reconciliation."""


class IdlePolicy(StrEnum):
    separate = "separate"
    share = "share"


@dataclass(frozen=True, slots=True, kw_only=True)
class AllocationQuery:
    window: TimeWindow
    aggregate: tuple[str, ...]
    step: Step | None
    """None: one bucket for the whole window."""
    cost_metric: CostMetric = CostMetric.effective
    idle: IdlePolicy = IdlePolicy.separate
    team: str | None = None
    """Only this team's rows (and its share of idle)."""


@dataclass(slots=True)
class AllocationLine:
    start: datetime
    end: datetime
    properties: dict[str, str]
    currency: str
    cost_micros: int = 0
    idle_micros: int = 0
    """Idle cost inside ``cost_micros``: the shared-in idle, or all of it on an idle line."""
    gpu_ns: int = 0


@dataclass(slots=True)
class AllocationResult:
    lines: list[AllocationLine]
    totals: dict[str, int] = field(default_factory=dict)
    """currency -> cost micros over every line."""


# (charge start, kind, currency, deployment, billing row, *dimension values)
_GroupKey = tuple[Any, ...]


def query_allocation(
    session: Session, query: AllocationQuery, *, s3_endpoint_url: str | None = None
) -> AllocationResult:
    """Allocated cost per aggregate and step over the window (see the module docstring).

    Each month run with entries charged in the window is read where it keeps them (the
    database or a Parquet store) and the groups are summed across runs."""
    cost = (
        LedgerEntry.effective_cost_micros
        if query.cost_metric is CostMetric.effective
        else LedgerEntry.billed_cost_micros
    )
    rollup_cost = (
        LedgerRollup.effective_cost_micros
        if query.cost_metric is CostMetric.effective
        else LedgerRollup.billed_cost_micros
    )
    share = query.idle is IdlePolicy.share
    groups: dict[_GroupKey, tuple[int, int, int]] = {}
    idle_by_row: dict[int, int] = {}
    basis_by_row: dict[int, int] = {}
    for run_id in _runs_charged_in(session, query.window):
        with entry_reader(session, run_id, s3_endpoint_url=s3_endpoint_url) as reader:
            for key, (amount, _, gpu_ns) in _groups(reader, query, cost, run_id, share).items():
                old = groups.get(key, (0, 0, 0))
                groups[key] = (old[0] + amount, 0, old[2] + gpu_ns)
        if share:
            idle_by_row.update(_by_pool(session, query, run_id, EntryKind.idle, rollup_cost))
            basis_by_row.update(
                _by_pool(session, query, run_id, EntryKind.request, LedgerRollup.gpu_ns)
            )
    if share and idle_by_row:
        groups = _share_idle(groups, idle_by_row, basis_by_row)
    lines: dict[tuple[Any, ...], AllocationLine] = {}
    for key, (amount, idle, gpu_ns) in groups.items():
        charge_start, kind, currency, deployment, _row, *values = key
        properties = {
            dim: _label(dim, kind, deployment, value)
            for dim, value in zip(query.aggregate, values, strict=True)
        }
        start, end = (
            (query.window.start, query.window.end)
            if query.step is None
            else bucket_bounds(charge_start, query.step, query.window)
        )
        line_key = (start, tuple(properties.values()), currency)
        line = lines.get(line_key)
        if line is None:
            line = lines[line_key] = AllocationLine(start, end, properties, currency)
        line.cost_micros += amount
        line.idle_micros += idle if kind != EntryKind.idle else amount
        line.gpu_ns += gpu_ns
    ordered = sorted(
        lines.values(),
        key=lambda line: (line.start, tuple(line.properties.values()), line.currency),
    )
    totals: dict[str, int] = defaultdict(int)
    for line in ordered:
        totals[line.currency] += line.cost_micros
    return AllocationResult(ordered, dict(totals))


def _runs_charged_in(session: Session, window: TimeWindow) -> list[int]:
    """The current month runs with entries charged in the window (from their rollups)."""
    return list(
        session.scalars(
            select(LedgerRollup.run_id)
            .where(
                LedgerRollup.run_id.in_(current_run_ids()),
                LedgerRollup.charge_period_start >= window.start,
                LedgerRollup.charge_period_start < window.end,
            )
            .distinct()
            .order_by(LedgerRollup.run_id)
        )
    )


def _in_window(query: AllocationQuery, run_id: int) -> list[ColumnElement[bool]]:
    return [
        LedgerEntry.run_id == run_id,
        LedgerEntry.charge_period_start >= query.window.start,
        LedgerEntry.charge_period_start < query.window.end,
    ]


def _dimension(dimension: str) -> Any:
    """The SQL expression of a dimension (a column, or a tag's value as text)."""
    column = _ENTRY_COLUMNS.get(dimension, _USAGE_COLUMNS.get(dimension))
    if column is not None:
        return column
    return UsageRecord.tags[dimension.removeprefix(TAG_PREFIX)].as_string()


def _groups(
    reader: EntryReader, query: AllocationQuery, cost: Any, run_id: int, by_row: bool
) -> dict[_GroupKey, tuple[int, int, int]]:
    """Cost and GPU-ns per charge hour, kind, currency, deployment, (row) and dimensions;
    GPU-ns of compute pools only (:func:`app.kit.measures.counted_gpu_ns`)."""
    dimensions = [_dimension(d) for d in query.aggregate]
    # Without a step every line spans the window: grouping by charge hour too would only
    # return a row per hour and group for Python to add up.
    by_hour = query.step is not None
    columns: list[Any] = [
        LedgerEntry.charge_period_start if by_hour else None,
        LedgerEntry.kind,
        LedgerEntry.currency,
        LedgerEntry.deployment,
        LedgerEntry.pool_id if by_row else None,
        *dimensions,
    ]
    grouped = [c for c in columns if c is not None]
    statement = select(*grouped, func.sum(cost), sum_gpu_ns(LedgerEntry)).where(
        *_in_window(query, run_id)
    )
    if any(d in _USAGE_COLUMNS or d.startswith(TAG_PREFIX) for d in query.aggregate):
        statement = statement.outerjoin(UsageRecord, UsageRecord.event_id == LedgerEntry.event_id)
    if query.team is not None:
        statement = statement.where(LedgerEntry.team == query.team)
    result: dict[_GroupKey, tuple[int, int, int]] = {}
    for row in reader.rows(statement.group_by(*grouped)):
        values = list(row)
        amount, gpu_ns = int(values[-2] or 0), int(values[-1] or 0)
        head = values[:-2]
        if not by_hour:
            head.insert(0, None)
        head[1] = EntryKind(head[1])
        if not by_row:
            head.insert(4, None)
        key = tuple(head)
        old = result.get(key, (0, 0, 0))
        result[key] = (old[0] + amount, 0, old[2] + gpu_ns)
    return result


def _by_pool(
    session: Session, query: AllocationQuery, run_id: int, kind: EntryKind, amount: Any
) -> dict[int, int]:
    """A sum over the run's entries of one kind in the window, per pool: from the run's
    rollups (in the database wherever the entries are), so a team's view does not read
    every team's entries for the pools' totals."""
    return {
        int(pool_id or 0): int(total)
        for pool_id, total in session.execute(
            select(LedgerRollup.pool_id, func.sum(amount))
            .where(
                LedgerRollup.run_id == run_id,
                LedgerRollup.charge_period_start >= query.window.start,
                LedgerRollup.charge_period_start < query.window.end,
                LedgerRollup.kind == kind,
                LedgerRollup.pool_id.is_not(None),
            )
            .group_by(LedgerRollup.pool_id)
        )
    }


def _share_idle(
    groups: dict[_GroupKey, tuple[int, int, int]],
    idle_by_row: dict[int, int],
    basis_by_row: dict[int, int],
) -> dict[_GroupKey, tuple[int, int, int]]:
    """Move each pool's idle cost onto the pool's request groups, by GPU-ns."""
    shared_rows = {row for row, basis in basis_by_row.items() if basis > 0 and row in idle_by_row}
    out = {
        key: value
        for key, value in groups.items()
        if not (key[1] == EntryKind.idle and key[4] in shared_rows)
    }
    members: dict[int, list[_GroupKey]] = defaultdict(list)
    for key in out:
        if key[1] == EntryKind.request and key[4] in shared_rows:
            members[key[4]].append(key)
    for row in shared_rows:
        weights: dict[tuple[str, ...], int] = {}
        by_label: dict[tuple[str, ...], _GroupKey] = {}
        for key in members.get(row, []):
            label = tuple(str(part) for part in key)
            weights[label] = out[key][2]
            by_label[label] = key
        others = basis_by_row[row] - sum(weights.values())
        if others > 0:  # requests of other teams, not in this view
            weights[("\uffff",)] = others
        if not any(weights.values()):
            continue
        for label, part in split_by_weight(idle_by_row[row], weights).items():
            if label in by_label:  # not the others' placeholder
                amount, idle, gpu_ns = out[by_label[label]]
                out[by_label[label]] = (amount + part, idle + part, gpu_ns)
    return out


def _label(dimension: str, kind: EntryKind, deployment: str | None, value: Any) -> str:
    """The name a line gets on one dimension: its value, or what kind of cost it is."""
    if kind is EntryKind.request:
        if value is None:
            return CostLabel.untagged if dimension.startswith(TAG_PREFIX) else CostLabel.none
        return str(value)
    if kind is EntryKind.idle:
        return (
            (deployment or CostLabel.idle) if dimension == Dimension.deployment else CostLabel.idle
        )
    if kind is EntryKind.unallocated:
        return CostLabel.unallocated
    # shared or adjustment: named by the entry's own team, deployment or session, if any
    if dimension in _ENTRY_COLUMNS and value is not None:
        return str(value)
    return CostLabel.of(kind)
