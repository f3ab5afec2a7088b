"""Money exact to the pico from the bill to the ledger, the reconciliation and the exports:
a bill's amounts finer than a micro are stored, split and summed exactly, and rounded once,
where they are shown, with the rounding as a line of its own."""

import csv
import io
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.cli.ledger import month_window
from app.db import unit_of_work
from app.deployments.service import add_deployment, add_replica
from app.domain.ledger import CostLabel, Dimension
from app.domain.money import exact_picos
from app.domain.periods import Month
from app.ledger.costs import unit_costs
from app.ledger.export import chargeback_table
from app.ledger.focus_export import focus_allocation_table
from app.ledger.reconcile import Status, reconcile
from app.models import BillingRow, LedgerEntry
from ingest.service import IngestOptions, ingest_billing
from tests.allocation.scenarios import TAG, months, store
from tests.allocation.scenarios import Month as GeneratedMonth
from tests.factories import at, insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

OCTOBER = Month.parse("2026-10")


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(month=months(max_scenarios=4))
def test_the_ledger_equals_the_bill_exactly_at_full_precision(
    session: Session, tmp_path: Path, month: GeneratedMonth
) -> None:
    """Amounts with up to twelve decimal places, credits and negative rows: ingested,
    allocated and reconciled, the ledger holds the provider's own sums exactly."""
    effective = sum(r.effective for r in month.rows)
    billed = sum(r.billed for r in month.rows)
    with session.begin_nested() as savepoint:
        store(session, month, tmp_path)
        run_allocation(session, month_window("2026-10"), share_idle=False, tag_key=TAG)
        result = reconcile(session, OCTOBER)
        stored = session.execute(
            select(
                func.sum(BillingRow.effective_cost_micros),
                func.sum(BillingRow.effective_cost_residual_picos),
            )
        ).one()
        entries = session.execute(
            select(
                func.sum(LedgerEntry.effective_cost_micros),
                func.sum(LedgerEntry.effective_cost_residual_picos),
                func.sum(LedgerEntry.billed_cost_micros),
                func.sum(LedgerEntry.billed_cost_residual_picos),
            )
        ).one()
        savepoint.rollback()
    stored_eff, stored_rest = (int(v or 0) for v in stored)
    eff, eff_rest, billed_micros, billed_rest = (int(v or 0) for v in entries)
    assert exact_picos(stored_eff, stored_rest) == effective
    assert exact_picos(eff, eff_rest) == effective
    assert exact_picos(billed_micros, billed_rest) == billed
    assert result.status is Status.balanced
    assert result.bill["USD"].effective == effective
    assert result.bill["USD"].billed == billed


def _sub_micro_month(engine: Engine, tmp_path: Path) -> None:
    """Three hours of d1 each billed 0.0000004 (a request-priced service: less than a
    micro each, 1.2 micros together), used by two teams; and one hour of 7.123456789012."""
    rows = [focus_row(hour=h, cost="0.0000004", ResourceId="i-aaa") for h in range(3)]
    rows.append(focus_row(hour=3, cost="7.123456789012", ResourceId="i-aaa"))
    ingest_billing(engine, str(write_focus_csv(tmp_path / "oct.csv", rows)), IngestOptions())
    with Session(engine) as session, session.begin():
        add_deployment(session, name="d1")
        add_replica(session, deployment="d1", name="r1", gpus=1)
    insert_usage(
        engine,
        [
            usage_record(arrived=at(h, 10), gpu_ns=3_600 * 10**9 // 2, team=team)
            for h in range(4)
            for team in ("ads", "search")
        ],
    )
    with unit_of_work(engine) as session:
        run_allocation(session, month_window("2026-10"), share_idle=False, tag_key=TAG)


BILL = Decimal("0.0000012") + Decimal("7.123456789012")


def test_a_bill_finer_than_a_micro_reconciles_exactly(engine: Engine, tmp_path: Path) -> None:
    _sub_micro_month(engine, tmp_path)
    with Session(engine) as session:
        result = reconcile(session, OCTOBER)
    assert result.balanced
    assert result.to_json()["currencies"]["USD"]["bill"]["effective"] == str(BILL)
    assert Decimal(result.to_json()["currencies"]["USD"]["request"]["effective"]) == BILL


def test_the_chargeback_rounds_once_and_books_the_difference_as_its_own_line(
    engine: Engine, tmp_path: Path
) -> None:
    _sub_micro_month(engine, tmp_path)
    with Session(engine) as session:
        lines = unit_costs(session, month=OCTOBER, by=[Dimension.team])
    table = chargeback_table(lines, [Dimension.team], OCTOBER, "USD")
    buffer = io.BytesIO()
    pa.csv.write_csv(table, buffer)
    rows = {r["team"]: r for r in csv.DictReader(io.StringIO(buffer.getvalue().decode()))}

    assert set(rows) == {"ads", "search", CostLabel.rounding}
    assert {r["currency"] for r in rows.values()} == {"USD"}
    # Each team's exact share: half of the bill, to the pico.
    assert [Decimal(rows[t]["effective_cost_exact"]) for t in ("ads", "search")] == [BILL / 2] * 2
    # Shown to the micro, the lines and the rounding line add up to the bill rounded once.
    shown = sum(Decimal(r["effective_cost"]) for r in rows.values())
    assert shown == BILL.quantize(Decimal("0.000001"))
    assert Decimal(rows[CostLabel.rounding]["effective_cost"]) != 0
    assert sum(Decimal(r["effective_cost_exact"]) for r in rows.values()) == BILL


def test_the_focus_export_carries_the_bill_at_full_precision(
    engine: Engine, tmp_path: Path
) -> None:
    _sub_micro_month(engine, tmp_path)
    with Session(engine) as session:
        table = focus_allocation_table(session, OCTOBER)
    assert table.schema.field("EffectiveCost").type == pa.decimal128(38, 12)
    assert sum(v.as_py() for v in table["EffectiveCost"]) == BILL
    assert sum(v.as_py() for v in table["BilledCost"]) == BILL
    per_source: dict[int, Decimal] = {}
    for source, cost in zip(
        table["x_SourceBillingRowId"].to_pylist(), table["EffectiveCost"].to_pylist(), strict=True
    ):
        per_source[source] = per_source.get(source, Decimal(0)) + cost
    assert sorted(per_source.values()) == [Decimal("0.0000004")] * 3 + [Decimal("7.123456789012")]
