"""Parameters shared by the routers: windows, months, aggregates, pages, teams and ids.

Every integer and every string of a path or query that reaches the database is bounded to
what its column holds (:mod:`app.kit.schemas`), so that a larger value is a 422 naming the
parameter rather than a driver's overflow."""

import re
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Query

from app.deps import NowDep
from app.domain.ledger import Dimension
from app.domain.periods import InvalidMonth, Month
from app.domain.windows import GRAMMAR, InvalidWindow, TimeWindow, parse_window
from app.errors import InvalidParameter
from app.kit.schemas import (
    BIGINT_MAX,
    FIRST_MONTH,
    LAST_MONTH,
    NAME_MAX,
    STORABLE,
    in_calendar,
)

MAX_LIMIT = 10_000
_TAG_KEY = re.compile(r"^[\w .:/=+\-@]{1,128}$")
"""Tag keys as cloud providers allow them (AWS: letters, digits, spaces, _ . : / = + - @)."""
T = TypeVar("T")


def id_path(description: str) -> Any:
    """A path parameter naming a row by its id (ids start at 1 and fit a BIGINT)."""
    return Path(ge=1, le=BIGINT_MAX, description=description)


def id_query(description: str) -> Any:
    """A query parameter naming a row by its id (ids start at 1 and fit a BIGINT)."""
    return Query(ge=1, le=BIGINT_MAX, description=description)


def name_path(description: str, max_length: int = NAME_MAX) -> Any:
    """A path parameter matched against a name column of ``max_length`` characters."""
    return Path(max_length=max_length, pattern=STORABLE, description=description)


def name_query(description: str, max_length: int = NAME_MAX) -> Any:
    """A query parameter matched against a name column of ``max_length`` characters."""
    return Query(max_length=max_length, pattern=STORABLE, description=description)


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
        parsed = parse_window(window, now=now)
    except InvalidWindow as exc:
        raise InvalidParameter("query.window", str(exc)) from None
    except (ValueError, OverflowError):  # a day or an offset past 9999-12-31
        parsed = None
    if parsed is None or not in_calendar(parsed.start, parsed.end):
        raise InvalidParameter(
            "query.window", f"window {window!r} is not within {FIRST_MONTH} to {LAST_MONTH}"
        )
    return parsed


WindowDep = Annotated[TimeWindow, Depends(window_param)]


def month_param(
    month: Annotated[
        str,
        Query(description="A calendar month, YYYY-MM (UTC).", examples=["2026-11"], max_length=7),
    ],
) -> Month:
    try:
        parsed = Month.parse(month)
    except InvalidMonth as exc:
        raise InvalidParameter("query.month", str(exc)) from None
    if not FIRST_MONTH <= parsed <= LAST_MONTH:
        raise InvalidParameter("query.month", f"give a month from {FIRST_MONTH} to {LAST_MONTH}")
    return parsed


MonthDep = Annotated[Month, Depends(month_param)]


def optional_month_param(
    month: Annotated[
        str | None,
        Query(
            description="A calendar month, YYYY-MM (UTC); default: the newest allocated month.",
            examples=["2026-11"],
            max_length=7,
        ),
    ] = None,
) -> Month | None:
    return None if month is None else month_param(month)


OptionalMonthDep = Annotated[Month | None, Depends(optional_month_param)]


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
    offset: Annotated[
        int, Query(ge=0, le=BIGINT_MAX, description="Items to skip (see next_offset).")
    ] = 0,
) -> Page:
    return Page(limit, offset)


PageDep = Annotated[Page, Depends(page_param)]
