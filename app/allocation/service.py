"""Allocation runs: join billing to usage, split every row, write the ledger atomically."""

from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session

from app.allocation.engine import PlanEngine
from app.allocation.restatement import restatement_adjustments
from app.allocation.windowing import Computed, Window, compute_window
from app.domain.errors import MonthClosed
from app.domain.ledger import RunStatus
from app.kit.bulk import bulk_insert
from app.ledger.repository import current_run_id, current_window_run_id
from app.models import AllocationRun, LedgerClosure, LedgerEntry, LedgerPoolRow


@dataclass
class RunSummary:
    run_id: int
    window: Window
    share_idle: bool
    rows: int
    entries: int
    replaced_run_id: int | None
    totals: dict[str, dict[str, int]] = field(default_factory=dict)
    """currency -> kind -> effective micros."""
    adjusted_months: list[str] = field(default_factory=list)


def run_allocation(
    session: Session,
    window: Window,
    *,
    share_idle: bool,
    tag_key: str,
    now: datetime | None = None,
    engine: PlanEngine | None = None,
) -> RunSummary:
    """Allocate a window and replace its previous run, in the caller's unit of work.

    Nothing is committed here: the run and its entries become the ledger of record when the
    caller commits, and vanish if it rolls back.

    Raises:
        MonthClosed: If the window is a closed month.
    """
    now = now or datetime.now(UTC)
    booked = window.booked_month
    if window.month and session.get(LedgerClosure, window.month):
        raise MonthClosed(
            f"{window.month} is closed; late billing for it is booked as "
            "adjustments when the next open month is allocated"
        )
    computed = compute_window(
        session, window, share_idle=share_idle, tag_key=tag_key, engine=engine
    )
    replaced = _replace_previous(session, window, now)
    run_id = session.execute(
        insert(AllocationRun)
        .values(
            month=window.month,
            window_start=window.start,
            window_end=window.end,
            share_idle=share_idle,
            status=RunStatus.current,
            created_at=now,
            entry_count=0,
            summary={},
        )
        .returning(AllocationRun.id)
    ).scalar_one()
    table = entries_table(run_id, booked, computed)
    adjusted: list[str] = []
    if window.month:
        adjustments, adjusted = restatement_adjustments(
            session, run_id=run_id, month=window.month, tag_key=tag_key, engine=engine
        )
        table = pa.concat_tables([table, adjustments], promote_options="permissive")
    bulk_insert(session.connection(), "ledger_entries", table)
    bulk_insert(session.connection(), "ledger_pool_rows", pool_rows_table(run_id, computed))
    summary = RunSummary(
        run_id,
        window,
        share_idle,
        computed.rows,
        table.num_rows,
        replaced,
        adjusted_months=adjusted,
    )
    summary.totals = _totals(table)
    session.execute(
        update(AllocationRun)
        .where(AllocationRun.id == run_id)
        .values(
            entry_count=table.num_rows,
            summary={"totals": summary.totals, "adjusted_months": adjusted},
        )
    )
    return summary


def _replace_previous(session: Session, window: Window, now: datetime) -> int | None:
    previous = (
        current_run_id(session, window.month)
        if window.month
        else current_window_run_id(session, window.start, window.end)
    )
    if previous is None:
        return None
    session.execute(delete(LedgerEntry).where(LedgerEntry.run_id == previous))
    session.execute(delete(LedgerPoolRow).where(LedgerPoolRow.run_id == previous))
    session.execute(
        update(AllocationRun)
        .where(AllocationRun.id == previous)
        .values(status=RunStatus.replaced, replaced_at=now)
    )
    return previous


def entries_table(run_id: int, booked: str, computed: Computed) -> pa.Table:
    """The ledger_entries rows of a run, as an Arrow table ready for bulk insert."""
    entries = computed.result.entries
    n = entries.num_rows
    stamp = pa.timestamp("us", tz="UTC")
    return pa.table(
        {
            "run_id": pa.array(np.full(n, run_id, np.int64)),
            "booked_month": pa.array(np.full(n, booked, object), pa.string()),
            "corrects_month": entries["corrects_month"],
            "kind": entries["kind"],
            "method": entries["method"],
            "billing_row_id": entries["billing_row_id"],
            "pool_id": entries["pool_id"],
            "charge_period_start": entries["start_us"].cast(stamp),
            "charge_period_end": entries["end_us"].cast(stamp),
            "deployment": entries["deployment"],
            "replica": entries["replica"],
            "event_id": entries["event_id"],
            "session_id": entries["session_id"],
            "team": entries["team"],
            "gpu_ns": entries["gpu_ns"],
            "effective_cost_micros": entries["effective_cost_micros"],
            "billed_cost_micros": entries["billed_cost_micros"],
            "list_cost_micros": entries["list_cost_micros"],
            "contracted_cost_micros": entries["contracted_cost_micros"],
            "currency": entries["currency"],
        }
    )


def pool_rows_table(run_id: int, computed: Computed) -> pa.Table:
    """The ledger_pool_rows of a run: the member rows of its pools of several rows."""
    members = computed.result.pool_rows
    return pa.table(
        {
            "run_id": pa.array(np.full(members.num_rows, run_id, np.int64)),
            "pool_id": members["pool_id"],
            "billing_row_id": members["billing_row_id"],
        }
    )


def _totals(table: pa.Table) -> dict[str, dict[str, int]]:
    sums = table.group_by(["currency", "kind"]).aggregate([("effective_cost_micros", "sum")])
    totals: dict[str, dict[str, int]] = {}
    for currency, kind, amount in zip(
        sums["currency"].to_pylist(),
        sums["kind"].to_pylist(),
        sums["effective_cost_micros_sum"].to_pylist(),
        strict=True,
    ):
        totals.setdefault(currency, {})[kind] = int(amount)
    return totals
