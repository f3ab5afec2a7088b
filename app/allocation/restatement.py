"""Late billing for closed months becomes adjusting entries in the first open month.

A closed month's entries never change. When its billing changes afterwards (AWS re-delivers
the previous month for about two weeks), or a Slurm job that ran in it is read again (a job
running at month end is trued up when it has ended), the month is allocated again in memory and the
difference against everything already booked for it becomes ``adjustment`` entries, booked
in the month being allocated and naming the month they correct.
"""

import hashlib
import tempfile
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.allocation.engine import PlanEngine
from app.allocation.repository import usage_span
from app.allocation.windowing import Window, compute_window, small_inputs
from app.domain.ledger import AllocationMethod, EntryKind
from app.domain.periods import Month
from app.kit.epoch import to_us
from app.models import (
    AllocationRun,
    BillingDelivery,
    LedgerClosure,
    LedgerEntry,
    LedgerRollup,
    SlurmJob,
)
from app.storage.dataset_store import DatasetStore
from app.storage.entry_reader import entry_reader, run_store
from app.storage.run_repository import current_run_ids
from app.storage.usage_store import plan_usage

Key = tuple[EntryKind, str | None, str | None, str | None, str]
"""(kind, deployment, team, session_id, currency): the grain adjustments are kept at."""


def billing_fingerprint(session: Session, month_start: object) -> str:
    """A hash of the current deliveries of a billing period (changes on re-delivery)."""
    deliveries = session.execute(
        select(BillingDelivery.source, BillingDelivery.fingerprint)
        .where(
            BillingDelivery.billing_period_start == month_start,
            BillingDelivery.superseded_at.is_(None),
        )
        .order_by(BillingDelivery.source)
    ).all()
    digest = hashlib.sha256()
    for source, fingerprint in deliveries:
        digest.update(f"{source}|{fingerprint};".encode())
    return digest.hexdigest()


def restatement_adjustments(
    session: Session,
    *,
    month: Month,
    tag_key: str,
    engine: PlanEngine | None = None,
    store: DatasetStore | None = None,
) -> tuple[pa.Table, list[Month]]:
    """Adjusting entries (shaped as the plan's) for every closed month before ``month``
    whose billing changed and whose first open month is ``month``. A closed month kept in
    a Parquet store is allocated again from the store's usage and compared with the
    entries in its files (``store`` is used where it is the store a run names)."""
    closures = session.scalars(
        select(LedgerClosure).where(LedgerClosure.month < str(month)).order_by(LedgerClosure.month)
    ).all()
    closed = {Month.parse(closure.month): closure for closure in closures}
    tables: list[pa.Table] = []
    adjusted: list[Month] = []
    for closed_month, closure in closed.items():
        window = Window.of_month(closed_month)
        if _first_open_after(closed_month, set(closed)) != month:
            continue
        if (
            billing_fingerprint(session, window.start) == closure.billing_fingerprint
            and not _has_adjustments(session, closed_month)
            and not _jobs_read_since(session, window, closure.closed_at)
        ):
            continue
        share_idle, store_uri = session.execute(
            select(AllocationRun.share_idle, AllocationRun.store_uri).where(
                AllocationRun.id == closure.run_id
            )
        ).one()
        closed_store = run_store(store_uri, store) if store_uri else None
        target = _aggregate_computed(
            session, window, bool(share_idle), tag_key, engine or PlanEngine(), closed_store
        )
        booked = _booked_for(session, closed_month, exclude_month=month, store=store)
        none = (0,) * len(_AMOUNTS)
        diff = {
            key: tuple(
                a - b for a, b in zip(target.get(key, none), booked.get(key, none), strict=True)
            )
            for key in set(target) | set(booked)
        }
        diff = {k: v for k, v in diff.items() if v != none}
        if diff:
            tables.append(_adjustment_table(closed_month, window, diff))
            adjusted.append(closed_month)
    return (pa.concat_tables(tables) if tables else _adjustment_table(month, None, {})), adjusted


