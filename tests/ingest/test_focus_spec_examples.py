"""The FOCUS specification's own example files: strict mode names their missing mandatory
columns; with --allow-missing-columns each ingests and its totals match an independent sum,
unless it lacks a cost or currency column, which is never read as null."""

import csv
import re
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

from app.models import BillingRow
from ingest.errors import IngestError
from ingest.normalize import NormaliseOptions
from ingest.service import IngestOptions, ingest_billing
from tests.conftest import FIXTURES
from tests.ingest.helpers import HEADER

EXAMPLES = sorted((FIXTURES / "focus-spec").glob("*.csv"))
MANDATORY = set(HEADER) - {"ResourceId", "Tags"}
"""FOCUS 1.0-1.2 mandatory columns, listed apart from ingest (tests/ingest/helpers.py)."""
NEVER_NULL = ("BilledCost", "EffectiveCost", "BillingCurrency")


def _header_and_rows(path: Path) -> tuple[set[str], list[dict[str, str]]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return {name.lower() for name in reader.fieldnames or []}, rows


def _money(text: str) -> Decimal:
    """The test's own reading of a cost cell, written independently of ingest/cells.py."""
    cleaned = text.strip().replace("$", "").replace(",", "")
    return Decimal(cleaned) if cleaned and cleaned.lower() != "null" else Decimal(0)


def _expected_totals(path: Path) -> dict[str, tuple[Decimal, Decimal]]:
    _, rows = _header_and_rows(path)
    totals: dict[str, tuple[Decimal, Decimal]] = {}
    for row in rows:
        currency = (row.get("BillingCurrency") or "").strip() or "(none)"
        billed, effective = totals.get(currency, (Decimal(0), Decimal(0)))
        totals[currency] = (
            billed + _money(row.get("BilledCost", "")),
            effective + _money(row.get("EffectiveCost", "")),
        )
    return totals


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem[:60])
def test_strict_ingest_names_the_missing_mandatory_columns(engine: Engine, path: Path) -> None:
    present, _ = _header_and_rows(path)
    missing = sorted(c for c in MANDATORY if c.lower() not in present)
    if not missing:
        report = ingest_billing(engine, str(path), IngestOptions())
        assert report.rows > 0  # complete header: the file ingests strictly
        return
    with pytest.raises(IngestError) as raised:
        ingest_billing(engine, str(path), IngestOptions())
    message = str(raised.value)
    assert path.name in message
    listed = re.search(r"missing mandatory FOCUS [\d.]+ columns: ([A-Za-z, ]+)", message)
    assert listed is not None
    assert sorted(listed.group(1).strip().split(", ")) == missing
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(BillingRow)) == 0


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem[:60])
def test_lenient_columns_ingest_with_independent_totals(engine: Engine, path: Path) -> None:
    options = IngestOptions(normalise=NormaliseOptions(allow_missing_columns=True))
    present, _ = _header_and_rows(path)
    lacking = [c for c in NEVER_NULL if c.lower() not in present]
    if lacking:
        with pytest.raises(IngestError) as raised:
            ingest_billing(engine, str(path), options)
        assert [(p.column, "never read as null" in p.reason) for p in raised.value.problems] == [
            (c, True) for c in lacking
        ]
        with engine.connect() as conn:
            assert conn.scalar(select(func.count()).select_from(BillingRow)) == 0
        return
    report = ingest_billing(engine, str(path), options)

    expected = _expected_totals(path)
    got = {
        c: (Decimal(t.to_json()["BilledCost"]), Decimal(t.to_json()["EffectiveCost"]))
        for c, t in report.totals_by_currency().items()
    }
    assert got == expected
    _, rows = _header_and_rows(path)
    assert report.rows == len(rows)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(BillingRow)) == len(rows)
