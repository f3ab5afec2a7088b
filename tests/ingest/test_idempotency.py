"""Re-ingesting changes nothing; a newer delivery replaces the period; a failure rolls back."""

import os
import time
from pathlib import Path

import pytest
from sqlalchemy import Engine, func, select

import ingest.service
from app.models import BillingDelivery, BillingRow
from ingest.load import LoadAction
from ingest.service import IngestOptions, ingest_billing
from tests.ingest.helpers import focus_row, write_focus_csv


def _rows(engine: Engine) -> list[tuple[str | None, int | None]]:
    with engine.connect() as conn:
        return [
            (description, billed)
            for description, billed in conn.execute(
                select(BillingRow.charge_description, BillingRow.billed_cost_micros).order_by(
                    BillingRow.charge_period_start, BillingRow.id
                )
            )
        ]


def _set_mtime(path: Path, offset_s: float) -> None:
    stamp = time.time() + offset_s
    os.utime(path, (stamp, stamp))


def test_same_files_twice_change_nothing(engine: Engine, tmp_path: Path) -> None:
    path = write_focus_csv(
        tmp_path / "bill.csv",
        [focus_row(hour=h) for h in range(5)] + [focus_row("2026-11", hour=1)],
    )
    first = ingest_billing(engine, str(path), IngestOptions())
    with engine.connect() as conn:
        ids_before = conn.scalars(select(BillingRow.id).order_by(BillingRow.id)).all()
    second = ingest_billing(engine, str(path), IngestOptions())

    assert [p.action for p in first.periods] == [LoadAction.inserted] * 2
    assert [p.action for p in second.periods] == [LoadAction.unchanged] * 2
    with engine.connect() as conn:
        assert conn.scalars(select(BillingRow.id).order_by(BillingRow.id)).all() == ids_before
        assert conn.scalar(select(func.count()).select_from(BillingDelivery)) == 2


def test_newer_delivery_replaces_the_period_as_a_whole(engine: Engine, tmp_path: Path) -> None:
    old = write_focus_csv(
        tmp_path / "old.csv",
        [focus_row(hour=h) for h in range(3)]
        + [focus_row("2026-11", ChargeDescription="november")],
    )
    _set_mtime(old, -3600)
    ingest_billing(engine, str(old), IngestOptions(source="aws"))
    restated = write_focus_csv(
        tmp_path / "new.csv",
        [focus_row(hour=h, cost="2.00", ChargeDescription="restated") for h in range(2)],
    )

    report = ingest_billing(engine, str(restated), IngestOptions(source="aws"))

    assert [p.action for p in report.periods] == [LoadAction.replaced]
    assert _rows(engine) == [("restated", 2_000_000)] * 2 + [("november", 1_500_000)]
    with engine.connect() as conn:
        superseded = conn.scalar(
            select(func.count())
            .select_from(BillingDelivery)
            .where(BillingDelivery.superseded_at.is_not(None))
        )
    assert superseded == 1


def test_older_delivery_is_skipped_as_stale_unless_forced(engine: Engine, tmp_path: Path) -> None:
    new = write_focus_csv(tmp_path / "new.csv", [focus_row(ChargeDescription="new")])
    ingest_billing(engine, str(new), IngestOptions(source="aws"))
    old = write_focus_csv(tmp_path / "old.csv", [focus_row(ChargeDescription="old")])
    _set_mtime(old, -86400)

    stale = ingest_billing(engine, str(old), IngestOptions(source="aws"))
    assert [p.action for p in stale.periods] == [LoadAction.stale]
    assert _rows(engine) == [("new", 1_500_000)]

    forced = ingest_billing(engine, str(old), IngestOptions(source="aws", force=True))
    assert [p.action for p in forced.periods] == [LoadAction.replaced]
    assert _rows(engine) == [("old", 1_500_000)]


def test_failure_while_loading_a_period_leaves_it_as_it_was(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = write_focus_csv(tmp_path / "old.csv", [focus_row(ChargeDescription="kept")])
    _set_mtime(old, -3600)
    ingest_billing(engine, str(old), IngestOptions(source="aws"))
    new = write_focus_csv(tmp_path / "new.csv", [focus_row(ChargeDescription="lost")])

    def fail_after_delete(*args: object) -> None:
        raise RuntimeError("disk full")  # fault injection: the old rows were already deleted

    monkeypatch.setattr(ingest.service, "insert_rows", fail_after_delete)
    with pytest.raises(RuntimeError, match="disk full"):
        ingest_billing(engine, str(new), IngestOptions(source="aws"))

    assert _rows(engine) == [("kept", 1_500_000)]
    with engine.connect() as conn:
        assert (
            conn.scalar(
                select(func.count())
                .select_from(BillingDelivery)
                .where(BillingDelivery.superseded_at.is_(None))
            )
            == 1
        )
