"""Closed months are immutable (the database refuses); late billing becomes adjustments.

Every test works in the ``session`` fixture's transaction, rolled back afterwards: closed
months included, so no schema has to be rebuilt."""

import os
import time
from contextlib import nullcontext
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Delete, Update, delete, func, select, text, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.allocation.service import RunSummary, run_allocation
from app.cli.ledger import month_window
from app.deployments.service import add_deployment, add_replica
from app.domain.errors import MonthClosed
from app.domain.periods import Month
from app.ledger.focus_export import focus_allocation_table
from app.ledger.service import MonthNotAllocated, close_month
from app.models import LedgerClosure, LedgerEntry
from ingest.service import IngestOptions, ingest_billing
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

TAG = "specledger-deployment"


def _ingest(session: Session, path: Path, rows: list[dict[str, str]], *, age_s: float = 0) -> None:
    write_focus_csv(path, rows)
    stamp = time.time() - age_s
    os.utime(path, (stamp, stamp))
    ingest_billing(session.connection(), str(path), IngestOptions(source="aws"))


def _allocate(session: Session, month: str) -> RunSummary:
    return run_allocation(session, month_window(month), share_idle=False, tag_key=TAG)


def _close(session: Session, month: str) -> None:
    close_month(session, Month.parse(month))


@pytest.fixture
def closed_october(session: Session, tmp_path: Path) -> Session:
    _ingest(
        session,
        tmp_path / "oct.csv",
        [focus_row(hour=h, cost="10.00") for h in range(2)],
        age_s=3600,
    )
    add_deployment(session, name="d1")
    add_replica(session, deployment="d1", name="r1", gpus=1)
    insert_usage(
        session.connection(),
        [
            usage_record(arrived=at(0, 5), gpu_ns=1_800 * 10**9, team="search", session_id="a"),
            usage_record(arrived=at(1, 5), gpu_ns=900 * 10**9, team="ads", session_id="b"),
        ],
    )
    _allocate(session, "2026-10")
    _close(session, "2026-10")
    return session


def _entry_count(session: Session, month: str) -> int:
    return (
        session.scalar(
            select(func.count()).select_from(LedgerEntry).where(LedgerEntry.booked_month == month)
        )
        or 0
    )


@pytest.mark.parametrize(
    "statement",
    [
        update(LedgerEntry)
        .where(LedgerEntry.booked_month == "2026-10")
        .values(effective_cost_micros=0),
        delete(LedgerEntry).where(LedgerEntry.booked_month == "2026-10"),
        delete(LedgerClosure),
    ],
)
def test_the_database_refuses_to_change_a_closed_month(
    closed_october: Session, statement: Update | Delete
) -> None:
    before = _entry_count(closed_october, "2026-10")
    with pytest.raises(DBAPIError, match="closed"), closed_october.begin_nested():
        closed_october.connection().execute(statement)
    assert _entry_count(closed_october, "2026-10") == before


def test_truncate_is_refused_on_postgresql(closed_october: Session) -> None:
    if closed_october.get_bind().dialect.name != "postgresql":
        pytest.skip("SQLite has no TRUNCATE")
    with pytest.raises(DBAPIError, match="closed"), closed_october.begin_nested():
        closed_october.connection().execute(text("TRUNCATE ledger_entries"))
    assert _entry_count(closed_october, "2026-10") > 0


def test_allocating_or_closing_a_closed_month_again_is_refused(closed_october: Session) -> None:
    with pytest.raises(MonthClosed):
        _allocate(closed_october, "2026-10")
    with pytest.raises(MonthClosed, match="already closed"):
        _close(closed_october, "2026-10")


def test_closing_needs_an_allocation(session: Session) -> None:
    with pytest.raises(MonthNotAllocated, match="allocate"):
        _close(session, "2026-09")


