"""Acceptance drift from the usage records (SQLite and PostgreSQL): a deployment whose
acceptance fell from 70% to 20% is found, dated, costed and alerted once."""

import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session

from app.alerts import add_webhook
from app.anomalies.acceptance import acceptance_drifts, drift_alert
from app.settings import Settings
from app.watch import check_everything
from ingest.service import IngestOptions, ingest_billing
from tests.budgets.helpers import allocate, register
from tests.factories import insert_usage, usage_record
from tests.ingest.helpers import focus_row, write_focus_csv

FIRST = datetime(2026, 10, 1, tzinfo=UTC)
BROKEN = FIRST + timedelta(days=10, hours=6)


def _two_weeks(session: Session) -> None:
    """d1: four requests an hour for 14 days, drafting 100 tokens each and accepting about 70,
    then about 20 from day 10, 06:00."""
    rng = random.Random(5)
    rows = []
    for hour in range(14 * 24):
        at = FIRST + timedelta(hours=hour)
        rate = 0.2 if at >= BROKEN else 0.7
        for n in range(4):
            accepted = max(0, min(100, round(100 * rng.gauss(rate, 0.04))))
            rows.append(
                usage_record(
                    arrived=at + timedelta(minutes=10 * n),
                    seconds=5,
                    completion_tokens=100,
                    draft_tokens=100,
                    accepted_tokens=accepted,
                    gpu_ns=(200 - accepted) * 10**8,
                )
            )
    insert_usage(session.connection(), rows)


def test_a_fall_in_acceptance_is_found_dated_costed_and_alerted_once(session, tmp_path: Path):
    register(session)
    days = [FIRST + timedelta(days=d) for d in range(14)]
    rows = [
        focus_row(cost="96.00", ChargePeriodStart=f"{day:%Y-%m-%dT%H:%M:%SZ}",
                  ChargePeriodEnd=f"{day + timedelta(days=1):%Y-%m-%dT%H:%M:%SZ}")
        for day in days
    ]  # fmt: skip
    ingest_billing(session.connection(), str(write_focus_csv(tmp_path / "b.csv", rows)),
                   IngestOptions(source="bill"))  # fmt: skip
    _two_weeks(session)
    allocate(session)
    now = FIRST + timedelta(days=14)
    (drift,) = acceptance_drifts(session, now=now, currency="USD")
    assert drift.deployment == "d1"
    assert BROKEN - timedelta(hours=2) <= drift.change_at <= BROKEN
    assert drift.alarm_at <= BROKEN + timedelta(hours=1)
    assert (round(drift.baseline_rate, 1), drift.recent_rate < 0.3) == (0.7, True)
    # 3 days 18 hours at 4.00 an hour since; work per token 1.3 -> 1.8: 28% of it extra
    assert 60_000_000 < drift.cost_micros < 110_000_000
    alert = drift_alert(drift, now=now)
    assert "fell from 70% to" in alert.title

    add_webhook(session, name="ops", url="http://127.0.0.1:9/hook", now=now)
    first = check_everything(session, now=now, settings=Settings())
    again = check_everything(session, now=now + timedelta(minutes=15), settings=Settings())
    assert (first.drift_alerts, again.drift_alerts) == (1, 0)


def test_a_steady_deployment_raises_nothing(session):
    register(session)
    rng = random.Random(6)
    rows = [
        usage_record(
            arrived=FIRST + timedelta(hours=hour, minutes=10 * n),
            draft_tokens=100,
            accepted_tokens=max(0, min(100, round(100 * rng.gauss(0.7, 0.04)))),
        )
        for hour in range(14 * 24)
        for n in range(4)
    ]
    insert_usage(session.connection(), rows)
    assert acceptance_drifts(session, now=FIRST + timedelta(days=14), currency="USD") == []
