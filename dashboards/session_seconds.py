"""Session-seconds per hour and team, computed by the database: one row per hour and team
comes back, never one per request.

A session's covered time is the union of its requests' intervals. The union is found
with window functions (gaps and islands): in start order, a request opens a new island
when it starts after the furthest end of the requests before it; an island runs from its
first start to its furthest end. Islands are cut at hour boundaries by joining them to
the few hour offsets they span, and the pieces are summed per hour and team. The same SQL
runs on SQLite (3.25+) and PostgreSQL.
"""

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, Subquery, case, func, literal, or_, select, union_all

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


def hourly_query(
    start: datetime, end: datetime, team: str | None, longest_span_hours: int
) -> Select[tuple[Any, ...]]:
    """Covered microseconds per (hour start in microseconds, team); islands span at most
    ``longest_span_hours`` hour boundaries."""
    islands = islands_query(start, end, team).subquery("islands")
    offsets = union_all(
        *(select(literal(k).label("k")) for k in range(longest_span_hours + 1))
    ).subquery("offsets")
    first_hour = islands.c.s // HOUR_US
    hour = (first_hour + offsets.c.k) * HOUR_US
    piece = _least(islands.c.e, hour + HOUR_US) - _greatest(islands.c.s, hour)
    pieces = (
        select(hour.label("hour_us"), islands.c.team, piece.label("us"))
        .select_from(islands)
        .join(offsets, offsets.c.k <= (islands.c.e - 1) // HOUR_US - first_hour)
        .subquery("pieces")
    )
    return select(pieces.c.hour_us, pieces.c.team, func.sum(pieces.c.us)).group_by(
        pieces.c.hour_us, pieces.c.team
    )


def longest_span_query(start: datetime, end: datetime, team: str | None) -> Select[tuple[Any, ...]]:
    """How many hour boundaries the longest island crosses."""
    islands = islands_query(start, end, team).subquery("islands")
    return select(func.coalesce(func.max((islands.c.e - 1) // HOUR_US - islands.c.s // HOUR_US), 0))
