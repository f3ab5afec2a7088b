"""Closing months: a closed month's ledger is frozen (the database refuses changes)."""

from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from app.allocation.restatement import billing_fingerprint
from app.domain.errors import Conflict, MonthClosed
from app.domain.periods import month_bounds
from app.models import AllocationRun, LedgerClosure


class MonthNotAllocated(Conflict):
    """The month has no allocation run yet, so there is nothing to close."""


def close_month(engine: Engine, month: str, *, now: datetime | None = None) -> LedgerClosure:
    """Freeze a month's ledger, recording the billing it was closed on.

    Raises:
        MonthClosed: If the month is already closed.
        MonthNotAllocated: If it has no allocation run.
    """
    start, _ = month_bounds(month)
    with Session(engine, expire_on_commit=False) as session, session.begin():
        if session.get(LedgerClosure, month):
            raise MonthClosed(f"{month} is already closed")
        run_id = session.scalar(
            select(AllocationRun.id).where(
                AllocationRun.month == month, AllocationRun.status == "current"
            )
        )
        if run_id is None:
            raise MonthNotAllocated(
                f"{month} has no allocation: run `specledger allocate --month {month}` first"
            )
        closure = LedgerClosure(
            month=month,
            closed_at=now or datetime.now(UTC),
            run_id=run_id,
            billing_fingerprint=billing_fingerprint(session, start),
        )
        session.add(closure)
    return closure


def closed_months(engine: Engine) -> list[LedgerClosure]:
    with Session(engine, expire_on_commit=False) as session:
        return list(session.scalars(select(LedgerClosure).order_by(LedgerClosure.month)))
