"""Session-seconds per hour and team, computed by the database: one row per hour and team
comes back, never one per request.

A session's covered time is the union of its requests' intervals. The union is found
with window functions (gaps and islands): in start order, a request opens a new island
when it starts after the furthest end of the requests before it; an island runs from its
first start to its furthest end. Islands are cut at hour boundaries by a recursive step
(one row per hour an island touches), and the pieces are summed per hour and team. The same
SQL runs on SQLite (3.25+) and PostgreSQL, and sorts the requests once.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Subquery, case, func, or_, select

from app.db import epoch_us
from app.models import UsageRecord

HOUR_US = 3_600_000_000


def _least(a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
    return case((a < b, a), else_=b)


def _greatest(a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
    return case((a > b, a), else_=b)


def islands(requests: Subquery, keys: Sequence[str]) -> Select[tuple[Any, ...]]:
    """The union of the intervals ``[s, e)`` of ``requests`` (a subquery with the columns
    ``keys``, ``s`` and ``e``, in microseconds) per value of ``keys``: one row per covered
    stretch, with the keys, ``s`` and ``e``."""
    r = requests
    key_columns = [r.c[k] for k in keys]
    reach = func.max(r.c.e).over(partition_by=key_columns, order_by=[r.c.s, r.c.e], rows=(None, -1))
    reached = select(r, reach.label("reach")).subquery("reached")
    opens = case((or_(reached.c.reach.is_(None), reached.c.s > reached.c.reach), 1), else_=0)
    numbered = select(
        *(reached.c[k] for k in keys),
        reached.c.s,
        reached.c.e,
        func.sum(opens)
        .over(
            partition_by=[reached.c[k] for k in keys],
            order_by=[reached.c.s, reached.c.e],
            rows=(None, 0),
        )
        .label("island"),
    ).subquery("numbered")
    grouping = [*(numbered.c[k] for k in keys), numbered.c.island]
    return select(
        *(numbered.c[k] for k in keys),
        func.min(numbered.c.s).label("s"),
        func.max(numbered.c.e).label("e"),
    ).group_by(*grouping)


def islands_query(start: datetime, end: datetime, team: str | None) -> Select[tuple[Any, ...]]:
    """Each session's covered stretches (team, session, s, e in microseconds) for the
    requests arriving in ``[start, end)``."""
    requests = select(
        UsageRecord.team.label("team"),
        UsageRecord.session_id.label("session"),
        *request_span(),
    ).where(*arrived_in(start, end))
    if team is not None:
        requests = requests.where(UsageRecord.team == team)
    return islands(requests.subquery("r"), ["team", "session"])


def request_span() -> tuple[ColumnElement[Any], ColumnElement[Any]]:
    """A request's ``s`` and ``e``: arrival and finish in microseconds."""
    return (
        epoch_us(UsageRecord.arrived_at).label("s"),
        epoch_us(UsageRecord.finished_at).label("e"),
    )


def arrived_in(start: datetime, end: datetime) -> list[ColumnElement[bool]]:
    """Requests arriving in ``[start, end)`` that took some time."""
    return [
        UsageRecord.arrived_at >= start,
        UsageRecord.arrived_at < end,
        UsageRecord.finished_at > UsageRecord.arrived_at,
    ]


def hourly_query(start: datetime, end: datetime, team: str | None) -> Select[tuple[Any, ...]]:
    """Covered microseconds per (hour start in microseconds, team), in one pass over the
    requests: each island is cut into its hours by a recursive step that adds a row only
    for an island that runs past the end of the hour before."""
    islands = islands_query(start, end, team).cte("islands")
    first_hour = (islands.c.s // HOUR_US) * HOUR_US
    pieces = select(islands.c.team, islands.c.s, islands.c.e, first_hour.label("hour_us")).cte(
        "pieces", recursive=True
    )
    pieces = pieces.union_all(
        select(
            pieces.c.team, pieces.c.s, pieces.c.e, (pieces.c.hour_us + HOUR_US).label("hour_us")
        ).where(pieces.c.hour_us + HOUR_US < pieces.c.e)
    )
    piece = _least(pieces.c.e, pieces.c.hour_us + HOUR_US) - _greatest(pieces.c.s, pieces.c.hour_us)
    return select(pieces.c.hour_us, pieces.c.team, func.sum(piece)).group_by(
        pieces.c.hour_us, pieces.c.team
    )
