"""Which allocation run is the ledger of record: the one home of the current-run lookups.

Each month has at most one current run; re-running an open month replaces it. Ad-hoc windows
have runs of their own, current per window, which are previews and never the ledger of
record.
"""

from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.domain.ledger import RunStatus
from app.domain.periods import Month
from app.models import AllocationRun, LedgerRollup

_CURRENT = AllocationRun.status == RunStatus.current


def current_run_id(session: Session, month: Month | str) -> int | None:
    """The id of the month's current run, or None if the month was never allocated.

    A :class:`Month` is carried from where it is parsed to here, where it becomes the
    column's ``YYYY-MM``; a ``str`` is taken as already that (callers not yet moved)."""
    return session.scalar(
        select(AllocationRun.id).where(AllocationRun.month == str(month), _CURRENT)
    )


def month_currency(session: Session, month: Month) -> str | None:
    """The currency the month's current run books in (the bill's: the ledger keeps one per
    month), or None if the month was never allocated."""
    run = current_run_id(session, month)
    if run is None:
        return None
    return session.scalar(select(LedgerRollup.currency).where(LedgerRollup.run_id == run).limit(1))


def current_window_run_id(session: Session, start: datetime, end: datetime) -> int | None:
    """The id of the current run of the ad-hoc window ``[start, end)``, or None."""
    return session.scalar(
        select(AllocationRun.id).where(
            AllocationRun.month.is_(None),
            AllocationRun.window_start == start,
            AllocationRun.window_end == end,
            _CURRENT,
        )
    )


def current_run_ids() -> Select[int]:
    """The ids of every month's current run, as a subquery for
    ``LedgerEntry.run_id.in_(current_run_ids())``: the whole ledger of record."""
    return select(AllocationRun.id).where(_CURRENT, AllocationRun.month.is_not(None))


def allocated_months(session: Session) -> list[str]:
    """The months that have a current run, oldest first."""
    return sorted(
        month
        for month in session.scalars(
            select(AllocationRun.month).where(_CURRENT, AllocationRun.month.is_not(None))
        )
        if month
    )


def store_entries_prefix(month: str, run_id: int) -> str:
    """Where a run's entries live in a Parquet store (relative to the store)."""
    return f"entries/month={month}/run={run_id}"
