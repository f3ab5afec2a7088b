"""Calendar months as a value type: parsed once where a month comes in (a CLI option, a query
parameter), then passed around as a :class:`Month` with its half-open UTC bounds."""

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Self

from app.domain.errors import InvalidInput

_MONTH = re.compile(r"^(\d{4})-(\d{2})$")


class InvalidMonth(InvalidInput):
    """Text that is not a ``YYYY-MM`` month."""


@dataclass(frozen=True, slots=True, order=True)
class Month:
    """A calendar month in UTC: ``[start, end)``, written ``YYYY-MM``.

    ``str(month)`` is the form stored in the ledger (``AllocationRun.month``,
    ``LedgerEntry.booked_month``, ``LedgerClosure.month``) and shown on the wire.
    """

    year: int
    number: int
    """1 for January ... 12 for December."""

    def __post_init__(self) -> None:
        if not (1 <= self.year <= 9998 and 1 <= self.number <= 12):
            raise InvalidMonth(
                f"month must be YYYY-MM with a month 01-12, got '{self.year:04d}-{self.number:02d}'"
            )

    @classmethod
    def parse(cls, text: str) -> Self:
        """The month ``YYYY-MM``.

        Raises:
            InvalidMonth: If ``text`` is not ``YYYY-MM`` with a month from 01 to 12.
        """
        match = _MONTH.fullmatch(text.strip()) if isinstance(text, str) else None
        if match is None:
            raise InvalidMonth(f"month must be YYYY-MM, got {text!r}")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def of(cls, instant: datetime) -> Self:
        """The month containing ``instant`` (in UTC)."""
        utc = instant.astimezone(UTC)
        return cls(utc.year, utc.month)

    @property
    def start(self) -> datetime:
        """Inclusive: the first instant of the month, UTC."""
        return datetime(self.year, self.number, 1, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """Exclusive: the first instant of the next month, UTC."""
        return self.next().start

    def next(self) -> "Month":
        return Month(self.year + self.number // 12, self.number % 12 + 1)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.number:02d}"
