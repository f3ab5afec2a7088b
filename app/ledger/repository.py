"""Which allocation run is the ledger of record: the one home of the current-run lookups.

Each month has at most one current run; re-running an open month replaces it. Ad-hoc windows
have runs of their own, current per window, which are previews and never the ledger of
record.
"""

from datetime import datetime

from sqlalchemy import Select, select
from sqlalchemy.orm import Session

from app.domain.errors import Conflict
from app.domain.ledger import RunStatus
from app.models import AllocationRun

_CURRENT = AllocationRun.status == RunStatus.current


def current_run_id(session: Session, month: str) -> int | None:
    """The id of the month's current run, or None if the month was never allocated."""
    return session.scalar(select(AllocationRun.id).where(AllocationRun.month == month, _CURRENT))


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


class EntriesInStore(Conflict):
    """A report that reads entries from the database was asked about a month whose entries
    are in a Parquet store."""


def refuse_store_runs(
    session: Session,
    report: str,
    *,
    run_id: int | None = None,
    window: tuple[datetime, datetime] | None = None,
) -> None:
    """Refuse, naming the month and store, when ``report`` (which reads entries from the
    database only) would cover a current month run kept in a Parquet store: the run's
    ``run_id``, or runs overlapping ``window``. Better an error than a month that reads as
    zero.

    Raises:
        EntriesInStore: If it would.
    """
    query = select(AllocationRun.month, AllocationRun.store_uri).where(
        AllocationRun.store_uri.is_not(None)
    )
    if run_id is not None:
        query = query.where(AllocationRun.id == run_id)
    else:
        query = query.where(_CURRENT, AllocationRun.month.is_not(None))
    if window is not None:
        query = query.where(
            AllocationRun.window_start < window[1], AllocationRun.window_end > window[0]
        )
    found = session.execute(query.limit(1)).first()
    if found is not None:
        raise EntriesInStore(
            f"{report} reads ledger entries from the database, and {found[0]}'s are in the "
            f"Parquet store {found[1]}; reconcile, costs and the chargeback exports read stores"
        )


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
