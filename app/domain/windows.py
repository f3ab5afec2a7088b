"""Query windows in OpenCost's grammar, and the steps that cut them into buckets.

A window is a half-open UTC interval ``[start, end)``. The grammar (case-insensitive):

==========================  =========================================================
``2026-11``                 that calendar month
``2026-11-05``              that UTC day
``today``, ``yesterday``    the UTC day containing ``now``, or the one before
``week``, ``lastweek``      the ISO week (Monday 00:00 UTC) containing ``now``, or the one before
``month``, ``lastmonth``    the calendar month containing ``now``, or the one before
``30m``, ``12h``, ``7d``,   the duration ending at ``now`` (minutes, hours, days, weeks)
``2w``
``START,END``               two RFC 3339 instants with a zone (``Z`` or ``+02:00``), or two
                            unix timestamps in seconds
==========================  =========================================================
"""

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from app.domain.errors import InvalidInput
from app.domain.periods import Month

MAX_WINDOW = timedelta(days=3 * 366)
"""Longest window accepted: a query over more is almost certainly a typo."""

_DURATION = re.compile(r"^(\d{1,6})([mhdw])$")
_MONTH = re.compile(r"^(\d{4})-(\d{2})$")
_DAY = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_SPACED_OFFSET = re.compile(r"(?<=\d) (\d{2}:?\d{2})$")
_UNIX = re.compile(r"^-?\d{1,12}(\.\d+)?$")
_UNITS = {
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
    "w": timedelta(weeks=1),
}

GRAMMAR = (
    "YYYY-MM, YYYY-MM-DD, today, yesterday, week, lastweek, month, lastmonth, a "
    "duration such as 30m, 12h, 7d or 2w, or START,END as RFC 3339 instants with a "
    "zone or unix seconds"
)


class InvalidWindow(InvalidInput):
    """A window expression that the grammar does not accept."""


class Step(StrEnum):
    """Bucket size for time series."""

    hour = "hour"
    day = "day"
    month = "month"


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """A half-open UTC interval ``[start, end)``."""

    start: datetime
    end: datetime

    @property
    def month(self) -> Month | None:
        """The calendar month when the window is exactly one, else None."""
        start = self.start
        if start != month_floor(start) or self.end != add_months(start, 1):
            return None
        return Month.of(start)

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


def parse_window(text: str, *, now: datetime) -> TimeWindow:
    """Parse a window expression (see the module docstring) relative to ``now``.

    Args:
        text: The expression, e.g. ``2026-11``, ``7d`` or ``2026-11-01T00:00:00Z,2026-11-08T00:00:00Z``.
        now: The current instant; must be timezone-aware.

    Returns:
        The window, in UTC.

    Raises:
        InvalidWindow: If the expression is not in the grammar, names an impossible date,
            is empty or reversed, or is longer than :data:`MAX_WINDOW`.
    """
    if now.tzinfo is None:
        raise InvalidWindow("now must be timezone-aware")
    now = now.astimezone(UTC)
    expression = text.strip().lower()
    if not expression:
        raise InvalidWindow(f"window is empty; use {GRAMMAR}")
    window = (
        _named(expression, now)
        or _calendar(expression)
        or _duration(expression, now)
        or _pair(text.strip())
    )
    if window is None:
        raise InvalidWindow(f"cannot read window {text!r}; use {GRAMMAR}")
    if window.end <= window.start:
        raise InvalidWindow(f"window {text!r} is empty: its end is not after its start")
    if window.end - window.start > MAX_WINDOW:
        raise InvalidWindow(f"window {text!r} is longer than {MAX_WINDOW.days} days")
    return window


def _named(expression: str, now: datetime) -> TimeWindow | None:
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    week = day - timedelta(days=day.weekday())
    month = month_floor(now)
    named = {
        "today": (day, day + timedelta(days=1)),
        "yesterday": (day - timedelta(days=1), day),
        "week": (week, week + timedelta(weeks=1)),
        "lastweek": (week - timedelta(weeks=1), week),
        "month": (month, add_months(month, 1)),
        "lastmonth": (add_months(month, -1), month),
    }
    if expression not in named:
        return None
    return TimeWindow(*named[expression])


