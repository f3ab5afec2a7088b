"""A bill's amounts are loaded at the bill's precision: finer than a micro, kept to the pico
(micros and a residual, ``app.domain.money``); the ingest report states the provider's own
totals; rows loaded in micros before migration 0018 keep what they held."""

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, select, text

from app import migrate
from app.models import BillingRow
from ingest.service import IngestOptions, ingest_billing
from tests.ingest.helpers import focus_row, write_focus_csv


def _load(engine: Engine, tmp_path: Path, *costs: str) -> dict[str, Any]:
    rows = [focus_row(hour=h, cost=cost) for h, cost in enumerate(costs)]
    report = ingest_billing(
        engine, str(write_focus_csv(tmp_path / "oct.csv", rows)), IngestOptions()
    )
    return report.to_json()


def test_amounts_finer_than_a_micro_are_kept_and_totalled_exactly(
    engine: Engine, tmp_path: Path
) -> None:
    # Each of the last three rounds to 0 micros: summed in micros, the total would lose them.
    report = _load(engine, tmp_path, "20.520216", "0.00000032899", "0.0000004", "0.0000001")
    assert report["totals"]["USD"] == {
        "BilledCost": "20.52021682899",
        "EffectiveCost": "20.52021682899",
    }
    with engine.connect() as conn:
        stored = conn.execute(
            select(BillingRow.billed_cost_micros, BillingRow.billed_cost_residual_picos).order_by(
                BillingRow.source_row
            )
        ).all()
    assert [tuple(r) for r in stored] == [
        (20_520_216, 0),
        (0, 328_990),
        (0, 400_000),
        (0, 100_000),
    ]


def test_a_credit_keeps_its_sign_to_the_pico(engine: Engine, tmp_path: Path) -> None:
    report = _load(engine, tmp_path, "-0.0000015", "1.0000015")
    assert report["totals"]["USD"]["BilledCost"] == "1.000000"
    with engine.connect() as conn:
        stored = conn.execute(
            select(BillingRow.billed_cost_micros, BillingRow.billed_cost_residual_picos).order_by(
                BillingRow.source_row
            )
        ).all()
    # Half a micro rounds to even: -1.5 -> -2 micros (+500,000 picos), 1.5 -> 2 (-500,000).
    assert [tuple(r) for r in stored] == [(-2, 500_000), (1_000_002, -500_000)]


def test_digits_beyond_the_pico_are_rounded_and_counted(engine: Engine, tmp_path: Path) -> None:
    # A float written out in full (some exports do): 17 significant digits.
    report = _load(engine, tmp_path, "0.30000000000000004", "1.5")
    assert report["totals"]["USD"]["BilledCost"] == "1.800000"
    # One cell in each of the row's four cost columns (the helper writes the cost in all).
    assert report["repairs"] == {"rounded_to_the_pico": 4}


def test_rows_stored_in_micros_before_0018_keep_their_amounts(
    engine: Engine, db_url: str, tmp_path: Path
) -> None:
    _load(engine, tmp_path, "1.25", "0.000001")
    migrate.downgrade(db_url, "0017_slurm_accrual")
    try:
        with engine.connect() as conn:
            columns = conn.execute(text("SELECT * FROM billing_rows")).keys()
        assert not any(c.endswith("_residual_picos") for c in columns)
    finally:
        migrate.upgrade(db_url)
    with engine.connect() as conn:
        stored = conn.execute(
            select(BillingRow.billed_cost_micros, BillingRow.billed_cost_residual_picos).order_by(
                BillingRow.source_row
            )
        ).all()
    assert [tuple(r) for r in stored] == [(1_250_000, 0), (1, 0)]
