"""The dashboards' only database access: SQLAlchemy selects read into pandas DataFrames.

Every function takes an optional ``team``: with it, the frames hold that team's rows only (its
requests, its share of shared costs), never another team's name or money. Idle and unallocated
cost belong to no team, so a team's frames have none. Times are aware UTC; money is integer
micros. The frames' columns are the ones :mod:`dashboards.figures` documents.
"""

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import DateTime, Engine, String, func, select
from sqlalchemy.sql.elements import ColumnElement

from app.db import read_session
from app.domain.ledger import CostLabel, EntryKind
from app.domain.periods import Month
from app.kit.epoch import to_ns
from app.ledger.reconcile import reconcile
from app.ledger.repository import allocated_months, current_run_id
from app.models import LedgerRollup, UsageRecord

HOUR_NS = 3_600 * 10**9
"""Bootstrap replicates when a sweep has no stored fit and the dashboard fits it (a few s)."""


def _hour(engine: Engine, column: Any) -> ColumnElement[Any]:
    """The UTC hour an instant falls in, as the database can group by it."""
    if engine.dialect.name == "postgresql":
        return func.date_trunc("hour", func.timezone("UTC", column), type_=DateTime())
    return func.strftime("%Y-%m-%d %H:00:00", column, type_=String())


def _utc(values: pd.Series) -> pd.Series:
    return pd.to_datetime(values, utc=True)


def months(engine: Engine) -> list[str]:
    """Months with a current allocation run or with usage, newest first."""
    with read_session(engine) as session:
        found = set(allocated_months(session))
        first, last = session.execute(
            select(func.min(UsageRecord.arrived_at), func.max(UsageRecord.arrived_at))
        ).one()
    if first is not None and last is not None:
        year, month = first.year, first.month
        while (year, month) <= (last.year, last.month):
            found.add(f"{year:04d}-{month:02d}")
            year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return sorted(found, reverse=True)


def default_month(engine: Engine) -> str:
    """The newest month with an allocation run, else with usage, else the current month."""
    with read_session(engine) as session:
        allocated = allocated_months(session)
        if allocated:
            return allocated[-1]
        latest = session.scalar(select(func.max(UsageRecord.arrived_at)))
    return f"{latest or datetime.now(UTC):%Y-%m}"


def teams(engine: Engine) -> list[str]:
    """Every team seen in usage (for an administrator's team picker; never for a team)."""
    with read_session(engine) as session:
        return sorted(
            t
            for t in session.scalars(
                select(UsageRecord.team).distinct().where(UsageRecord.team.is_not(None))
            )
            if t
        )


# ---------------------------------------------------------------------------------- cost


def _team_label(kind: EntryKind, team: str | None) -> str:
    if kind in (EntryKind.idle, EntryKind.unallocated):
        return CostLabel.of(kind)
    if team is None:
        return CostLabel.shared if kind is EntryKind.shared else CostLabel.no_team
    return team


def ledger_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """The month's current allocation run, per charge hour, team label, kind and currency
    (from its rollups, so a month kept in a Parquet store is read the same way).

    Adjustments to closed months are left out, as in the reconciliation, so the rows add up to
    the month's bill. Team labels: the team, or ``(idle)``, ``(unallocated)``, ``(shared)``,
    ``(no team)``.
    """
    columns = ["period_start", "team", "kind", "currency", "effective_micros", "billed_micros"]
    start = Month.parse(month).start
    with read_session(engine) as session:
        run_id = current_run_id(session, month)
        if run_id is None:
            return pd.DataFrame(columns=columns)
        hour = _hour(engine, LedgerRollup.charge_period_start).label("hour")
        query = (
            select(
                hour,
                LedgerRollup.team,
                LedgerRollup.kind,
                LedgerRollup.currency,
                func.sum(LedgerRollup.effective_cost_micros),
                func.sum(LedgerRollup.billed_cost_micros),
            )
            .where(LedgerRollup.run_id == run_id, LedgerRollup.kind != EntryKind.adjustment)
            .group_by(hour, LedgerRollup.team, LedgerRollup.kind, LedgerRollup.currency)
        )
        if team is not None:
            query = query.where(LedgerRollup.team == team)
        rows = session.execute(query).all()
    frame = pd.DataFrame(
        [(h, _team_label(k, t), k, c, int(e), int(b)) for h, t, k, c, e, b in rows], columns=columns
    )
    periods = _utc(frame["period_start"])
    frame["period_start"] = periods.fillna(pd.Timestamp(start))  # rows without a charge period
    return frame.groupby(["period_start", "team", "kind", "currency"], as_index=False)[
        ["effective_micros", "billed_micros"]
    ].sum()


