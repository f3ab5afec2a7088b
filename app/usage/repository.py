"""Usage queries that write: usage records (idempotent on ``event_id``) and idle time."""

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from sqlalchemy import Connection, insert, select
from sqlalchemy.dialects import postgresql, sqlite

from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.kit.bulk import insert_new
from app.models import ReplicaIdle, UsageRecord
from app.usage.columns import USAGE_COLUMNS, json_list_text

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


def insert_usage_columns(conn: Connection, usage: pa.Table) -> int:
    """Insert usage records given as :data:`app.usage.columns.USAGE_COLUMNS`, in bulk, the
    way :func:`insert_usage` does: event ids already stored, or repeated, are skipped (the
    first kept). Runs inside the caller's transaction.

    Returns:
        How many records were new.
    """
    if usage.schema != USAGE_COLUMNS:
        raise ValueError("usage columns must be app.usage.columns.USAGE_COLUMNS")
    index = usage.schema.get_field_index("accepted_hist")
    rows = usage.set_column(index, "accepted_hist", json_list_text(usage["accepted_hist"]))
    return insert_new(conn, UsageRecord.__tablename__, rows, "event_id")


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
        stored = _stored_idle(conn, rows)
        rows = [row for row in rows if _idle_key(row) not in stored]
    if rows:
        conn.execute(insert(ReplicaIdle), rows)
    return len(rows)


def _stored_idle(conn: Connection, rows: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """The keys stored among those of ``rows``: one range query on the (deployment,
    replica, start_at) index, then matched here."""
    query = select(
        ReplicaIdle.deployment, ReplicaIdle.replica, ReplicaIdle.start_at, ReplicaIdle.end_at
    ).where(
        ReplicaIdle.deployment.in_({row["deployment"] for row in rows}),
        ReplicaIdle.start_at >= min(row["start_at"] for row in rows),
        ReplicaIdle.start_at <= max(row["start_at"] for row in rows),
    )
    wanted = {_idle_key(row) for row in rows}
    return {key for key in (tuple(found) for found in conn.execute(query)) if key in wanted}


def _idle_key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["deployment"], row["replica"], row["start_at"], row["end_at"]
