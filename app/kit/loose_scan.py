"""The distinct values of an indexed column by a loose index scan: one index seek per
distinct value (the next value after the last one seen), so the cost grows with the number
of values, not of rows, where a plain DISTINCT reads every row."""

from sqlalchemy import text
from sqlalchemy.orm import Session

_LOOSE_SCAN = """
    WITH RECURSIVE seen(value) AS (
        SELECT MIN({column}) FROM {table}
        UNION ALL
        SELECT (SELECT MIN(t.{column}) FROM {table} t WHERE t.{column} > seen.value)
        FROM seen WHERE seen.value IS NOT NULL
    )
    SELECT value FROM seen WHERE value IS NOT NULL
"""


def distinct_values(session: Session, table: str, column: str) -> list[str]:
    """The non-null values of ``table.column`` in order; the column must lead an index.
    ``table`` and ``column`` are the code's own identifiers, never input."""
    if not (table.isidentifier() and column.isidentifier()):
        raise ValueError(f"not an identifier: {table}.{column}")
    return list(session.scalars(text(_LOOSE_SCAN.format(table=table, column=column))))
