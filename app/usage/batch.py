"""Batch usage sources: usage read in windows from external accounting (Slurm's ``sacct`` is
the first, :class:`app.slurm.ingest.SacctSource`), stored here the one way.

A source resolves where a read without a window starts (its resume state), reads a window
into a :class:`UsageBatch` (keeping its own detail, e.g. Slurm's job rows, as it goes), and
records the read once the batch is stored. A new source is one class implementing
:class:`BatchUsageSource` in its feature; :func:`ingest_window` stores what it yields.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import delete
from sqlalchemy.orm import Session

from app.domain.errors import Invalid
from app.domain.usage import UsageEvent
from app.models import UsageRecord
from app.usage.repository import insert_usage

Window = tuple[datetime, datetime]
"""A read's ``[start, end)``, aware UTC."""


@dataclass(frozen=True, slots=True)
class UsageBatch:
    """What one read of a window yields."""

    final: Sequence[UsageEvent]
    """Records of ended work: stored once (event ids already stored are kept)."""
    provisional: Sequence[UsageEvent] = ()
    """Records of work still running, accrued to the end of the read: replaced later."""
    replaces: Sequence[str] = ()
    """Event ids stored by earlier reads that this batch's records replace."""


class BatchUsageSource(Protocol):
    @property
    def name(self) -> str: ...

    def resume_point(self, session: Session, *, now: datetime) -> datetime:
        """Where a read without a window starts."""
        ...

    def read(self, session: Session, window: Window, *, now: datetime) -> UsageBatch:
        """Read the window's accounting; a bad input raises and changes nothing."""
        ...

    def done(self, session: Session, window: Window, *, stored: int, now: datetime) -> None:
        """Record the read (the resume state), ``stored`` final records being new."""
        ...


def ingest_window(
    session: Session,
    source: BatchUsageSource,
    *,
    since: datetime | None,
    until: datetime | None,
    now: datetime,
) -> Window:
    """Read ``[since, until)`` (from the source's resume point, up to ``now``, by default)
    and store it; returns the window read."""
    start = since if since is not None else source.resume_point(session, now=now)
    end = until if until is not None else now
    if end <= start:
        raise Invalid(f"the window is empty: {start.isoformat()} to {end.isoformat()}")
    store_read(session, source, (start, end), now=now)
    return start, end


def store_read(session: Session, source: BatchUsageSource, window: Window, *, now: datetime) -> int:
    """Read ``window`` from ``source``, store its batch in the caller's transaction and
    record the read; returns how many final records were new."""
    batch = source.read(session, window, now=now)
    replaced = list(batch.replaces)
    for first in range(0, len(replaced), 500):
        session.execute(
            delete(UsageRecord).where(UsageRecord.event_id.in_(replaced[first : first + 500]))
        )
    stored = insert_usage(session.connection(), batch.final)
    insert_usage(session.connection(), batch.provisional)
    source.done(session, window, stored=stored, now=now)
    return stored
