"""The errors SpecLedger raises on purpose: one base, a stable code and a status for each.

Every feature error derives from one of the classes here and says, in its class attributes,
which machine-readable ``code`` it has and which HTTP status it maps to. The two edges
translate them once each: ``app.errors`` renders them as JSON error bodies, and the CLI
(``app.cli._support.user_errors``) prints the message and exits with status 2. Nothing in
between catches an error only to re-raise it as another.

Hierarchy (HTTP status and code in brackets):

* SpecLedgerError [500 internal_error]
  - Invalid [422 invalid_input]              input that cannot be used as given
    - EmptyAllocationBasis, NoBreakeven, InvalidInput (pure-code rule violations)
    - feature errors: billing input, usage input, sweep files, tier catalogs, ...
  - Unauthorized [401 unauthorized]          no API key, or an unknown or revoked one
  - Forbidden [403 forbidden]                the key's scope does not allow the request
  - NotFound [404 not_found]
  - Conflict [409 conflict]
    - MonthClosed [409 month_closed]         the ledger month is closed
  - Unavailable [503 unavailable]            a process or service the request needs is down

The classes carry numbers only; nothing here knows FastAPI or Typer.
"""

from collections.abc import Sequence
from typing import ClassVar


class SpecLedgerError(Exception):
    """Base of every error SpecLedger raises on purpose.

    Args:
        message: What went wrong and, where it can, what to do; shown to people as is.
        fields: ``(field, message)`` pairs naming the bad inputs, e.g. ``("query.window", ...)``.
    """

    code: ClassVar[str] = "internal_error"
    """Stable identifier, for programs."""
    status: ClassVar[int] = 500
    """The HTTP status the API answers with."""

    def __init__(self, message: str, *, fields: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.message = message
        self.fields = tuple(fields)


class Invalid(SpecLedgerError):
    """Input that cannot be used as given; nothing was changed."""

    code = "invalid_input"
    status = 422


class Unauthorized(SpecLedgerError):
    code = "unauthorized"
    status = 401


class Forbidden(SpecLedgerError):
    code = "forbidden"
    status = 403


class NotFound(SpecLedgerError):
    code = "not_found"
    status = 404


class Conflict(SpecLedgerError):
    code = "conflict"
    status = 409


class MonthClosed(Conflict):
    """The month is closed; its ledger cannot change."""

    code = "month_closed"


class Unavailable(SpecLedgerError):
    """A process or service the request needs (database, vLLM engine) is not reachable."""

    code = "unavailable"
    status = 503


class DomainError(Invalid):
    """A rule violation detected by pure code."""


class EmptyAllocationBasis(DomainError):
    """An amount had to be split but no key had a positive weight."""


class NoBreakeven(DomainError):
    """Two cost or throughput curves do not cross in the range asked about."""


class InvalidInput(DomainError):
    """Input data cannot be used as given (too few points, NaN, negative values...)."""