def usage_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Requests, tokens and speculation counters per arrival hour, deployment and team."""
    columns = [
        "period_start",
        "deployment",
        "team",
        "requests",
        "prompt_tokens",
        "completion_tokens",
        "num_drafts",
        "draft_tokens",
        "accepted_tokens",
    ]
    parsed = Month.parse(month)
    start, end = parsed.start, parsed.end
    hour = _hour(engine, UsageRecord.arrived_at).label("hour")
    query = (
        select(
            hour,
            UsageRecord.deployment,
            UsageRecord.team,
            func.count(),
            func.sum(UsageRecord.prompt_tokens),
            func.sum(UsageRecord.completion_tokens),
            func.sum(UsageRecord.num_drafts),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.accepted_tokens),
        )
        .where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
        .group_by(hour, UsageRecord.deployment, UsageRecord.team)
    )
    if team is not None:
        query = query.where(UsageRecord.team == team)
    with read_session(engine) as session:
        rows = session.execute(query).all()
    frame = pd.DataFrame(
        [
            (h, d, _team_label(EntryKind.request, t), *(int(v or 0) for v in rest))
            for h, d, t, *rest in rows
        ],
        columns=columns,
    )
    frame["period_start"] = _utc(frame["period_start"])
    return frame


def merged_intervals(
    keys: Sequence[object], start_ns: np.ndarray, end_ns: np.ndarray
) -> pd.DataFrame:
    """Union of the intervals of each key: one row per disjoint covered stretch."""
    codes, uniques = pd.factorize(pd.Series(list(keys), dtype=object))
    frame = pd.DataFrame({"code": codes, "start": start_ns, "end": end_ns})
    frame = frame[frame["end"] > frame["start"]].sort_values(["code", "start"])
    if frame.empty:
        return pd.DataFrame({"key": [], "start": [], "end": []})
    reach = frame.groupby("code")["end"].cummax()
    previous_reach = reach.groupby(frame["code"]).shift(1)
    block = (previous_reach.isna() | (frame["start"] > previous_reach)).cumsum()
    merged = (
        frame.groupby(block)
        .agg(code=("code", "first"), start=("start", "min"), end=("end", "max"))
        .reset_index(drop=True)
    )
    merged["key"] = list(np.asarray(uniques, dtype=object)[merged["code"].to_numpy()])
    return merged[["key", "start", "end"]]


def _seconds_per_hour(merged: pd.DataFrame) -> pd.DataFrame:
    """Split covered stretches at hour boundaries: seconds covered per (key, hour)."""
    if merged.empty:
        return pd.DataFrame({"key": [], "hour_ns": [], "seconds": []})
    start = merged["start"].to_numpy(np.int64)
    end = merged["end"].to_numpy(np.int64)
    first, last = start // HOUR_NS, (end - 1) // HOUR_NS
    count = (last - first + 1).astype(np.int64)
    index = np.repeat(np.arange(len(merged)), count)
    offset = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
    hour = first[index] + offset
    piece = np.minimum(end[index], (hour + 1) * HOUR_NS) - np.maximum(start[index], hour * HOUR_NS)
    return pd.DataFrame(
        {"key": merged["key"].to_numpy()[index], "hour_ns": hour * HOUR_NS, "seconds": piece / 1e9}
    )


def session_seconds_by_hour(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Session-seconds per hour and team: the union of each session's request intervals.

    Requests are those that arrived in the month (as in the unit-cost report); a session's
    covered time is cut at hour boundaries, so hours add up to days and months exactly.
    """
    parsed = Month.parse(month)
    start, end = parsed.start, parsed.end
    query = select(
        UsageRecord.team, UsageRecord.session_id, UsageRecord.arrived_at, UsageRecord.finished_at
    ).where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
    if team is not None:
        query = query.where(UsageRecord.team == team)
    with read_session(engine) as session:
        rows = session.execute(query).all()
    if not rows:
        return pd.DataFrame(columns=["period_start", "team", "session_seconds"])
    labels = [_team_label(EntryKind.request, r[0]) for r in rows]
    keys = [(label, r[1]) for label, r in zip(labels, rows, strict=True)]
    merged = merged_intervals(keys, to_ns([r[2] for r in rows]), to_ns([r[3] for r in rows]))
    pieces = _seconds_per_hour(merged)
    pieces["team"] = [key[0] for key in pieces["key"]]
    pieces["period_start"] = pd.to_datetime(pieces["hour_ns"].astype(np.int64), unit="ns", utc=True)
    return (
        pieces.groupby(["period_start", "team"])["seconds"]
        .sum()
        .rename("session_seconds")
        .reset_index()
    )


