"""Closing months: a closed month's ledger is frozen (the database refuses changes)."""

from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.allocation.restatement import billing_fingerprint
from app.domain.errors import Conflict, MonthClosed
from app.domain.periods import Month
from app.ledger.repository import current_run_id
from app.models import LedgerClosure


class MonthNotAllocated(Conflict):
    """The month has no allocation run yet, so there is nothing to close."""


def close_month(session: Session, month: Month, *, now: datetime | None = None) -> LedgerClosure:
    """Freeze a month's ledger, recording the billing it was closed on; the month is closed
    when the caller commits.

    Raises:
        MonthClosed: If the month is already closed.
        MonthNotAllocated: If it has no allocation run.
    """
    if session.get(LedgerClosure, str(month)):
        raise MonthClosed(f"{month} is already closed")
    run_id = current_run_id(session, str(month))
    if run_id is None:
        raise MonthNotAllocated(
            f"{month} has no allocation: run `specledger allocate --month {month}` first"
        )
    closure = LedgerClosure(
        month=str(month),
        closed_at=now or datetime.now(UTC),
        run_id=run_id,
        billing_fingerprint=billing_fingerprint(session, month.start),
    )
    session.add(closure)
    session.flush()
    return closure


def closed_months(session: Session) -> list[LedgerClosure]:
    """Every closed month, oldest first."""
    return list(session.scalars(select(LedgerClosure).order_by(LedgerClosure.month)))
