"""A full FOCUS 1.0 export in AWS's style, messy in the ways real exports are, ingests strictly."""

import csv
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine, select

from app.models import BillingRow
from ingest.service import IngestOptions, ingest_billing
from tests.conftest import FIXTURES
from tests.ingest.helpers import HEADER, focus_row, write_focus_csv

MESSY = FIXTURES / "aws_focus_1_0_messy.csv"


def _independent_total(column: str) -> Decimal:
    with MESSY.open(encoding="utf-8-sig", newline="") as handle:
        return sum(
            (Decimal(row[column].strip().strip('"')) for row in csv.DictReader(handle)), Decimal(0)
        )


def test_messy_export_ingests_strictly_with_repairs_counted(engine: Engine) -> None:
    report = ingest_billing(engine, str(MESSY), IngestOptions())

    assert report.rows == 51
    assert report.files[0].focus_version == "1.0"
    assert dict(report.repairs) == {
        "byte_order_mark": 1,
        "null_literal_as_null": 72,
        "empty_string_as_null": 2,
        "timestamp_format": 128,
        "enum_case": 56,
        "quoted_number": 2,
        "number_format": 1,
        "tag_user_prefix": 48,
    }
    totals = report.totals_by_currency()["USD"].to_json()
    assert (
        Decimal(totals["BilledCost"]) == _independent_total("BilledCost") == Decimal("979.996816")
    )
    assert Decimal(totals["EffectiveCost"]) == _independent_total("EffectiveCost")


def test_messy_export_rows_are_normalised(engine: Engine) -> None:
    ingest_billing(engine, str(MESSY), IngestOptions())
    with engine.connect() as conn:
        rows = conn.execute(select(BillingRow).order_by(BillingRow.source_row)).all()
    first = rows[0]
    assert first.charge_frequency == "Usage-Based"
    assert first.charge_class is None
    assert first.charge_period_start.isoformat() == "2026-10-01T00:00:00+00:00"
    assert first.tags == {
        "specledger-deployment": "llama-8b-spec",
        "team": "search",
        "aws:createdBy": "AssumedRole:ci",
    }
    assert first.provider_columns["x_CostCategories"] == {"CostCenter": "CC-42"}
    assert first.provider_columns["x_UsageType"] == "USE1-BoxUsage:p4d.24xlarge"
    assert first.focus_columns["AvailabilityZone"] == "us-east-1a"
    assert first.focus_columns["ListUnitPrice"] == "21.957642"
    assert "ResourceName" not in first.focus_columns  # NULL literal became a null
    assert rows[1].charge_period_start.isoformat() == "2026-10-01T01:00:00+00:00"
    assert rows[-1].billed_cost_micros == -100_000_000
    assert rows[-1].charge_category == "Credit"
    assert all(r.billed_cost_micros == 21_957_642 for r in rows[:48])


def test_text_that_json_must_escape_is_kept_exactly(engine: Engine, tmp_path: Path) -> None:
    """Quotes, backslashes and control characters in columns kept as JSON round-trip."""
    awkward = 'say "hi"\\ tab\there\x01 line\nbreak'
    header = [*HEADER, "AvailabilityZone", "x_Note"]
    path = write_focus_csv(
        tmp_path / "awkward.csv",
        [
            focus_row(AvailabilityZone=awkward, x_Note=awkward),
            focus_row(hour=1, AvailabilityZone="plain", x_Note="plain"),
        ],
        header,
    )
    ingest_billing(engine, str(path), IngestOptions())
    with engine.connect() as conn:
        rows = conn.execute(select(BillingRow).order_by(BillingRow.source_row)).all()
    assert rows[0].focus_columns["AvailabilityZone"] == awkward
    assert rows[0].provider_columns["x_Note"] == awkward
    assert rows[1].focus_columns["AvailabilityZone"] == "plain"