def reconciliation_frame(engine: Engine, *, month: str, team: str | None = None) -> pd.DataFrame:
    """Per currency: the bill and its parts, requests + shared + idle + unallocated, in micros.

    A team gets its own request and shared cost only; ``bill_micros``, ``idle_micros``,
    ``unallocated_micros`` and ``balanced`` are then NA, since they describe every team's spend.
    """
    columns = [
        "currency",
        "bill_micros",
        "request_micros",
        "shared_micros",
        "idle_micros",
        "unallocated_micros",
        "balanced",
    ]
    if team is not None:
        with read_session(engine) as session:
            run_id = current_run_id(session, month)
            rows = (
                []
                if run_id is None
                else session.execute(
                    select(
                        LedgerRollup.currency,
                        LedgerRollup.kind,
                        func.sum(LedgerRollup.effective_cost_micros),
                    )
                    .where(
                        LedgerRollup.run_id == run_id,
                        LedgerRollup.team == team,
                        LedgerRollup.kind.in_((EntryKind.request, EntryKind.shared)),
                    )
                    .group_by(LedgerRollup.currency, LedgerRollup.kind)
                ).all()
            )
        sums: dict[str, dict[EntryKind, int]] = {}
        for currency, kind, micros in rows:
            sums.setdefault(currency, {})[kind] = int(micros)
        return pd.DataFrame(
            [
                (
                    c,
                    pd.NA,
                    parts.get(EntryKind.request, 0),
                    parts.get(EntryKind.shared, 0),
                    pd.NA,
                    pd.NA,
                    pd.NA,
                )
                for c, parts in sorted(sums.items())
            ],
            columns=columns,
        )
    with read_session(engine) as session:
        result = reconcile(session, Month.parse(month))
    if result.run_id is None and not result.bill:
        return pd.DataFrame(columns=columns)
    by_currency = result.by_currency()
    records = []
    for currency in sorted(set(result.bill) | set(by_currency)):
        kinds = {kind: line.effective for kind, line in by_currency.get(currency, {}).items()}
        bill = result.bill.get(currency)
        records.append(
            (
                currency,
                bill.effective if bill else 0,
                kinds.get(EntryKind.request, 0),
                kinds.get(EntryKind.shared, 0),
                kinds.get(EntryKind.idle, 0),
                kinds.get(EntryKind.unallocated, 0),
                result.balanced,
            )
        )
    return pd.DataFrame(records, columns=columns)


# ------------------------------------------------------------------------------ breakeven
