"""FOCUS 1.1, 1.2 and 1.3 files ingest (tests/fixtures/focus/README.md says where each format
comes from); a provider export that breaks nullability in columns the ledger does not split
loads with conformance warnings, one that breaks the ledger's own columns fails; and the
project's own 1.3 export ingests back to the same totals."""

import csv
from decimal import Decimal
from pathlib import Path

import pyarrow.csv as pacsv
import pytest
from sqlalchemy import Engine, func, select

from app.models import BillingRow
from ingest.errors import IngestError
from ingest.service import IngestOptions, ingest_billing
from tests.focus.exported import (
    AWS_1_1,
    AWS_1_2,
    AWS_1_3,
    FIXTURES,
    allocate_october,
    export_october,
)

OCI = FIXTURES / "oci_1_2_null_contracted.csv"
# Every fixture holds the same four October rows: 2 x 29.49534 + 1.125 + 0.24.
TOTAL = Decimal("60.35568")


def _stored(engine: Engine) -> tuple[int, Decimal, Decimal]:
    with engine.connect() as conn:
        count, billed, effective = conn.execute(
            select(
                func.count(),
                func.sum(BillingRow.billed_cost_micros),
                func.sum(BillingRow.effective_cost_micros),
            )
        ).one()
    return count, Decimal(billed or 0) / 10**6, Decimal(effective or 0) / 10**6


@pytest.mark.parametrize(
    ("fixture", "version"), [(AWS_1_1, "1.1"), (AWS_1_2, "1.2"), (AWS_1_3, "1.3")]
)
def test_each_focus_version_ingests(engine: Engine, fixture: Path, version: str) -> None:
    report = ingest_billing(engine, str(fixture), IngestOptions())

    assert [f.focus_version for f in report.files] == [version]
    assert report.conformance == []
    assert not report.rejects
    assert _stored(engine) == (4, TOTAL, TOTAL)
    with engine.connect() as conn:
        providers = set(conn.scalars(select(BillingRow.provider_name)))
    assert providers == {"AWS"}  # 1.3: from ServiceProviderName


def test_null_contracted_cost_loads_with_a_conformance_warning(engine: Engine) -> None:
    report = ingest_billing(engine, str(OCI), IngestOptions())

    assert _stored(engine) == (4, TOTAL, TOTAL)
    warnings = {(w.column, w.count, tuple(w.first_rows)) for w in report.conformance}
    assert warnings == {
        ("ContractedCost", 4, (1, 2, 3, 4)),
        ("ContractedUnitPrice", 4, (1, 2, 3, 4)),
    }
    assert report.to_json()["conformance_warnings"][0]["file"].endswith(OCI.name)
    text = report.to_text()
    assert "Conformance warning:" in text
    assert "ContractedCost must not be null in 4 row(s) (rows 1, 2, 3, 4)" in text


def _broken(tmp_path: Path, column: str, row: int) -> Path:
    rows = list(csv.DictReader(OCI.open()))
    rows[row - 1][column] = ""
    out = tmp_path / f"null-{column}.csv"
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return out


@pytest.mark.parametrize(
    "column",
    ["BilledCost", "EffectiveCost", "ChargePeriodStart", "ChargePeriodEnd", "BillingCurrency"],
)
def test_a_null_in_the_ledgers_columns_fails_the_ingest(
    engine: Engine, tmp_path: Path, column: str
) -> None:
    path = _broken(tmp_path, column, row=3)

    with pytest.raises(IngestError) as caught:
        ingest_billing(engine, str(path), IngestOptions())

    problems = [(p.row, p.column, p.reason) for p in caught.value.problems]
    assert (3, column, "must not be null") in problems
    assert all(p.file.endswith(path.name) for p in caught.value.problems)
    assert _stored(engine)[0] == 0  # nothing written


def test_the_own_focus_1_3_export_ingests_back_to_the_same_totals(
    engine: Engine, cli_env: str, tmp_path: Path
) -> None:
    allocate_october(engine, AWS_1_3)
    before = _stored(engine)
    table = export_october(tmp_path / "focus.parquet")
    exported = tmp_path / "export.csv"
    pacsv.write_csv(table, exported)
    # The export is a delivery of a source of its own, beside the provider's.
    report = ingest_billing(engine, str(exported), IngestOptions(source="specledger-export"))

    assert [f.focus_version for f in report.files] == ["1.3"]
    assert not report.rejects
    assert report.conformance == []
    assert report.rows == table.num_rows > before[0]
    assert _stored(engine) == (before[0] + table.num_rows, 2 * TOTAL, 2 * TOTAL)
    totals = report.totals_by_currency()["USD"]
    assert Decimal(totals.billed_cost_picos) / 10**12 == before[1] == TOTAL
    assert Decimal(totals.effective_cost_picos) / 10**12 == before[2] == TOTAL
