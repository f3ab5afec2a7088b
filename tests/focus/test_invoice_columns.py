"""The FOCUS export keeps each source row's invoice columns: InvoiceId, InvoiceIssuerName and
the billing account and period the invoice is for, on every share of the row, whatever FOCUS
version the bill was (a 1.0 export with InvoiceId, the 1.2 and 1.3 fixtures given ids).
Correction rows (restatements of a closed month) belong to no one source row or invoice:
they carry the payer's columns and no InvoiceId."""

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from tests.focus.exported import AWS_1_2, AWS_1_3, allocate_october, cli, export_october
from tests.ingest.helpers import HEADER, focus_row, write_focus_csv

INVOICE_COLUMNS = (
    "InvoiceId",
    "InvoiceIssuerName",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
)


def _with_invoice_ids(source: Path, out: Path) -> dict[str, str]:
    """``source`` with an InvoiceId per row (two invoices, by ChargeCategory and row), and the
    id of each row by its ChargePeriodStart, ResourceId and ServiceCategory."""
    with source.open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        rows = list(reader)
    for i, row in enumerate(rows):
        row["InvoiceId"] = f"INV-2026-10-{i % 2}"
    with out.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=header)
        writer.writeheader()
        writer.writerows(rows)
    return {_key(row): row["InvoiceId"] for row in rows}


def _key(row: dict[str, Any]) -> str:
    return "|".join(
        str(row.get(name) or "")
        for name in ("ChargePeriodStart", "ResourceId", "ServiceCategory", "ChargeDescription")
    )


def _shares_by_origin(rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    shares: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if row["x_SourceBillingRowId"] is not None:
            shares[row["x_SourceBillingRowId"]].append(row)
    return shares


@pytest.mark.parametrize("fixture", [AWS_1_2, AWS_1_3], ids=["focus-1.2", "focus-1.3"])
def test_every_share_carries_its_source_rows_invoice(
    engine: Engine, cli_env: str, tmp_path: Path, fixture: Path
) -> None:
    bill = tmp_path / fixture.name
    invoice_of = _with_invoice_ids(fixture, bill)
    with fixture.open(newline="") as f:
        sources = {_key(row): row for row in csv.DictReader(f)}
    allocate_october(engine, bill)
    exported = export_october(tmp_path / "focus.parquet").to_pylist()
    shares = _shares_by_origin(exported)
    assert len(shares) == len(sources)
    seen = set()
    for rows in shares.values():
        key = _key(rows[0])
        seen.add(invoice_of[key])
        for row in rows:
            assert row["InvoiceId"] == invoice_of[key]
            for name in INVOICE_COLUMNS[1:]:
                assert row[name] == (sources[key].get(name) or None), name
    assert seen == {"INV-2026-10-0", "INV-2026-10-1"}


@pytest.mark.parametrize("version", [[], ["--focus-version", "1.0"]], ids=["detected", "1.0"])
def test_a_focus_1_0_bill_with_invoice_ids_keeps_them(
    engine: Engine, cli_env: str, tmp_path: Path, version: list[str]
) -> None:
    rows = [focus_row(hour=h, cost="7.20", InvoiceId=f"INV-{h}") for h in range(2)]
    rows.append(  # matches no deployment: exported unsplit, as billed
        focus_row(hour=0, cost="0.55", Tags="{}", ServiceCategory="Storage", InvoiceId="INV-0")
    )
    bill = write_focus_csv(tmp_path / "oct.csv", rows, header=[*HEADER, "InvoiceId"])
    cli("ingest", "billing", str(bill), *version)
    cli("deployments", "add", "d1")
    cli("deployments", "add-replica", "d1", "r1", "--gpus", "2")
    cli("allocate", "--month", "2026-10")
    out = tmp_path / "focus.csv"
    cli("export", "chargeback", "--month", "2026-10", "--format", "focus", "--out", str(out))
    with out.open(newline="") as f:
        exported = list(csv.DictReader(f))
    by_hour = defaultdict(set)
    for row in exported:
        assert row["InvoiceIssuerName"] == "AWS"
        assert row["BillingAccountId"] == "111"
        by_hour[(row["ChargePeriodStart"], row["ServiceCategory"])].add(row["InvoiceId"])
    assert by_hour == {
        ("2026-10-01T00:00:00Z", "Compute"): {"INV-0"},
        ("2026-10-01T01:00:00Z", "Compute"): {"INV-1"},
        ("2026-10-01T00:00:00Z", "Storage"): {"INV-0"},
    }
