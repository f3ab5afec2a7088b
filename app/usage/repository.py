"""Usage queries that write: usage records (idempotent on ``event_id``) and idle time."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, and_, insert, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.models import ReplicaIdle, UsageRecord

_ROWS_PER_STATEMENT = 500
"""28 columns x 500 rows stays under SQLite's 32,766 bound parameters."""


def insert_usage(conn: Connection, events: Sequence[UsageEvent]) -> int:
    """Insert usage records, skipping event ids already stored (or repeated in ``events``).

    Runs inside the caller's transaction.

    Returns:
        How many records were new.

    Raises:
        NotImplementedError: On a database other than PostgreSQL or SQLite.
    """
    dialect = conn.dialect.name
    if dialect == "postgresql":
        dialect_insert: Any = postgresql.insert
    elif dialect == "sqlite":
        dialect_insert = sqlite.insert
    else:
        raise NotImplementedError(f"usage records need PostgreSQL or SQLite, not {dialect}")
    unique = list({event.event_id: event for event in reversed(events)}.values())[::-1]
    inserted = 0
    for start in range(0, len(unique), _ROWS_PER_STATEMENT):
        rows = [event.to_row() for event in unique[start : start + _ROWS_PER_STATEMENT]]
        statement = (
            dialect_insert(UsageRecord)
            .values(rows)
            .on_conflict_do_nothing(index_elements=["event_id"])
            .returning(UsageRecord.event_id)
        )
        inserted += len(conn.execute(statement).all())
    return inserted


def insert_idle(
    conn: Connection, events: Sequence[ReplicaIdleEvent], *, skip_existing: bool = False
) -> int:
    """Insert idle-time records inside the caller's transaction.

    Args:
        conn: The connection.
        events: The records.
        skip_existing: Leave out records whose deployment, replica and window are already
            stored (for reloading a JSONL log; ``replica_idle`` has no unique key).

    Returns:
        How many records were inserted.
    """
    rows = [event.to_row() for event in events]
    if skip_existing and rows:
        stored: set[tuple[Any, ...]] = set()
        for start in range(0, len(rows), _ROWS_PER_STATEMENT):
            chunk = rows[start : start + _ROWS_PER_STATEMENT]
            match = or_(*(
                and_(ReplicaIdle.deployment == row["deployment"],
                     ReplicaIdle.replica == row["replica"],
                     ReplicaIdle.start_at == row["start_at"],
                     ReplicaIdle.end_at == row["end_at"])
                for row in chunk
            ))  # fmt: skip
            query = select(ReplicaIdle.deployment, ReplicaIdle.replica, ReplicaIdle.start_at,
                           ReplicaIdle.end_at).where(match)  # fmt: skip
            stored.update(tuple(found) for found in conn.execute(query))
        rows = [row for row in rows if _idle_key(row) not in stored]
    if rows:
        conn.execute(insert(ReplicaIdle), rows)
    return len(rows)


def _idle_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["deployment"], row["replica"], row["start_at"], row["end_at"]
