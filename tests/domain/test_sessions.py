import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.errors import InvalidInput
from app.domain.sessions import session_totals, session_totals_arrays, union_length

TIME = st.integers(-50, 200)
INTERVALS = st.lists(st.tuples(TIME, TIME), max_size=20)
WINDOW = st.none() | st.tuples(st.integers(-60, 100), st.integers(0, 220))


def _covered_units(intervals: list[tuple[int, int]], window: tuple[int, int] | None = None) -> int:
    """Reference: count the unit cells [t, t+1) covered by some interval."""
    cells: set[int] = set()
    for start, end in intervals:
        if window is not None:
            start, end = max(start, window[0]), min(end, window[1])
        cells.update(range(start, end))
    return len(cells)


class TestUnionLength:
    @settings(deadline=None)
    @given(intervals=INTERVALS, window=WINDOW)
    def test_union_equals_covered_cells(self, intervals, window):
        assert union_length(intervals, window=window) == _covered_units(intervals, window)

    @settings(deadline=None)
    @given(intervals=INTERVALS)
    def test_union_between_longest_and_sum(self, intervals):
        lengths = [max(end - start, 0) for start, end in intervals]
        assert max(lengths, default=0) <= union_length(intervals) <= sum(lengths)

    def test_union_half_open_intervals_touching(self):
        assert union_length([(0, 10), (10, 20)]) == 20
        assert union_length([(0, 10), (5, 8), (12, 15)]) == 13
        assert union_length([(5, 5), (9, 3)]) == 0
        assert union_length([(0, 100)], window=(40, 60)) == 20


class TestSessionTotals:
    @settings(deadline=None)
    @given(rows=st.lists(st.tuples(st.sampled_from("abc"), TIME, TIME), max_size=30))
    def test_totals_per_session(self, rows):
        totals = session_totals(rows)
        assert set(totals) == {s for s, _, _ in rows}
        for session, total in totals.items():
            assert total == _covered_units([(a, b) for s, a, b in rows if s == session])


class TestSessionTotalsArrays:
    @settings(max_examples=200, deadline=None)
    @given(
        rows=st.lists(st.tuples(st.integers(0, 5), TIME, TIME), max_size=60),
        window=WINDOW,
    )
    def test_arrays_equal_reference(self, rows, window):
        sessions = np.array([s for s, _, _ in rows], dtype=np.int64)
        starts = np.array([a for _, a, _ in rows], dtype=np.int64)
        ends = np.array([b for _, _, b in rows], dtype=np.int64)
        totals = session_totals_arrays(sessions, starts, ends, n_sessions=6, window=window)
        assert totals.dtype == np.int64
        expected = [
            _covered_units([(a, b) for s, a, b in rows if s == session], window)
            for session in range(6)
        ]
        assert totals.tolist() == expected

    def test_arrays_large_times_and_default_size(self):
        base = 1_767_225_600_000_000_000  # 2026-01-01 in ns
        totals = session_totals_arrays(
            np.array([1, 1, 0]),
            np.array([base, base + 5, base]),
            np.array([base + 10, base + 30, base + 1]),
        )
        assert totals.tolist() == [1, 30]

    def test_arrays_empty(self):
        empty = np.array([], dtype=np.int64)
        assert session_totals_arrays(empty, empty, empty).shape == (0,)
        assert session_totals_arrays(empty, empty, empty, n_sessions=3).tolist() == [0, 0, 0]

    def test_arrays_reject_bad_input(self):
        with pytest.raises(InvalidInput):
            session_totals_arrays(np.array([0, 1]), np.array([0]), np.array([1]))
        with pytest.raises(InvalidInput):
            session_totals_arrays(np.array([3]), np.array([0]), np.array([1]), n_sessions=2)
        with pytest.raises(InvalidInput):
            session_totals_arrays(np.array([0]), np.array([0.5]), np.array([1.0]))

    def test_arrays_scale(self):
        rng = np.random.default_rng(3)
        n = 300_000
        sessions = rng.integers(0, 10_000, n)
        starts = rng.integers(0, 2_678_400 * 10**9, n)
        ends = starts + rng.integers(0, 60 * 10**9, n)
        totals = session_totals_arrays(sessions, starts, ends, n_sessions=10_000)
        assert totals.shape == (10_000,)
        assert int(totals.sum()) <= int((ends - starts).sum())
