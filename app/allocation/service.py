"""Allocation runs: join billing to usage, split every row, write the ledger atomically."""

import itertools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from sqlalchemy import delete, insert, update
from sqlalchemy.orm import Session

from app.allocation.engine import DatasetRun, PlanEngine
from app.allocation.plan import BASES
from app.allocation.repository import (
    empty_usage,
    usage_batches_between,
    usage_span,
)
from app.allocation.restatement import restatement_adjustments
from app.allocation.windowing import Window, small_inputs
from app.domain.errors import MonthClosed
from app.domain.ledger import RunStatus
from app.domain.money import residual_column
from app.domain.periods import Month
from app.kit.bulk import bulk_insert
from app.models import AllocationRun, LedgerClosure, LedgerEntry, LedgerPoolRow, LedgerRollup
from app.storage.dataset_store import DatasetStore
from app.storage.run_repository import (
    current_run_id,
    current_window_run_id,
    store_entries_prefix,
)
from app.storage.usage_store import plan_usage


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
    adjusted_months: list[Month] = field(default_factory=list)


def run_allocation(
    session: Session,
    window: Window,
    *,
    share_idle: bool,
    tag_key: str,
    now: datetime | None = None,
    engine: PlanEngine | None = None,
    store: DatasetStore | None = None,
) -> RunSummary:
    """Allocate a window and replace its previous run, in the caller's unit of work.

    Nothing is committed here: the run, its rollups and (without a store) its entries become
    the ledger of record when the caller commits, and vanish if it rolls back. With a store,
    usage is read from it and the entries are written to it under
    ``entries/month=<booked>/run=<id>/``, files that no committed run names if the caller
    rolls back.

    Raises:
        MonthClosed: If the window is a closed month.
    """
    now = now or datetime.now(UTC)
    engine = engine or PlanEngine()
    if window.month and session.get(LedgerClosure, str(window.month)):
        raise MonthClosed(
            f"{window.month} is closed; late billing for it is booked as "
            "adjustments when the next open month is allocated"
        )
    replaced = _replace_previous(session, window, now)
    run_id = session.execute(
        insert(AllocationRun)
        .values(
            month=str(window.month) if window.month else None,
            window_start=window.start,
            window_end=window.end,
            share_idle=share_idle,
            status=RunStatus.current,
            created_at=now,
            entry_count=0,
            summary={},
            store_uri=store.uri if store else None,
        )
        .returning(AllocationRun.id)
    ).scalar_one()
    adjustments, adjusted = (
        restatement_adjustments(
            session, month=window.month, tag_key=tag_key, engine=engine, store=store
        )
        if window.month
        else (None, [])
    )
    written = (
        _allocate_to_store(session, store, window, run_id, adjustments, share_idle, tag_key, engine)
        if store
        else _allocate_to_database(
            session, window, run_id, adjustments, share_idle, tag_key, engine
        )
    )
    conn = session.connection()
    bulk_insert(conn, "ledger_rollups", _rollup_rows(run_id, window.booked_month, written.rollups))
    bulk_insert(conn, "ledger_pool_rows", _pool_rows(run_id, written.pool_rows))
    summary = RunSummary(
        run_id,
        window,
        share_idle,
        written.rows,
        written.entries,
        replaced,
        adjusted_months=adjusted,
    )
    summary.totals = _totals(written.rollups)
    session.execute(
        update(AllocationRun)
        .where(AllocationRun.id == run_id)
        .values(
            entry_count=written.entries,
            summary={"totals": summary.totals, "adjusted_months": [str(m) for m in adjusted]},
            store_files=written.store_files,
        )
    )
    return summary


@dataclass(frozen=True, slots=True)
class _Written:
    rows: int
    entries: int
    pool_rows: pa.Table
    rollups: pa.Table
    store_files: dict[str, str] | None = None


IN_MEMORY_REQUESTS = 1_000_000
"""A window with more requests than this is allocated through spill files: its usage written
to Parquet a batch at a time, the plan run stage by stage within DuckDB's memory limit, the
entries inserted a batch at a time, so memory does not grow with the month. A smaller one
is allocated in memory, which starts faster."""


def _allocate_to_database(
    session: Session,
    window: Window,
    run_id: int,
    adjustments: pa.Table | None,
    share_idle: bool,
    tag_key: str,
    engine: PlanEngine,
) -> _Written:
    small = small_inputs(session, window, tag_key)
    batches = usage_batches_between(session, *usage_span(small["rows"]))
    head: list[pa.Table] = []
    for batch in batches:
        head.append(batch)
        if sum(b.num_rows for b in head) > IN_MEMORY_REQUESTS:
            return _allocate_spilled(
                session, window, run_id, small, itertools.chain(head, batches), adjustments,
                share_idle, engine,
            )  # fmt: skip
    usage = pa.concat_tables(head) if head else empty_usage()
    result = engine.allocate({**small, "usage": usage}, share_idle=share_idle)
    entries = result.entries
    if adjustments is not None:
        entries = pa.concat_tables([entries, adjustments.cast(entries.schema)])
    bulk_insert(
        session.connection(), "ledger_entries", entries_table(run_id, window.booked_month, entries)
    )
    return _Written(
        small["rows"].num_rows, entries.num_rows, result.pool_rows, engine.rollups(entries)
    )