def _first_open_after(month: Month, closed: set[Month]) -> Month:
    current = month.next()
    while current in closed:
        current = current.next()
    return current


def _jobs_read_since(session: Session, window: Window, closed_at: datetime) -> bool:
    """Whether a Slurm job that ran in the window was read again after the month closed:
    a job running at month end accrued to the end of a read and is trued up when it has
    ended, so the closed month's usage may have changed as a restated bill does."""
    return (
        session.scalar(
            select(SlurmJob.id)
            .where(
                SlurmJob.step == "",
                SlurmJob.gpus > 0,
                SlurmJob.updated_at > closed_at,
                SlurmJob.start_at < window.end,
                func.coalesce(SlurmJob.end_at, SlurmJob.accrued_until) > window.start,
            )
            .limit(1)
        )
        is not None
    )


def _has_adjustments(session: Session, month: Month) -> bool:
    return bool(
        session.scalar(
            select(func.count())
            .select_from(LedgerRollup)
            .where(
                LedgerRollup.corrects_month == str(month),
                LedgerRollup.kind == EntryKind.adjustment,
            )
        )
    )


_KEY_COLUMNS = ["kind", "deployment", "team", "session_id", "currency"]
_AMOUNTS = (
    "effective_cost_micros",
    "billed_cost_micros",
    "effective_cost_residual_picos",
    "billed_cost_residual_picos",
)
"""What an adjustment restates: both cost bases, in micros and to the pico."""
Sums = tuple[int, ...]
"""The :data:`_AMOUNTS` of one key."""


def _aggregate_computed(
    session: Session,
    window: Window,
    share_idle: bool,
    tag_key: str,
    engine: PlanEngine,
    store: DatasetStore | None,
) -> dict[Key, Sums]:
    """The month allocated again (in memory from the database's usage, or through Parquet
    from its store's), summed at the adjustments' grain."""
    if store is None:
        entries = compute_window(
            session, window, share_idle=share_idle, tag_key=tag_key, engine=engine
        ).result.entries
        return _sums(entries)
    small = small_inputs(session, window, tag_key)
    usage = plan_usage(store, *usage_span(small["rows"]))
    with tempfile.TemporaryDirectory(prefix="specledger-restate-") as scratch:
        engine.allocate_dataset(small, usage, Path(scratch), share_idle=share_idle)
        columns = [*_KEY_COLUMNS, *_AMOUNTS]
        return _sums(ds.dataset(Path(scratch) / "entries").to_table(columns=columns))


def _sums(entries: pa.Table) -> dict[Key, Sums]:
    sums = entries.group_by(_KEY_COLUMNS, use_threads=False).aggregate(
        [(name, "sum") for name in _AMOUNTS]
    )
    keys = zip(*(sums[c].to_pylist() for c in _KEY_COLUMNS), strict=True)
    amounts = zip(*(sums[f"{name}_sum"].to_pylist() for name in _AMOUNTS), strict=True)
    return {
        (EntryKind(kind), deployment, team, session_id, currency): tuple(int(v) for v in values)
        for (kind, deployment, team, session_id, currency), values in zip(
            keys, amounts, strict=True
        )
    }


