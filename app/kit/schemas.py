"""Pydantic building blocks shared by the API's schemas."""

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from app.domain.money import micros_to_decimal
from app.domain.windows import TimeWindow

Amount = Annotated[Decimal, Field(max_digits=30, decimal_places=6, examples=["12.500000"])]
"""Money: six decimal places, a JSON string (never a float)."""


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