def _allocate_spilled(
    session: Session,
    window: Window,
    run_id: int,
    small: dict[str, pa.Table],
    usage: Iterator[pa.Table],
    adjustments: pa.Table | None,
    share_idle: bool,
    engine: PlanEngine,
) -> _Written:
    conn = session.connection()
    with tempfile.TemporaryDirectory(prefix="specledger-run-") as scratch:
        folder = Path(scratch)
        (folder / "usage").mkdir()
        for number, batch in enumerate(usage):
            pq.write_table(batch, folder / "usage" / f"part-{number}.parquet")
        run = engine.allocate_dataset(
            small, str(folder / "usage" / "*.parquet"), folder / "out", share_idle=share_idle
        )
        entries = ds.dataset(folder / "out" / "entries", format="parquet")
        for batch in entries.to_batches(batch_size=_INSERT_BATCH_ROWS):
            table = pa.Table.from_batches([batch])
            bulk_insert(conn, "ledger_entries", entries_table(run_id, window.booked_month, table))
    if adjustments is not None and adjustments.num_rows:
        bulk_insert(conn, "ledger_entries", entries_table(run_id, window.booked_month, adjustments))
    rollups, count = _with_adjustments(run, adjustments, engine)
    return _Written(small["rows"].num_rows, count, run.pool_rows, rollups)


_INSERT_BATCH_ROWS = 200_000


def _with_adjustments(
    run: DatasetRun, adjustments: pa.Table | None, engine: PlanEngine
) -> tuple[pa.Table, int]:
    """A dataset run's rollups and entry count with the restatement adjustments added."""
    if adjustments is None or not adjustments.num_rows:
        return run.rollups, run.entries
    rollups = pa.concat_tables([run.rollups, engine.rollups(adjustments).cast(run.rollups.schema)])
    return rollups, run.entries + adjustments.num_rows


def _allocate_to_store(
    session: Session,
    store: DatasetStore,
    window: Window,
    run_id: int,
    adjustments: pa.Table | None,
    share_idle: bool,
    tag_key: str,
    engine: PlanEngine,
) -> _Written:
    small = small_inputs(session, window, tag_key)
    first, last = usage_span(small["rows"])
    prefix = store_entries_prefix(window.booked_month, run_id)
    with tempfile.TemporaryDirectory(prefix="specledger-run-") as scratch:
        out = Path(scratch)
        run = engine.allocate_dataset(
            small, plan_usage(store, first, last), out, share_idle=share_idle
        )
        files = store.upload(out / "entries", prefix)
    if adjustments is not None and adjustments.num_rows:
        files += store.write(adjustments, f"{prefix}/adjustments")
    rollups, entries = _with_adjustments(run, adjustments, engine)
    return _Written(small["rows"].num_rows, entries, run.pool_rows, rollups, store.checksums(files))


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
    session.execute(delete(LedgerRollup).where(LedgerRollup.run_id == previous))
    session.execute(
        update(AllocationRun)
        .where(AllocationRun.id == previous)
        .values(status=RunStatus.replaced, replaced_at=now)
    )
    return previous


def entries_table(run_id: int, booked: str, entries: pa.Table) -> pa.Table:
    """The ledger_entries rows of a run from the plan's entries, ready for bulk insert."""
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
            **{residual_column(out): entries[residual_column(out)] for _, out in BASES},
            "currency": entries["currency"],
        }
    )


def _pool_rows(run_id: int, members: pa.Table) -> pa.Table:
    """The ledger_pool_rows of a run: the member rows of its pools of several rows."""
    return pa.table(
        {
            "run_id": pa.array(np.full(members.num_rows, run_id, np.int64)),
            "pool_id": members["pool_id"],
            "billing_row_id": members["billing_row_id"],
        }
    )


def _rollup_rows(run_id: int, booked: str, rollups: pa.Table) -> pa.Table:
    """The ledger_rollups rows of a run."""
    n = rollups.num_rows
    stamp = pa.timestamp("us", tz="UTC")
    columns = {name: rollups[name] for name in rollups.column_names}
    columns["charge_period_start"] = columns.pop("start_us").cast(stamp)
    columns["charge_period_end"] = columns.pop("end_us").cast(stamp)
    return pa.table(
        {
            "run_id": pa.array(np.full(n, run_id, np.int64)),
            "booked_month": pa.array(np.full(n, booked, object), pa.string()),
            **columns,
        }
    )


def _totals(rollups: pa.Table) -> dict[str, dict[str, int]]:
    sums = rollups.group_by(["currency", "kind"]).aggregate([("effective_cost_micros", "sum")])
    totals: dict[str, dict[str, int]] = {}
    for currency, kind, amount in zip(
        sums["currency"].to_pylist(),
        sums["kind"].to_pylist(),
        sums["effective_cost_micros_sum"].to_pylist(),
        strict=True,
    ):
        totals.setdefault(currency, {})[kind] = int(amount)
    return totals
