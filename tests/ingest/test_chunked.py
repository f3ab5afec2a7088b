"""Files are normalised and written in chunks: chunk boundaries change nothing that is stored
or reported, and problems keep the row numbers of the file."""

from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, select

import ingest.service
from app.models import BillingDelivery, BillingRow
from app.models.billing import billing_row_attributes, billing_row_values
from ingest.errors import IngestError
from ingest.normalize import NormaliseOptions
from ingest.service import IngestOptions, ingest_billing
from tests.conftest import FIXTURES
from tests.ingest.helpers import focus_row, write_focus_csv

MESSY = FIXTURES / "aws_focus_1_0_messy.csv"


def _stored(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [tuple(r) for r in conn.execute(
            select(BillingRow.source_row, BillingRow.billed_cost_micros, BillingRow.tags,
                   BillingRow.focus_columns, BillingRow.charge_period_start)
            .order_by(BillingRow.source_row))]


def test_chunks_store_and_report_what_one_pass_does(engine: Engine,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    whole = ingest_billing(engine, str(MESSY), IngestOptions(source="one"))
    stored_whole = _stored(engine)
    with engine.begin() as conn:
        for table in (billing_row_values, billing_row_attributes, BillingDelivery.__table__):
            conn.execute(delete(table))

    monkeypatch.setattr(ingest.service, "CHUNK_ROWS", 7)  # 51 rows: 8 chunks, the last short
    chunked = ingest_billing(engine, str(MESSY), IngestOptions(source="one"))

    assert _stored(engine) == stored_whole
    assert chunked.to_json() == whole.to_json()
    with engine.connect() as conn:
        assert conn.execute(select(BillingDelivery.row_count, BillingDelivery.billing_period_end)
                            ).one() == (51, whole.periods[0].billing_period_end)


def test_problems_keep_file_row_numbers_across_chunks(engine: Engine, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest.service, "CHUNK_ROWS", 4)
    rows = [focus_row(hour=h) for h in range(12)]
    rows[2] = focus_row(hour=2, BilledCost="abc")
    rows[9] = focus_row(hour=9, ChargePeriodStart="yesterday")
    path = write_focus_csv(tmp_path / "bad.csv", rows)

    with pytest.raises(IngestError) as strict:
        ingest_billing(engine, str(path), IngestOptions())
    assert [(p.row, p.column) for p in strict.value.problems] == [
        (3, "BilledCost"), (10, "ChargePeriodStart")]
    assert _stored(engine) == []  # chunks before the bad ones were rolled back

    report = ingest_billing(engine, str(path),
                            IngestOptions(normalise=NormaliseOptions(lenient=True)))
    assert [(p.row, p.column) for p in report.rejects] == [
        (3, "BilledCost"), (10, "ChargePeriodStart")]
    assert [r[0] for r in _stored(engine)] == [1, 2, 4, 5, 6, 7, 8, 9, 11, 12]
    assert (report.files[0].rows_read, report.files[0].rows_kept) == (12, 10)
