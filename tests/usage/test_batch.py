"""A batch usage source's read is stored the one way (app.usage.batch): the records it
replaces go, its final records are counted once, its provisional ones are kept, and the
read is recorded with the count; an empty window is refused before anything is read."""

from dataclasses import dataclass, field
from datetime import datetime

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.errors import Invalid
from app.domain.usage import UsageEvent
from app.models import UsageRecord
from app.usage.batch import UsageBatch, Window, ingest_window, store_read
from tests.factories import at, usage_record


def _event(event_id: str) -> UsageEvent:
    return UsageEvent(**usage_record(arrived=at(0, 5), event_id=event_id))


@dataclass
class _Source:
    batch: UsageBatch
    name: str = "test"
    reads: list[Window] = field(default_factory=list)
    recorded: list[int] = field(default_factory=list)

    def resume_point(self, session: Session, *, now: datetime) -> datetime:
        return at(0)

    def read(self, session: Session, window: Window, *, now: datetime) -> UsageBatch:
        self.reads.append(window)
        return self.batch

    def done(self, session: Session, window: Window, *, stored: int, now: datetime) -> None:
        self.recorded.append(stored)


def _stored(session: Session) -> list[str]:
    return sorted(session.scalars(select(UsageRecord.event_id)))


def test_a_read_replaces_then_stores_and_records_the_new_count(session: Session) -> None:
    first = _Source(UsageBatch(final=[_event("done-1")], provisional=[_event("accrued-1")]))
    assert ingest_window(session, first, since=None, until=at(2), now=at(3)) == (at(0), at(2))
    assert first.recorded == [1]
    again = _Source(
        UsageBatch(
            final=[_event("done-1"), _event("done-2")],
            provisional=[_event("accrued-2")],
            replaces=["accrued-1"],
        )
    )
    assert store_read(session, again, (at(2), at(4)), now=at(4)) == 1
    assert again.recorded == [1]
    assert _stored(session) == ["accrued-2", "done-1", "done-2"]


def test_an_empty_window_is_refused_before_the_source_reads(session: Session) -> None:
    source = _Source(UsageBatch(final=[_event("never")]))
    with pytest.raises(Invalid, match="the window is empty"):
        ingest_window(session, source, since=at(2), until=at(2), now=at(3))
    assert (source.reads, _stored(session)) == ([], [])
