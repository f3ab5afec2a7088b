"""The Month value type: parsed once, half-open UTC bounds, YYYY-MM on the way out."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.periods import InvalidMonth, Month

months = st.builds(Month, st.integers(1, 9997), st.integers(1, 12))
NAIVE_RANGE = (datetime(1, 1, 1), datetime(9997, 12, 31))  # noqa: DTZ001 (hypothesis wants naive bounds)


@given(months)
def test_a_month_round_trips_through_its_text(month: Month) -> None:
    assert Month.parse(str(month)) == month
    assert len(str(month)) == 7


@given(months)
def test_months_tile_time_without_gaps(month: Month) -> None:
    assert month.start < month.end == month.next().start
    assert month.start.day == 1
    assert month.start.tzinfo is UTC
    assert 28 <= (month.end - month.start).days <= 31


@given(st.datetimes(min_value=NAIVE_RANGE[0], max_value=NAIVE_RANGE[1], timezones=st.just(UTC)))
def test_the_month_of_an_instant_contains_it(instant: datetime) -> None:
    month = Month.of(instant)
    assert month.start <= instant < month.end


def test_of_reads_the_instant_in_utc() -> None:
    late = datetime(2026, 11, 30, 23, 30, tzinfo=UTC)
    assert Month.of(late.astimezone(UTC).astimezone(tz=None)) == Month(2026, 11)
    assert Month.of(late + timedelta(hours=1)) == Month(2026, 12)


def test_december_rolls_over_to_january() -> None:
    assert Month.parse("2026-12").next() == Month(2027, 1)
    assert Month.parse("2026-12").end == datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "text", ["2026-13", "2026-00", "2026-1", "26-11", "2026/11", "", "november"]
)
def test_bad_months_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(InvalidMonth, match="month must be YYYY-MM"):
        Month.parse(text)


def test_months_order_by_time() -> None:
    assert sorted([Month(2027, 1), Month(2026, 12), Month(2026, 2)]) == [
        Month(2026, 2),
        Month(2026, 12),
        Month(2027, 1),
    ]
