from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.sessions import session_totals, union_length

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
