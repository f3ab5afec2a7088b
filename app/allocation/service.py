"""Allocation runs: join billing to usage, split every row, write the ledger atomically."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session

from app.allocation.repository import RowRecord
from app.allocation.restatement import restatement_adjustments
from app.allocation.windowing import Computed, Window, compute_window
from app.domain.errors import MonthClosed
from app.domain.ledger import RunStatus
from app.kit.bulk import bulk_insert
from app.ledger.repository import current_run_id, current_window_run_id
from app.models import AllocationRun, LedgerClosure, LedgerEntry

ADHOC = "adhoc"
"""booked_month of entries from ad-hoc (non-month) windows: never closable."""


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
) -> RunSummary:
    """Allocate a window and replace its previous run, in the caller's unit of work.

    Nothing is committed here: the run and its entries become the ledger of record when the
    caller commits, and vanish if it rolls back.

    Raises:
        MonthClosed: If the window is a closed month.
    """
    now = now or datetime.now(UTC)
    booked = window.month or ADHOC
    if window.month and session.get(LedgerClosure, window.month):
        raise MonthClosed(
            f"{window.month} is closed; late billing for it is booked as "
            "adjustments when the next open month is allocated"
        )
    computed = compute_window(session, window, share_idle=share_idle, tag_key=tag_key)
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
            session, run_id=run_id, month=window.month, tag_key=tag_key
        )
        table = pa.concat_tables([table, adjustments])
    bulk_insert(session.connection(), "ledger_entries", table)
    summary = RunSummary(
        run_id,
        window,
        share_idle,
        len(computed.rows),
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
    session.execute(
        update(AllocationRun)
        .where(AllocationRun.id == previous)
        .values(status=RunStatus.replaced, replaced_at=now)
    )
    return previous


def entries_table(run_id: int, booked: str, computed: Computed) -> pa.Table:
    """The ledger_entries rows of a run, as an Arrow table ready for bulk insert.

    Rows with ChargeClass=Correction name the month of their charge period in
    ``corrects_month`` when it is not the booked month. Columns are gathered with Arrow
    ``take`` so that millions of entries need no Python objects.
    """
    rows, matched, usage, arrays = (
        computed.rows,
        computed.matched,
        computed.usage,
        computed.arrays,
    )
    row_index, usage_index = arrays["row_index"], arrays["usage_index"]
    n = len(row_index)
    text, stamp = pa.string(), pa.timestamp("us", tz="UTC")
    by_row = pa.array(row_index)
    by_usage = pa.array(usage_index, mask=usage_index < 0)

    def per_row(values: Sequence[object], kind: pa.DataType = text) -> pa.Array:
        return pa.array(values, kind).take(by_row)

    def per_usage(values: Sequence[object]) -> pa.Array:
        return pa.array(values, text).take(by_usage)

    replica = pc.coalesce(per_usage(usage.usage.replica), per_row([p for _, p in matched]))
    return pa.table(
        {
            "run_id": pa.array(np.full(n, run_id, np.int64)),
            "booked_month": pa.array(np.full(n, booked, object), text),
            "corrects_month": per_row([_corrects(r, booked) for r in rows]),
            "kind": pa.array(arrays["kind"].astype(object), text),
            "method": pa.array(arrays["method"].astype(object), text),
            "billing_row_id": per_row([r.id for r in rows], pa.int64()),
            "charge_period_start": per_row([r.charge_period_start for r in rows], stamp),
            "charge_period_end": per_row([r.charge_period_end for r in rows], stamp),
            "deployment": per_row([d for d, _ in matched]),
            "replica": replica,
            "event_id": per_usage(usage.event_id),
            "session_id": per_usage(usage.session_id),
            "team": pa.array(arrays["team"], text),
            "gpu_ns": pa.array(arrays["gpu_ns"].astype(np.int64)),
            "effective_cost_micros": pa.array(arrays["effective_micros"].astype(np.int64)),
            "billed_cost_micros": pa.array(arrays["billed_micros"].astype(np.int64)),
            "currency": per_row([r.currency for r in rows]),
        }
    )


def _corrects(row: RowRecord, booked: str) -> str | None:
    month = f"{row.charge_period_start:%Y-%m}"
    return month if row.charge_class == "Correction" and month != booked else None


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