def test_redelivery_of_a_closed_month_becomes_adjustments_in_the_next_open_month(
    closed_october: Session, tmp_path: Path
) -> None:
    frozen = _entry_count(closed_october, "2026-10")
    # AWS restates October: hour 1 now costs 16.00 instead of 10.00.
    _ingest(
        closed_october,
        tmp_path / "oct-restated.csv",
        [focus_row(hour=0, cost="10.00"), focus_row(hour=1, cost="16.00")],
    )
    _ingest(closed_october, tmp_path / "nov.csv", [focus_row("2026-11", hour=0, cost="3.00")])

    summary = _allocate(closed_october, "2026-11")

    assert summary.adjusted_months == [Month(2026, 10)]
    assert _entry_count(closed_october, "2026-10") == frozen
    with nullcontext(closed_october.connection()) as conn:
        adjustments = conn.execute(
            select(LedgerEntry.method, LedgerEntry.team, LedgerEntry.effective_cost_micros)
            .where(LedgerEntry.kind == "adjustment")
            .order_by(LedgerEntry.method, LedgerEntry.team)
        ).all()
        november_rows = conn.scalar(
            select(func.sum(LedgerEntry.effective_cost_micros)).where(
                LedgerEntry.booked_month == "2026-11", LedgerEntry.kind != "adjustment"
            )
        )
    # hour 1: ads used 900 of 3600 GPU-s -> +6.00 * 1/4 to ads, +4.50 to idle
    assert [(a.method, a.team, a.effective_cost_micros) for a in adjustments] == [
        ("restatement:idle", None, 4_500_000),
        ("restatement:request", "ads", 1_500_000),
    ]
    assert all(a.effective_cost_micros for a in adjustments)
    assert november_rows == 3_000_000

    # Re-running November recomputes the same adjustments (no double counting).
    _allocate(closed_october, "2026-11")
    with nullcontext(closed_october.connection()) as conn:
        total = conn.scalar(
            select(func.sum(LedgerEntry.effective_cost_micros)).where(
                LedgerEntry.kind == "adjustment"
            )
        )
    assert total == 6_000_000


def test_correction_rows_name_the_month_they_correct(
    closed_october: Session, tmp_path: Path
) -> None:
    correction = focus_row(
        "2026-11",
        hour=0,
        cost="-2.00",
        ChargeClass="Correction",
        ChargePeriodStart="2026-10-01T01:00:00Z",
        ChargePeriodEnd="2026-10-01T02:00:00Z",
    )
    _ingest(closed_october, tmp_path / "nov.csv", [correction])

    _allocate(closed_october, "2026-11")

    with nullcontext(closed_october.connection()) as conn:
        rows = conn.execute(
            select(
                LedgerEntry.kind,
                LedgerEntry.team,
                LedgerEntry.corrects_month,
                LedgerEntry.effective_cost_micros,
            )
            .where(LedgerEntry.booked_month == "2026-11")
            .order_by(LedgerEntry.kind)
        ).all()
    # October's usage of that hour drives the split: ads 1/4, idle 3/4.
    assert [(r.kind, r.team, r.corrects_month, r.effective_cost_micros) for r in rows] == [
        ("idle", None, "2026-10", -1_500_000),
        ("request", "ads", "2026-10", -500_000),
    ]


def test_focus_export_carries_restatements_as_correction_rows(
    closed_october: Session, tmp_path: Path
) -> None:
    _ingest(
        closed_october,
        tmp_path / "oct-restated.csv",
        [focus_row(hour=0, cost="10.00"), focus_row(hour=1, cost="16.00")],
    )
    _ingest(closed_october, tmp_path / "nov.csv", [focus_row("2026-11", hour=0, cost="3.00")])
    _allocate(closed_october, "2026-11")

    rows = focus_allocation_table(closed_october, Month(2026, 11)).to_pylist()
    ads_only = focus_allocation_table(closed_october, Month(2026, 11), team="ads").to_pylist()

    corrections = [r for r in rows if r["ChargeClass"] == "Correction"]
    assert sorted((r["x_CorrectsMonth"], r["EffectiveCost"]) for r in corrections) == [
        ("2026-10", Decimal("1.5")),
        ("2026-10", Decimal("4.5")),
    ]
    assert all(
        r["ChargeCategory"] == "Adjustment"
        and r["x_SourceBillingRowId"] is None
        and r["BillingPeriodStart"] == "2026-11-01T00:00:00Z"
        and r["ChargePeriodStart"] == "2026-10-01T00:00:00Z"
        and r["ProviderName"] == "AWS"
        for r in corrections
    )
    # The export holds November's bill and the restatement it books, nothing else.
    assert sum(r["EffectiveCost"] for r in rows) == Decimal("3.00") + Decimal("6.00")
    assert [r["EffectiveCost"] for r in ads_only if r["ChargeClass"] == "Correction"] == [
        Decimal("1.5")
    ]
