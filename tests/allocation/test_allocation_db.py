"""Allocation runs on both databases: exact per row and per month, replaceable when open."""

from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import StatementError
from sqlalchemy.orm import Session

from app.allocation.service import RunSummary, run_allocation
from app.allocation.windowing import Window
from app.cli.ledger import month_window
from app.db import unit_of_work
from app.deployments.service import add_deployment, add_replica
from app.domain.ledger import AllocationMethod, EntryKind, RunStatus
from app.domain.periods import Month
from app.ledger.focus_export import focus_allocation_table
from app.ledger.reconcile import reconcile
from app.models import AllocationRun, BillingRow, LedgerEntry, LedgerPoolRow
from app.storage.run_repository import allocated_months, current_run_id
from ingest.service import IngestOptions, ingest_billing
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

TAG = "specledger-deployment"


@pytest.fixture
def october(engine: Engine, tmp_path: Path) -> Engine:
    """d1: one replica of 4 GPUs, three priced hours, a shared networking row, one stray row."""
    rows = [focus_row(hour=h, cost="5.672", ResourceId="i-aaa") for h in range(3)]
    rows.append(
        focus_row(
            hour=0,
            cost="4.50",
            ServiceCategory="Networking",
            ChargePeriodEnd="2026-10-02T00:00:00Z",
            ResourceId="",
        )
    )
    rows.append(focus_row(hour=5, cost="-1.25", ChargeCategory="Credit", Tags="{}"))
    ingest_billing(engine, str(write_focus_csv(tmp_path / "oct.csv", rows)), IngestOptions())
    with Session(engine) as session, session.begin():
        add_deployment(session, name="d1")
        add_replica(session, deployment="d1", name="r1", gpus=4)
    insert_usage(
        engine,
        [
            usage_record(arrived=at(0, 10), gpu_ns=3_000_000_000, team="search", session_id="a"),
            usage_record(arrived=at(0, 20), gpu_ns=1_000_000_000, team="ads", session_id="b"),
            # spans the hour boundary: 30 s in hour 0 and 30 s in hour 1
            usage_record(
                arrived=at(0, 59, 30), seconds=60, gpu_ns=8_000_000_000, team="ads", session_id="b"
            ),
            usage_record(arrived=at(1, 5), gpu_ns=2_000_000_000, team="search", session_id="a"),
            usage_record(deployment="other", arrived=at(1, 6), gpu_ns=9_000_000_000),
        ],
    )
    return engine


def _allocate(engine: Engine, window: Window, *, share_idle: bool = False) -> RunSummary:
    with unit_of_work(engine) as session:
        return run_allocation(session, window, share_idle=share_idle, tag_key=TAG)


def _per_row_sums(
    engine: Engine,
) -> list[tuple[int, int | None, int | None, int | None, int | None]]:
    """Per billing row: id, its effective and billed cost, and the sums of its entries."""
    with engine.connect() as conn:
        return [
            (row_id, effective, billed, effective_sum, billed_sum)
            for row_id, effective, billed, effective_sum, billed_sum in conn.execute(
                select(
                    BillingRow.id,
                    BillingRow.effective_cost_micros,
                    BillingRow.billed_cost_micros,
                    func.sum(LedgerEntry.effective_cost_micros),
                    func.sum(LedgerEntry.billed_cost_micros),
                )
                .join(LedgerEntry, LedgerEntry.billing_row_id == BillingRow.id)
                .group_by(
                    BillingRow.id, BillingRow.effective_cost_micros, BillingRow.billed_cost_micros
                )
            )
        ]


def test_every_row_is_split_exactly(october: Engine) -> None:
    summary = _allocate(october, month_window("2026-10"))

    sums = _per_row_sums(october)
    assert len(sums) == 5
    assert all(
        eff == eff_sum and billed == billed_sum for _, eff, billed, eff_sum, billed_sum in sums
    )
    totals = summary.totals["USD"]
    assert sum(totals.values()) == 3 * 5_672_000 + 4_500_000 - 1_250_000
    assert totals["unallocated"] == -1_250_000


def test_gpu_seconds_drive_the_split(october: Engine) -> None:
    _allocate(october, month_window("2026-10"))
    with october.connect() as conn:
        hour0 = conn.execute(
            select(
                LedgerEntry.kind,
                LedgerEntry.team,
                LedgerEntry.gpu_ns,
                LedgerEntry.effective_cost_micros,
            )
            .where(
                LedgerEntry.charge_period_start == at(0),
                LedgerEntry.method == "gpu_seconds",
                LedgerEntry.charge_period_end == at(1),
            )
            .order_by(LedgerEntry.gpu_ns)
        ).all()
    capacity = 4 * 3600 * 10**9
    # 3 s + 1 s + half of the 8 s spanning request
    assert [r.gpu_ns for r in hour0 if r.kind == "request"] == [1e9, 3e9, 4e9]
    idle = next(r for r in hour0 if r.kind == "idle")
    assert idle.gpu_ns == capacity - 8 * 10**9
    request = next(r for r in hour0 if r.gpu_ns == 3 * 10**9)
    assert abs(request.effective_cost_micros - 5_672_000 * 3e9 / capacity) <= 1


