"""Calendar months as half-open UTC periods."""

from datetime import UTC, datetime


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """``[start, end)`` of a ``YYYY-MM`` month in UTC.

    Raises:
        ValueError: If ``month`` is not ``YYYY-MM``.
    """
    try:
        start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"month must be YYYY-MM, got {month!r}") from None
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start, end


def next_month(month: str) -> str:
    return f"{month_bounds(month)[1]:%Y-%m}"


def month_of(instant: datetime) -> str:
    return f"{instant:%Y-%m}"