def _booked_for(
    session: Session, month: Month, *, exclude_month: Month, store: DatasetStore | None
) -> dict[Key, Sums]:
    """What the ledger already holds for a month: its own entries plus adjustments to it
    booked in other months (the month being allocated is re-run, so it is left out), read
    from each run's entries wherever the run keeps them."""
    own = (LedgerRollup.booked_month == str(month)) & (LedgerRollup.kind != EntryKind.adjustment)
    later = (
        (LedgerRollup.corrects_month == str(month))
        & (LedgerRollup.kind == EntryKind.adjustment)
        & (LedgerRollup.booked_month != str(exclude_month))
    )
    runs = session.scalars(
        select(LedgerRollup.run_id)
        .where(LedgerRollup.run_id.in_(current_run_ids()), own | later)
        .distinct()
        .order_by(LedgerRollup.run_id)
    ).all()
    totals: dict[Key, list[int]] = defaultdict(lambda: [0] * len(_AMOUNTS))
    for run_id in runs:
        with entry_reader(session, run_id, store=store) as reader:
            rows = reader.rows(_booked_query(run_id, month, exclude_month))
        for entry_kind, method, deployment, team, session_id, currency, *amounts in rows:
            # An adjustment keeps the kind it adjusts in its method.
            base = AllocationMethod(method).restated_kind or EntryKind(entry_kind)
            key = (base, deployment, team, session_id, currency)
            for i, amount in enumerate(amounts):
                totals[key][i] += int(amount or 0)
    return {k: tuple(v) for k, v in totals.items()}


def _booked_query(run_id: int, month: Month, exclude_month: Month) -> Select[*tuple[Any, ...]]:
    own = (LedgerEntry.booked_month == str(month)) & (LedgerEntry.kind != EntryKind.adjustment)
    later = (
        (LedgerEntry.corrects_month == str(month))
        & (LedgerEntry.kind == EntryKind.adjustment)
        & (LedgerEntry.booked_month != str(exclude_month))
    )
    columns = (
        LedgerEntry.kind,
        LedgerEntry.method,
        LedgerEntry.deployment,
        LedgerEntry.team,
        LedgerEntry.session_id,
        LedgerEntry.currency,
    )
    return (
        select(
            *columns,
            *(func.sum(getattr(LedgerEntry, name)) for name in _AMOUNTS),
        )
        .where(LedgerEntry.run_id == run_id, own | later)
        .group_by(*columns)
    )


def _adjustment_table(corrects: Month, window: Window | None, diff: dict[Key, Sums]) -> pa.Table:
    """Adjusting entries shaped as the plan's (plan.ENTRY_COLUMNS)."""
    keys = sorted(diff, key=lambda k: tuple("" if x is None else str(x) for x in k))
    n = len(keys)
    text = pa.string()
    start_us, end_us = (
        (int(v) for v in to_us([window.start, window.end])) if window else (None, None)
    )
    return pa.table(
        {
            "kind": pa.array([EntryKind.adjustment] * n, text),
            "method": pa.array([AllocationMethod.restating(k[0]) for k in keys], text),
            "pool_id": pa.nulls(n, pa.int64()),
            "billing_row_id": pa.nulls(n, pa.int64()),
            "start_us": pa.array([start_us] * n, pa.int64()),
            "end_us": pa.array([end_us] * n, pa.int64()),
            "deployment": pa.array([k[1] for k in keys], text),
            "replica": pa.nulls(n, text),
            "event_id": pa.nulls(n, text),
            "session_id": pa.array([k[3] for k in keys], text),
            "team": pa.array([k[2] for k in keys], text),
            "gpu_ns": pa.array([0] * n, pa.int64()),
            "effective_cost_micros": pa.array([diff[k][0] for k in keys], pa.int64()),
            "billed_cost_micros": pa.array([diff[k][1] for k in keys], pa.int64()),
            "list_cost_micros": pa.nulls(n, pa.int64()),
            "contracted_cost_micros": pa.nulls(n, pa.int64()),
            "effective_cost_residual_picos": pa.array([diff[k][2] for k in keys], pa.int64()),
            "billed_cost_residual_picos": pa.array([diff[k][3] for k in keys], pa.int64()),
            "list_cost_residual_picos": pa.array([0] * n, pa.int64()),
            "contracted_cost_residual_picos": pa.array([0] * n, pa.int64()),
            "currency": pa.array([k[4] for k in keys], text),
            "corrects_month": pa.array([str(corrects)] * n, text),
        }
    )