def _calendar(expression: str) -> TimeWindow | None:
    if match := _MONTH.match(expression):
        year, month = int(match[1]), int(match[2])
        if not 1 <= month <= 12:
            raise InvalidWindow(f"no month {month} in {expression!r}")
        start = datetime(year, month, 1, tzinfo=UTC)
        return TimeWindow(start, add_months(start, 1))
    if match := _DAY.match(expression):
        try:
            start = datetime(int(match[1]), int(match[2]), int(match[3]), tzinfo=UTC)
        except ValueError as exc:
            raise InvalidWindow(f"no such day {expression!r}: {exc}") from None
        return TimeWindow(start, start + timedelta(days=1))
    return None


def _duration(expression: str, now: datetime) -> TimeWindow | None:
    match = _DURATION.match(expression)
    if match is None:
        return None
    length = int(match[1]) * _UNITS[match[2]]
    if length > MAX_WINDOW:
        raise InvalidWindow(f"window {expression!r} is longer than {MAX_WINDOW.days} days")
    return TimeWindow(now - length, now)


def _pair(text: str) -> TimeWindow | None:
    parts = text.split(",")
    if len(parts) != 2:
        return None
    start, end = (_instant(part.strip()) for part in parts)
    return TimeWindow(start, end)


def _instant(text: str) -> datetime:
    # An unencoded "+02:00" in a URL query arrives as " 02:00": put the plus back.
    text = _SPACED_OFFSET.sub(r"+\1", text)
    if _UNIX.match(text):
        try:
            return datetime.fromtimestamp(float(text), UTC)
        except (OverflowError, OSError, ValueError):
            raise InvalidWindow(f"unix time {text!r} is out of range") from None
    try:
        value = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        raise InvalidWindow(
            f"{text!r} is not an RFC 3339 instant (e.g. 2026-11-01T00:00:00Z) or unix seconds"
        ) from None
    if value.tzinfo is None or "T" not in text.upper():
        raise InvalidWindow(
            f"{text!r} needs a date, a time and a zone (Z or +HH:MM), as RFC 3339 requires"
        )
    return value.astimezone(UTC)


def month_floor(instant: datetime) -> datetime:
    """Start of the calendar month containing ``instant`` (UTC)."""
    return instant.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def add_months(month_start: datetime, months: int) -> datetime:
    """``month_start`` (the first of a month) moved by ``months`` calendar months."""
    index = month_start.year * 12 + month_start.month - 1 + months
    return month_start.replace(year=index // 12, month=index % 12 + 1)


def step_floor(instant: datetime, step: Step) -> datetime:
    """Start of the ``step`` bucket containing ``instant`` (UTC)."""
    instant = instant.astimezone(UTC)
    if step is Step.hour:
        return instant.replace(minute=0, second=0, microsecond=0)
    if step is Step.day:
        return instant.replace(hour=0, minute=0, second=0, microsecond=0)
    return month_floor(instant)


def step_end(bucket_start: datetime, step: Step) -> datetime:
    """Exclusive end of the bucket that starts at ``bucket_start``."""
    if step is Step.hour:
        return bucket_start + timedelta(hours=1)
    if step is Step.day:
        return bucket_start + timedelta(days=1)
    return add_months(bucket_start, 1)


def bucket_bounds(instant: datetime, step: Step, window: TimeWindow) -> tuple[datetime, datetime]:
    """The step bucket holding ``instant``, clipped to the window."""
    start = step_floor(instant, step)
    return max(start, window.start), min(step_end(start, step), window.end)


def months_in(window: TimeWindow) -> list[str]:
    """Every ``YYYY-MM`` month the window touches, in order."""
    months: list[str] = []
    current = month_floor(window.start)
    while current < window.end:
        months.append(f"{current:%Y-%m}")
        current = add_months(current, 1)
    return months
