"""Closing months: a closed month's ledger is frozen (the database refuses changes)."""

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.allocation.restatement import billing_fingerprint
from app.domain.errors import Conflict, MonthClosed, NotFound
from app.domain.periods import Month
from app.models import AllocationRun, LedgerClosure
from app.storage.dataset_store import DatasetStore
from app.storage.run_repository import allocated_months, current_run_id, store_entries_prefix


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
    run_id = current_run_id(session, month)
    if run_id is None:
        raise MonthNotAllocated(
            f"{month} has no allocation: run `specledger allocate --month {month}` first"
        )
    closure = LedgerClosure(
        month=str(month),
        closed_at=now or datetime.now(UTC),
        run_id=run_id,
        billing_fingerprint=billing_fingerprint(session, month.start),
        store_files=session.scalar(
            select(AllocationRun.store_files).where(AllocationRun.id == run_id)
        ),
    )
    session.add(closure)
    session.flush()
    return closure


def closed_months(session: Session) -> list[LedgerClosure]:
    """Every closed month, oldest first."""
    return list(session.scalars(select(LedgerClosure).order_by(LedgerClosure.month)))


@dataclass(frozen=True, slots=True)
class Verification:
    store_uri: str
    files: int
    changed: list[str]
    missing: list[str]

    @property
    def ok(self) -> bool:
        return not self.changed and not self.missing


def verify_closed_month(
    session: Session, month: Month, *, s3_endpoint_url: str | None = None
) -> Verification:
    """Hash a closed month's entry files again and compare them with the closure's record.

    Raises:
        NotFound: If the month is not closed.
        Conflict: If its run keeps its entries in the database (the database's triggers
            guard those).
    """
    closure = session.get(LedgerClosure, str(month))
    if closure is None:
        raise NotFound(f"{month} is not closed")
    store_uri = session.scalar(
        select(AllocationRun.store_uri).where(AllocationRun.id == closure.run_id)
    )
    if store_uri is None or closure.store_files is None:
        raise Conflict(
            f"{month}'s entries are in the database, whose triggers refuse changes to a "
            "closed month; there are no store files to verify"
        )
    store = DatasetStore.at(store_uri, s3_endpoint_url=s3_endpoint_url)
    present = set(store.files(store_entries_prefix(closure.month, closure.run_id)))
    recorded = closure.store_files
    missing = sorted(p for p in recorded if p not in present)
    now = store.checksums(p for p in recorded if p in present)
    changed = sorted(p for p, digest in now.items() if digest != recorded[p])
    return Verification(store_uri, len(recorded), changed, missing)


class NothingAllocated(NotFound):
    """A report asked for a month that was never allocated."""


def check_allocated(session: Session, month: Month) -> None:
    """Refuse a report of a month that has no allocation (it would be empty, not zero),
    naming the months that have one.

    Raises:
        NothingAllocated: The month has no current allocation run.
    """
    if current_run_id(session, month) is not None:
        return
    months = allocated_months(session)
    have = f"allocated months: {', '.join(months)}" if months else "no month is allocated yet"
    raise NothingAllocated(
        f"{month} has no allocation ({have}); run `specledger allocate --month {month}`"
    )
