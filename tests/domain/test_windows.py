"""The window grammar (pure)."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.periods import Month
from app.domain.windows import (
    InvalidWindow,
    Step,
    TimeWindow,
    bucket_bounds,
    months_in,
    parse_window,
    step_end,
    step_floor,
)

NOW = datetime(2026, 12, 2, 15, 30, 12, tzinfo=UTC)  # a Wednesday


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "start", "end"),
    [
        ("2026-11", utc(2026, 11, 1), utc(2026, 12, 1)),
        ("2026-12", utc(2026, 12, 1), utc(2027, 1, 1)),
        ("2026-02-28", utc(2026, 2, 28), utc(2026, 3, 1)),
        ("today", utc(2026, 12, 2), utc(2026, 12, 3)),
        ("TODAY", utc(2026, 12, 2), utc(2026, 12, 3)),
        ("yesterday", utc(2026, 12, 1), utc(2026, 12, 2)),
        ("week", utc(2026, 11, 30), utc(2026, 12, 7)),
        ("lastweek", utc(2026, 11, 23), utc(2026, 11, 30)),
        ("month", utc(2026, 12, 1), utc(2027, 1, 1)),
        ("lastmonth", utc(2026, 11, 1), utc(2026, 12, 1)),
        ("7d", NOW - timedelta(days=7), NOW),
        ("12h", NOW - timedelta(hours=12), NOW),
        ("30m", NOW - timedelta(minutes=30), NOW),
        ("2w", NOW - timedelta(weeks=2), NOW),
        (" 7d ", NOW - timedelta(days=7), NOW),
        ("2026-11-01T00:00:00Z,2026-11-08T00:00:00Z", utc(2026, 11, 1), utc(2026, 11, 8)),
        (
            "2026-11-01T02:00:00+02:00,2026-11-01T03:00:00+02:00",
            utc(2026, 11, 1),
            utc(2026, 11, 1, 1),
        ),
        ("1793491200,1793577600", utc(2026, 11, 1), utc(2026, 11, 2)),
        # "+02:00" sent unencoded in a query string arrives as " 02:00"
        (
            "2026-11-01T02:00:00 02:00,2026-11-01T03:00:00 02:00",
            utc(2026, 11, 1),
            utc(2026, 11, 1, 1),
        ),
    ],
)
def test_parse_window_accepts_the_grammar(text: str, start: datetime, end: datetime) -> None:
    window = parse_window(text, now=NOW)
    assert (window.start, window.end) == (start, end)
    assert window.start.tzinfo is not None


def test_lastmonth_in_january_is_december() -> None:
    window = parse_window("lastmonth", now=utc(2027, 1, 15))
    assert (window.start, window.end) == (utc(2026, 12, 1), utc(2027, 1, 1))
    assert window.month == Month(2026, 12)


def test_now_in_another_zone_is_read_as_utc() -> None:
    tokyo = NOW.astimezone(timezone(timedelta(hours=9)))  # already 3 December there
    assert parse_window("today", now=tokyo).start == utc(2026, 12, 2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("bogus", "cannot read window"),
        ("2026-13", "no month 13"),
        ("2026-02-30", "no such day"),
        ("0d", "not after its start"),
        ("999999w", "longer than"),
        ("2026-11-08T00:00:00Z,2026-11-01T00:00:00Z", "not after its start"),
        ("2026-11-01T00:00:00,2026-11-08T00:00:00Z", "zone"),
        ("2026-11-01,2026-11-08", "zone"),
        ("2026-11-01T00:00:00Z,soon", "RFC 3339"),
        ("a,b,c", "cannot read window"),
        ("2000-01-01T00:00:00Z,2026-01-01T00:00:00Z", "longer than"),
    ],
)
def test_parse_window_refuses_with_a_reason(text: str, message: str) -> None:
    with pytest.raises(InvalidWindow, match=message):
        parse_window(text, now=NOW)


def test_naive_now_is_refused() -> None:
    with pytest.raises(InvalidWindow):
        parse_window("today", now=NOW.replace(tzinfo=None))


def test_month_property_only_for_calendar_months() -> None:
    assert parse_window("2026-11", now=NOW).month == Month(2026, 11)
    assert parse_window("7d", now=NOW).month is None
    assert parse_window("2026-11-01", now=NOW).month is None


def test_steps_and_buckets() -> None:
    instant = utc(2026, 11, 30, 23, 59)
    assert step_floor(instant, Step.hour) == utc(2026, 11, 30, 23)
    assert step_floor(instant, Step.day) == utc(2026, 11, 30)
    assert step_floor(instant, Step.month) == utc(2026, 11, 1)
    assert step_end(utc(2026, 12, 1), Step.month) == utc(2027, 1, 1)
    window = TimeWindow(utc(2026, 11, 15, 12), utc(2026, 12, 10))
    assert bucket_bounds(utc(2026, 11, 20), Step.month, window) == (window.start, utc(2026, 12, 1))
    assert bucket_bounds(utc(2026, 12, 3), Step.month, window) == (utc(2026, 12, 1), window.end)
    assert months_in(window) == ["2026-11", "2026-12"]


# hypothesis wants naive bounds; the values it draws are aware (timezones=UTC)
@given(
    st.datetimes(
        min_value=datetime(2000, 1, 1),  # noqa: DTZ001
        max_value=datetime(2090, 1, 1),  # noqa: DTZ001
        timezones=st.just(UTC),
    ),
    st.sampled_from(list(Step)),
)
def test_every_instant_lies_in_its_bucket(instant: datetime, step: Step) -> None:
    start = step_floor(instant, step)
    assert start <= instant < step_end(start, step)
