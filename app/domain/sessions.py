"""Session-seconds: how long a session had at least one request in flight (DESIGN.md).

A session's time is the length of the union of its requests' half-open intervals
``[start, end)``. Times are integers in one unit chosen by the caller (nanoseconds,
microseconds); results are in the same unit. An interval with ``end <= start`` (a request
that finished at once, or clock jitter that put its end first) is empty and adds nothing.
"""

from collections.abc import Hashable, Iterable
from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from app.domain.errors import InvalidInput

__all__ = ["session_totals", "session_totals_arrays", "union_length"]

S = TypeVar("S", bound=Hashable)


def union_length(
    intervals: Iterable[tuple[int, int]], *, window: tuple[int, int] | None = None
) -> int:
    """Length of the union of half-open intervals.

    Args:
        intervals: ``(start, end)`` pairs; empty or reversed pairs add nothing.
        window: Optional ``(start, end)`` to clip every interval to first (e.g. a month).

    Returns:
        The covered length, at most the sum of the lengths and at least the longest one.
    """
    pairs = sorted(_clipped(intervals, window))
    covered = 0
    reach: int | None = None
    for start, end in pairs:
        if reach is None or start > reach:
            covered += end - start
            reach = end
        elif end > reach:
            covered += end - reach
            reach = end
    return covered


def session_totals(
    intervals: Iterable[tuple[S, int, int]], *, window: tuple[int, int] | None = None
) -> dict[S, int]:
    """Union length per session.

    Args:
        intervals: ``(session, start, end)`` per request.
        window: Optional ``(start, end)`` to clip every interval to first.

    Returns:
        Covered length per session, for every session seen (zero if all its intervals were
        empty).
    """
    by_session: dict[S, list[tuple[int, int]]] = {}
    for session, start, end in intervals:
        by_session.setdefault(session, []).append((start, end))
    return {session: union_length(pairs, window=window) for session, pairs in by_session.items()}


def _clipped(
    intervals: Iterable[tuple[int, int]], window: tuple[int, int] | None
) -> Iterable[tuple[int, int]]:
    for start, end in intervals:
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
        if end > start:
            yield start, end


def session_totals_arrays(
    session_index: NDArray[np.integer[Any]],
    start: NDArray[np.integer[Any]],
    end: NDArray[np.integer[Any]],
    *,
    n_sessions: int | None = None,
    window: tuple[int, int] | None = None,
) -> NDArray[np.int64]:
    """Vectorised :func:`session_totals` for many requests (one sort and a sweep).

    Each non-empty interval becomes a +1 event at its start and a -1 event at its end; events
    are sorted by session then time, and the running count (which returns to zero at the end
    of every session) marks the covered gaps between consecutive events.

    Args:
        session_index: Session of each request, in ``[0, n_sessions)``.
        start: Start of each request (int64, any unit).
        end: End of each request, same unit; ``end <= start`` is an empty interval.
        n_sessions: Number of sessions (default: ``max(session_index) + 1``).
        window: Optional ``(start, end)`` to clip every interval to first.

    Returns:
        Covered length per session, int64, shape ``(n_sessions,)``.

    Raises:
        InvalidInput: If the arrays differ in length, are not integer, or an index is out of
            range.
    """
    sessions, starts, ends = (
        _int64_vector(session_index, "session_index"),
        _int64_vector(start, "start"),
        _int64_vector(end, "end"),
    )
    if not sessions.shape == starts.shape == ends.shape:
        raise InvalidInput("session_index, start and end must have the same length")
    size = int(sessions.max()) + 1 if n_sessions is None and sessions.size else n_sessions or 0
    if sessions.size and (sessions.min() < 0 or sessions.max() >= size):
        raise InvalidInput(f"session_index outside [0, {size})")
    if window is not None:
        starts, ends = np.maximum(starts, window[0]), np.minimum(ends, window[1])
    keep = ends > starts
    sessions, starts, ends = sessions[keep], starts[keep], ends[keep]

    event_session = np.concatenate((sessions, sessions))
    event_time = np.concatenate((starts, ends))
    event_delta = np.concatenate(
        (np.ones(starts.size, dtype=np.int64), np.full(ends.size, -1, dtype=np.int64))
    )
    order = np.lexsort((event_time, event_session))
    event_session, event_time = event_session[order], event_time[order]
    in_flight = np.cumsum(event_delta[order])
    # Between event k and k+1 the session of event k is covered iff its count is positive;
    # the count is zero after a session's last event, so no gap spans two sessions.
    gaps = np.diff(event_time) * (in_flight[:-1] > 0)
    totals = np.zeros(size, dtype=np.int64)
    np.add.at(totals, event_session[:-1], gaps)
    return totals


def _int64_vector(array: NDArray[np.integer[Any]], name: str) -> NDArray[np.int64]:
    values = np.asarray(array)
    if values.ndim != 1:
        raise InvalidInput(f"{name} must be one-dimensional, got shape {values.shape}")
    if values.size and not np.issubdtype(values.dtype, np.integer):
        raise InvalidInput(f"{name} must hold integers, got {values.dtype}")
    return values.astype(np.int64, copy=False)
