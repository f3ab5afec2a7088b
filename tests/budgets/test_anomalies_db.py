"""Anomalies from the ledger and usage (SQLite and PostgreSQL): a day on which acceptance
fell from 70% to 20% is flagged for the team that paid for it, with acceptance as the
driver, and alerts once."""

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session

from app.alerts import add_webhook
from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.anomalies.service import Granularity, find_anomalies, raise_alerts
from app.budgets.rules.budget import BudgetScope
from app.domain.periods import Month
from tests.budgets.helpers import daily_bills, register
from tests.factories import insert_usage, usage_record

FIRST = datetime(2026, 10, 1, tzinfo=UTC)
DAYS = 42
INCIDENT = FIRST + timedelta(days=40)


def _six_weeks(session: Session, folder: Path) -> None:
    """d1 billed 240.00 a day; search sends 20 requests a day of 100 tokens, drafting 100 and
    accepting 70 (20 on the incident day); GPU time follows the verified tokens."""
    register(session)
    daily_bills(session, folder, [FIRST + timedelta(days=day) for day in range(DAYS)], "240.00")
    rng = random.Random(3)
    usage = []
    for day in range(DAYS):
        start = FIRST + timedelta(days=day)
        accepted = 20 if start == INCIDENT else 70
        for n in range(rng.randint(19, 21)):
            verified = 100 + (100 - accepted)  # output tokens plus rejected drafts
            usage.append(
                usage_record(
                    team="search",
                    arrived=start + timedelta(hours=1, minutes=n),
                    seconds=30,
                    completion_tokens=100,
                    draft_tokens=100,
                    accepted_tokens=accepted,
                    gpu_ns=verified * 10 * 10**9,
                )
            )
    insert_usage(session.connection(), usage)
    for month in (Month(2026, 10), Month(2026, 11)):
        run_allocation(session, Window.of_month(month), share_idle=False,
                       tag_key="specledger-deployment")  # fmt: skip


def test_a_low_acceptance_day_is_flagged_with_acceptance_as_its_driver(session, tmp_path):
    _six_weeks(session, tmp_path)
    end = FIRST + timedelta(days=DAYS)
    reports = find_anomalies(
        session,
        end=end,
        granularity=Granularity.day,
        buckets=7,
        currency="USD",
        only=[BudgetScope.parse("team=search")],
    )
    assert [r.bucket_start for r in reports] == [INCIDENT]
    (report,) = reports
    assert report.anomaly.direction == "spike"
    top = report.drivers[0]
    assert top.dimension == "acceptance"
    assert (round(top.baseline or 0, 2), round(top.actual or 0, 2)) == (0.7, 0.2)
    assert top.effect_micros > 0.8 * report.anomaly.deviation_micros

    add_webhook(session, name="ops", url="http://127.0.0.1:9/hook", now=end)
    assert raise_alerts(session, now=INCIDENT + timedelta(days=1), currency="USD") >= 1
    assert raise_alerts(session, now=INCIDENT + timedelta(days=1), currency="USD") == 0
