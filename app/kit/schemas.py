"""Pydantic building blocks shared by the API's schemas."""

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.domain.money import micros_to_decimal
from app.domain.periods import Month
from app.domain.windows import TimeWindow

# What the database can hold. Every integer and every string a request passes on to a query
# or a row is bounded by these, so that a value beyond them is a 422 naming its field, never
# a driver's error (a 500).
BIGINT_MAX = 2**63 - 1
"""Largest value of a BigInteger column, and of an id: 64-bit signed on PostgreSQL and SQLite."""
INTEGER_MAX = 2**31 - 1
"""Largest value of an Integer column: 32-bit on PostgreSQL (SQLite's hold 64 bits)."""
NAME_MAX = 128
"""Longest team, cost center, deployment or replica name: their String(128) columns."""
STORABLE = r"^[^\x00]*$"
"""Pattern of text the database stores: PostgreSQL refuses NUL in text and JSON values."""
StoredText = Annotated[str, Field(pattern=STORABLE)]
"""A string that reaches the database; give its length with ``Field(max_length=...)``."""
FIRST_MONTH, LAST_MONTH = Month(1, 1), Month(9998, 11)
"""The months a window may span: each, and the month after it, is a :class:`Month`, so a
window's buckets and months never step off the calendar (``datetime`` ends with 9999)."""


def in_calendar(start: datetime, end: datetime) -> bool:
    """Whether ``[start, end)`` (aware) lies within ``FIRST_MONTH`` to ``LAST_MONTH``.
    Comparing never overflows; ``astimezone`` does at the calendar's ends."""
    return FIRST_MONTH.start <= start and end <= LAST_MONTH.end


Amount = Annotated[Decimal, Field(max_digits=30, decimal_places=6, examples=["12.500000"])]
"""Money: six decimal places, a JSON string (never a float)."""
ExactAmount = Annotated[
    Decimal, Field(max_digits=38, decimal_places=12, examples=["20.520226728990"])
]
"""Money exact to the pico, as the bill states it: twelve decimal places, a JSON string."""


class Schema(BaseModel):
    model_config = ConfigDict(from_attributes=True, extra="forbid")


class WindowRead(Schema):
    start: datetime
    """Inclusive, UTC."""
    end: datetime
    """Exclusive, UTC."""

    @classmethod
    def of(cls, window: TimeWindow) -> "WindowRead":
        return cls(start=window.start, end=window.end)


class PageMeta(Schema):
    total: int
    """Items across all pages."""
    limit: int
    offset: int
    next_offset: int | None
    """Offset of the next page; null on the last page."""


def money(micros: int) -> Decimal:
    """Integer micros as the exact decimal that goes on the wire."""
    return micros_to_decimal(micros)