def test_hour_without_requests_is_all_idle_and_share_idle_moves_cost(october: Engine) -> None:
    _allocate(october, month_window("2026-10"), share_idle=True)
    with october.connect() as conn:
        kinds = dict(
            conn.execute(
                select(LedgerEntry.charge_period_start, func.count())
                .where(LedgerEntry.kind == "idle")
                .group_by(LedgerEntry.charge_period_start)
            ).all()
        )
        by_kind = dict(
            conn.execute(
                select(LedgerEntry.kind, func.sum(LedgerEntry.effective_cost_micros)).group_by(
                    LedgerEntry.kind
                )
            ).all()
        )
    assert kinds == {at(2): 1}  # only the hour nobody used keeps an idle line
    # The used hours go whole to their requests; the networking row is shared by GPU-seconds.
    assert by_kind[EntryKind.request] == 2 * 5_672_000
    assert by_kind[EntryKind.shared] == 4_500_000


def test_rerun_of_an_open_month_replaces_its_entries(october: Engine) -> None:
    first = _allocate(october, month_window("2026-10"))
    second = _allocate(october, month_window("2026-10"), share_idle=True)

    assert second.replaced_run_id == first.run_id
    with october.connect() as conn:
        runs = dict(conn.execute(select(AllocationRun.id, AllocationRun.status)).all())
        by_run = dict(
            conn.execute(
                select(LedgerEntry.run_id, func.count()).group_by(LedgerEntry.run_id)
            ).all()
        )
    assert runs == {first.run_id: "replaced", second.run_id: "current"}
    assert list(by_run) == [second.run_id]
    with Session(october) as session:
        assert current_run_id(session, "2026-10") == second.run_id
        assert current_run_id(session, "2026-09") is None
        assert allocated_months(session) == ["2026-10"]


def test_adhoc_window_allocates_by_charge_period(october: Engine) -> None:
    summary = _allocate(october, Window(at(1), at(3)))
    assert summary.rows == 2
    assert sum(summary.totals["USD"].values()) == 2 * 5_672_000
    again = _allocate(october, Window(at(1), at(3)))
    assert again.replaced_run_id == summary.run_id
    with Session(october) as session:  # an ad-hoc window is never a month's ledger of record
        assert allocated_months(session) == []


def test_a_run_is_written_in_the_callers_unit_of_work(october: Engine) -> None:
    with Session(october) as session:
        summary = run_allocation(session, month_window("2026-10"), share_idle=False, tag_key=TAG)
        assert current_run_id(session, "2026-10") == summary.run_id
        session.rollback()
    with Session(october) as session:
        assert current_run_id(session, "2026-10") is None
        assert session.scalar(select(func.count()).select_from(LedgerEntry)) == 0


def test_kind_method_and_status_read_back_as_the_ledger_enums(october: Engine) -> None:
    summary = _allocate(october, month_window("2026-10"))
    with Session(october) as session:
        entries = session.scalars(select(LedgerEntry).where(LedgerEntry.run_id == summary.run_id))
        assert {(type(e.kind), type(e.method)) for e in entries} == {(EntryKind, AllocationMethod)}
        run = session.get(AllocationRun, summary.run_id)
        assert run is not None
        assert run.status is RunStatus.current
        with pytest.raises(StatementError, match="not a valid EntryKind"):
            session.scalar(select(func.count()).where(LedgerEntry.kind == "bogus"))


def test_instance_rows_of_one_hour_are_pooled_and_still_traceable(
    engine: Engine, tmp_path: Path
) -> None:
    """Eight tagged instance rows of one hour: one entry per request (not eight), the pool's
    rows recorded once, the month balanced, and the FOCUS export naming every source row
    with shares that sum back to it."""
    rows = [
        focus_row(hour=0, cost=f"{3 + i}.0{i}", ResourceId=f"i-{i}", ListCost="40.00")
        for i in range(8)
    ]
    ingest_billing(engine, str(write_focus_csv(tmp_path / "oct.csv", rows)), IngestOptions())
    with Session(engine) as session, session.begin():
        add_deployment(session, name="d1")
        add_replica(session, deployment="d1", name="r1", gpus=8)
    insert_usage(
        engine,
        [usage_record(arrived=at(0, m), gpu_ns=10**12, team="search") for m in range(0, 60, 6)],
    )
    summary = _allocate(engine, month_window("2026-10"))

    with Session(engine) as session:
        entries = session.scalars(select(LedgerEntry)).all()
        pool_rows = session.scalars(select(LedgerPoolRow)).all()
        balance = reconcile(session, Month(2026, 10))
        focus = focus_allocation_table(session, Month(2026, 10)).to_pylist()
    requests = [e for e in entries if e.kind is EntryKind.request]
    assert len(requests) == 10  # one per request, not one per request and instance
    assert summary.entries == 11  # plus the pool's idle share
    assert {e.pool_id for e in entries} == {min(r.billing_row_id for r in pool_rows)}
    assert all(e.billing_row_id is None for e in entries)
    assert len(pool_rows) == 8
    assert sum(e.effective_cost_micros for e in entries) == sum(
        (3 + i) * 1_000_000 + i * 10_000 for i in range(8)
    )
    assert balance.balanced
    assert balance.pending_rows == 0
    by_source: dict[int, list[dict[str, object]]] = {}
    for record in focus:
        by_source.setdefault(int(str(record["x_SourceBillingRowId"])), []).append(record)
    assert len(by_source) == 8
    with Session(engine) as session:
        billed = dict(
            session.execute(select(BillingRow.id, BillingRow.effective_cost_micros)).all()
        )
    for row_id, shares in by_source.items():
        assert sum(Decimal(str(s["EffectiveCost"])) for s in shares) * 1_000_000 == billed[row_id]
        assert sum(Decimal(str(s["ListCost"])) for s in shares) == Decimal("40.00")
