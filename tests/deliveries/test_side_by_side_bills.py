"""The demo bills deployments that ran side by side in the same hours, each under its own
source: their daily networking rows are separate charges (each deployment's own linked
account), so the second bill is not refused as a copy of the first."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.cli.demo_serving import bill
from app.models import BillingRow


def test_two_deployments_billed_for_the_same_hours_both_load(
    engine: Engine, tmp_path: Path
) -> None:
    started = datetime(2026, 11, 3, 10, 5, tzinfo=UTC)
    finished = started + timedelta(minutes=20)
    bill(engine, tmp_path, "demo-plain", started, finished)
    bill(engine, tmp_path, "demo-ngram", started, finished)
    with Session(engine) as session:
        rows = session.scalar(select(func.count()).select_from(BillingRow))
    assert rows == 4  # per deployment: one instance-hour and the day's networking line
