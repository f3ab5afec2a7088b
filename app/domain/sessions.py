"""Session-seconds: how long a session had at least one request in flight (DESIGN.md).

A session's time is the length of the union of its requests' half-open intervals
``[start, end)``. Times are integers in one unit chosen by the caller (nanoseconds,
microseconds); results are in the same unit. An interval with ``end <= start`` (a request
that finished at once, or clock jitter that put its end first) is empty and adds nothing.
"""

from collections.abc import Hashable, Iterable
from typing import TypeVar

__all__ = ["session_totals", "union_length"]

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
