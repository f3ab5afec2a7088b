"""Query parameters shared by the routers: windows, months, aggregates and pages."""

import re
from dataclasses import dataclass
from typing import Annotated, TypeVar

from fastapi import Depends, Query

from app.deps import NowDep
from app.domain.ledger import Dimension
from app.domain.periods import InvalidMonth, Month
from app.domain.windows import GRAMMAR, InvalidWindow, TimeWindow, parse_window
from app.errors import InvalidParameter

MAX_LIMIT = 10_000
_TAG_KEY = re.compile(r"^[\w .:/=+\-@]{1,128}$")
"""Tag keys as cloud providers allow them (AWS: letters, digits, spaces, _ . : / = + - @)."""
T = TypeVar("T")


def window_param(
    now: NowDep,
    window: Annotated[
        str,
        Query(
            description=f"The time window: {GRAMMAR}.",
            examples=["2026-11", "7d", "lastmonth", "2026-11-01T00:00:00Z,2026-11-08T00:00:00Z"],
            max_length=80,
        ),
    ],
) -> TimeWindow:
    try:
        return parse_window(window, now=now)
    except InvalidWindow as exc:
        raise InvalidParameter("query.window", str(exc)) from None


WindowDep = Annotated[TimeWindow, Depends(window_param)]


def month_param(
    month: Annotated[
        str,
        Query(description="A calendar month, YYYY-MM (UTC).", examples=["2026-11"], max_length=7),
    ],
) -> Month:
    try:
        return Month.parse(month)
    except InvalidMonth as exc:
        raise InvalidParameter("query.month", str(exc)) from None


MonthDep = Annotated[Month, Depends(month_param)]


def parse_dimensions(text: str, field: str) -> tuple[str, ...]:
    """A comma-separated list of dimensions (or ``tag:KEY``), in order, without repeats.

    Raises:
        InvalidParameter: On an unknown dimension, an empty tag key or an empty list.
    """
    seen: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part or part in seen:
            continue
        if part.startswith("tag:"):
            if not _TAG_KEY.match(part[4:]):
                raise InvalidParameter(
                    field,
                    f"{part!r} needs a tag key of 1-128 letters, digits, spaces or _ . : / = + - @",
                )
        elif part not in tuple(Dimension):
            raise InvalidParameter(
                field,
                f"cannot aggregate by {part!r}; use "
                f"{', '.join(Dimension)} or tag:KEY, comma-separated",
            )
        seen.append(part)
    if not seen:
        raise InvalidParameter(field, "name at least one dimension")
    return tuple(seen)


@dataclass(frozen=True, slots=True)
class Page:
    limit: int
    offset: int

    def slice(self, items: list[T]) -> list[T]:
        return items[self.offset : self.offset + self.limit]

    def next_offset(self, total: int) -> int | None:
        following = self.offset + self.limit
        return following if following < total else None


def page_param(
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT, description="Items per page.")] = 1000,
    offset: Annotated[int, Query(ge=0, description="Items to skip (see next_offset).")] = 0,
) -> Page:
    return Page(limit, offset)


PageDep = Annotated[Page, Depends(page_param)]
