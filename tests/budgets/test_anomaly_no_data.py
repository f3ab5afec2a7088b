"""A day with no data loaded (no bill, no usage) is not a drop in spend: the anomaly detector
stays silent on it, while a day whose bill is loaded and on which a team spent nothing is
still a drop (SQLite and PostgreSQL)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.orm import Session

from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.anomalies.service import Granularity, find_anomalies
from app.budgets.rules.budget import BudgetScope
from app.domain.periods import Month
from tests.budgets.helpers import daily_bills, register
from tests.factories import insert_usage, usage_record

FIRST = datetime(2026, 10, 1, tzinfo=UTC)
DAYS = 42
GAP = FIRST + timedelta(days=40)


def _six_weeks(session: Session, folder: Path, *, bill_on_gap: bool) -> None:
    """d1 billed 240.00 a day, search's 20 requests a day on it; nothing of search on the
    gap day, and no bill for it either unless ``bill_on_gap``."""
    register(session)
    days = [FIRST + timedelta(days=day) for day in range(DAYS)]
    daily_bills(session, folder, [d for d in days if bill_on_gap or d != GAP], "240.00")
    usage = [
        usage_record(
            team="search",
            arrived=FIRST + timedelta(days=day, hours=1, minutes=n),
            seconds=30,
            gpu_ns=1_000 * 10**9,
        )
        for day in range(DAYS)
        if FIRST + timedelta(days=day) != GAP
        for n in range(20)
    ]
    insert_usage(session.connection(), usage)
    for month in (Month(2026, 10), Month(2026, 11)):
        run_allocation(session, Window.of_month(month), share_idle=False,
                       tag_key="specledger-deployment")  # fmt: skip


@pytest.mark.parametrize(("bill_on_gap", "flagged"), [(False, []), (True, [GAP])])
def test_a_day_with_no_data_is_not_a_drop(
    session: Session, tmp_path: Path, bill_on_gap: bool, flagged: list[datetime]
) -> None:
    _six_weeks(session, tmp_path, bill_on_gap=bill_on_gap)
    reports = find_anomalies(
        session,
        end=FIRST + timedelta(days=DAYS),
        granularity=Granularity.day,
        buckets=7,
        currency="USD",
        only=[BudgetScope.parse("team=search")],
    )
    assert [r.bucket_start for r in reports] == flagged
    assert all(r.anomaly.direction == "drop" for r in reports)
