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
from ingest.readers import RawFile, read_billing_file
from ingest.service import IngestOptions, ingest_billing
from tests.conftest import FIXTURES
from tests.ingest.helpers import focus_row, write_focus_csv

MESSY = FIXTURES / "aws_focus_1_0_messy.csv"


def _stored(engine: Engine) -> list[tuple[object, ...]]:
    with engine.connect() as conn:
        return [
            tuple(r)
            for r in conn.execute(
                select(
                    BillingRow.source_row,
                    BillingRow.billed_cost_micros,
                    BillingRow.tags,
                    BillingRow.focus_columns,
                    BillingRow.charge_period_start,
                ).order_by(BillingRow.source_row)
            )
        ]


def _delete_billing(engine: Engine) -> None:
    """Empty the billing row tables and the deliveries, as if nothing had been ingested."""
    with engine.begin() as conn:
        conn.execute(delete(billing_row_values))
        conn.execute(delete(billing_row_attributes))
        conn.execute(delete(BillingDelivery))


def test_chunks_store_and_report_what_one_pass_does(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = ingest_billing(engine, str(MESSY), IngestOptions(source="one"))
    stored_whole = _stored(engine)
    _delete_billing(engine)

    monkeypatch.setattr(ingest.service, "CHUNK_ROWS", 7)  # 51 rows: 1, then 7s, then 1
    chunked = ingest_billing(engine, str(MESSY), IngestOptions(source="one"))

    assert _stored(engine) == stored_whole
    assert chunked.to_json() == whole.to_json()
    with engine.connect() as conn:
        assert conn.execute(
            select(BillingDelivery.row_count, BillingDelivery.billing_period_end)
        ).one() == (51, whole.periods[0].billing_period_end)


def test_problems_keep_file_row_numbers_across_chunks(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ingest.service, "CHUNK_ROWS", 4)  # chunks: row 1, 2-5, 6-9, 10-12
    rows = [focus_row(hour=h) for h in range(12)]
    rows[2] = focus_row(hour=2, BilledCost="abc")
    rows[9] = focus_row(hour=9, ChargePeriodStart="yesterday")
    for row in (5, 7, 10):  # rows 6 and 8 share one attribute combination (and one bad value)
        rows[row] = focus_row(hour=row, Tags="[1, 2]")
    path = write_focus_csv(tmp_path / "bad.csv", rows)

    with pytest.raises(IngestError) as strict:
        ingest_billing(engine, str(path), IngestOptions())
    assert [(p.row, p.column) for p in strict.value.problems] == [
        (3, "BilledCost"),
        (6, "Tags"),
        (8, "Tags"),
        (10, "ChargePeriodStart"),
        (11, "Tags"),
    ]
    assert _stored(engine) == []  # chunks before the bad ones were rolled back

    report = ingest_billing(
        engine, str(path), IngestOptions(normalise=NormaliseOptions(lenient=True))
    )
    assert [(p.row, p.column) for p in report.rejects] == [
        (3, "BilledCost"),
        (6, "Tags"),
        (8, "Tags"),
        (10, "ChargePeriodStart"),
        (11, "Tags"),
    ]
    assert [r[0] for r in _stored(engine)] == [1, 2, 4, 5, 7, 9, 12]
    assert (report.files[0].rows_read, report.files[0].rows_kept) == (12, 7)


def test_each_attribute_combination_is_stored_once_per_chunk(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [focus_row(hour=h, ResourceId=f"i-{h % 2}") for h in range(12)]
    rows[5] = focus_row(hour=5, ResourceId="i-1", ChargeCategory="usage")  # repaired alike

    def attribute_records() -> list[str]:
        with engine.connect() as conn:
            return list(
                conn.execute(
                    select(billing_row_attributes.c.resource_id).order_by(
                        billing_row_attributes.c.resource_id
                    )
                ).scalars()
            )

    def stored_rows() -> list[tuple[object, ...]]:
        with engine.connect() as conn:
            return [
                tuple(r)
                for r in conn.execute(
                    select(
                        BillingRow.source_row,
                        BillingRow.resource_id,
                        BillingRow.charge_category,
                        BillingRow.billed_cost_micros,
                    ).order_by(BillingRow.source_row)
                )
            ]

    expected = [(h + 1, f"i-{h % 2}", "Usage", 1_500_000) for h in range(12)]
    ingest_billing(engine, str(write_focus_csv(tmp_path / "a.csv", rows)), IngestOptions())
    assert attribute_records() == ["i-0", "i-1", "i-1"]  # row 6 differed before its repair
    assert stored_rows() == expected

    monkeypatch.setattr(ingest.service, "CHUNK_ROWS", 4)  # chunks: row 1, 2-5, 6-9, 10-12
    rows[0] = focus_row(hour=0, ResourceId="i-0", BilledCost="1.5")  # a restated delivery
    ingest_billing(
        engine, str(write_focus_csv(tmp_path / "a.csv", rows)), IngestOptions(force=True)
    )
    assert attribute_records() == ["i-0"] * 4 + ["i-1"] * 4  # the first delivery's are gone
    assert stored_rows() == expected


def test_files_beyond_the_memory_budget_are_read_again_with_the_same_result(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "export"
    folder.mkdir()
    write_focus_csv(folder / "october.csv", [focus_row(hour=h) for h in range(5)])
    write_focus_csv(folder / "november.csv.gz", [focus_row("2026-11", hour=h) for h in range(3)])
    (folder / "messy.csv").write_bytes(MESSY.read_bytes())
    kept = ingest_billing(engine, str(folder), IngestOptions(source="s"))
    stored_kept = sorted(_stored(engine), key=repr)  # three files share row numbers
    _delete_billing(engine)

    reads: list[str] = []
    real_read = read_billing_file  # the function ingest.service imported

    def counting_read(path: Path, **kwargs: str) -> RawFile:
        reads.append(path.name)
        return real_read(path, **kwargs)

    monkeypatch.setattr(ingest.service, "read_billing_file", counting_read)
    monkeypatch.setattr(ingest.service, "KEEP_READ_BYTES", 0)
    again = ingest_billing(engine, str(folder), IngestOptions(source="s"))

    assert sorted(reads) == sorted(2 * ["october.csv", "november.csv.gz", "messy.csv"])
    assert sorted(_stored(engine), key=repr) == stored_kept
    assert again.to_json() == kept.to_json()
