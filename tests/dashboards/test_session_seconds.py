"""Session-seconds per hour computed by the database (gaps and islands in SQL) equal a
plain Python union of each session's intervals cut at hour boundaries, on SQLite and
PostgreSQL, for generated requests that overlap, touch, cross hours and last no time."""

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Engine, delete

from app.domain.ledger import CostLabel
from app.models import UsageRecord
from dashboards import data
from tests.factories import insert_usage, usage_record

START = datetime(2026, 10, 1, tzinfo=UTC)
HOUR_US = 3_600_000_000
MONTH_US = 31 * 24 * HOUR_US

requests = st.lists(
    st.tuples(
        st.sampled_from(["s1", "s2", "s3"]),
        st.sampled_from(["search", "ads", None]),
        st.integers(-HOUR_US, MONTH_US - 1),  # arrival (some in September: not counted)
        st.one_of(st.just(0), st.integers(1, 3 * HOUR_US)),  # duration
    ),
    max_size=25,
)


def _expected(rows: list[tuple[str, str | None, int, int]]) -> dict[tuple[int, str], float]:
    """The union of each session's intervals, cut at hours, in plain Python."""
    by_session: dict[tuple[str | None, str], list[tuple[int, int]]] = defaultdict(list)
    for session, team, arrived, seconds in rows:
        if 0 <= arrived < MONTH_US and seconds > 0:
            by_session[(team, session)].append((arrived, arrived + seconds))
    covered: dict[tuple[int, str], float] = defaultdict(float)
    for (team, _), spans in by_session.items():
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in merged:
            hour = start // HOUR_US
            while hour * HOUR_US < end:
                piece = min(end, (hour + 1) * HOUR_US) - max(start, hour * HOUR_US)
                covered[(hour, team or CostLabel.no_team)] += piece / 1e6
                hour += 1
    return dict(covered)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rows=requests)
def test_the_database_s_session_seconds_equal_a_python_union(
    engine: Engine, rows: list[tuple[str, str | None, int, int]]
) -> None:
    records = [
        usage_record(
            session_id=session,
            team=team,
            arrived=START + timedelta(microseconds=arrived),
            seconds=duration / 1e6,
        )
        for session, team, arrived, duration in rows
    ]
    try:
        if records:
            insert_usage(engine, records)
        frame = data.session_seconds_by_hour(engine, month="2026-10")
    finally:
        with engine.begin() as conn:
            conn.execute(delete(UsageRecord))
    expected = _expected(rows)
    if frame.empty:
        assert expected == {}
        return
    hours = ((frame["period_start"] - pd.Timestamp(START)) // pd.Timedelta(hours=1)).tolist()
    found = dict(
        zip(zip(hours, frame["team"].tolist(), strict=True), frame["session_seconds"], strict=True)
    )
    assert set(found) == set(expected)
    for key, seconds in expected.items():
        assert found[key] == pytest.approx(seconds, abs=1e-6)
