"""Unit costs grouped by the database agree with the pure domain on generated requests.

The database does the grouping and the session-seconds (a window over each line's sessions);
the domain's ``session_totals`` is the oracle for the union of intervals, plain sums for the
rest. Run on SQLite and PostgreSQL.
"""

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import insert
from sqlalchemy.orm import Session

from app.domain.periods import Month
from app.domain.sessions import session_totals
from app.ledger.costs import unit_costs
from app.models import UsageRecord
from tests.factories import usage_record

MONTH = Month.parse("2026-10")
START = datetime(2026, 10, 1, tzinfo=UTC)

request = st.tuples(
    st.sampled_from(["s1", "s2", "s3"]),
    st.sampled_from(["search", "ads", None]),
    st.integers(0, 60_000_000),  # arrival, microseconds after the month's start
    st.integers(-5, 20_000_000),  # duration in microseconds; zero or negative: empty
    st.integers(0, 10**12),  # GPU-ns
    st.integers(0, 500),  # completion tokens
)


def _us(value: datetime) -> int:
    return (value - START) // timedelta(microseconds=1)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(request, min_size=1, max_size=25))
def test_lines_match_the_domain(session: Session, requests: list[Any]) -> None:
    rows = []
    for session_id, team, arrived_us, duration_us, gpu_ns, completion in requests:
        arrived = START + timedelta(microseconds=arrived_us)
        row = usage_record(
            session_id=session_id, team=team, arrived=arrived, gpu_ns=gpu_ns, seconds=0
        )
        row["finished_at"] = arrived + timedelta(microseconds=duration_us)
        row["completion_tokens"] = completion
        rows.append(row)
    savepoint = session.begin_nested()
    try:
        session.execute(insert(UsageRecord), rows)
        lines = {line.key: line for line in unit_costs(session, month=MONTH, by=["team"])}
    finally:
        savepoint.rollback()

    expected: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        expected.setdefault(row["team"] or "(none)", []).append(row)
    assert set(lines) == {(team,) for team in expected}
    for team, members in expected.items():
        line = lines[(team,)]
        union_us = session_totals(
            (r["session_id"], _us(r["arrived_at"]), _us(r["finished_at"])) for r in members
        )
        assert line.requests == len(members)
        assert line.session_ns == 1000 * sum(union_us.values())
        assert line.gpu_ns == sum(r["gpu_ns"] for r in members)
        assert line.completion_tokens == sum(r["completion_tokens"] for r in members)
        assert line.effective_micros == 0  # no allocation run: no cost yet
