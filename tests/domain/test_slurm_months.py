"""A Slurm job's GPU-seconds cut at month boundaries: largest remainder, so its months always
sum to GPUs x ElapsedRaw exactly, a month window gets exactly its month's part, and windows
that tile a month sum to it."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from app.domain.periods import Month
from app.domain.windows import TimeWindow
from app.slurm.rules.usage import gpu_seconds_by_month, gpu_seconds_in

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
instants = st.integers(0, 400 * 86_400 * 10**6).map(lambda us: EPOCH + timedelta(microseconds=us))


@st.composite
def jobs(draw: st.DrawFn) -> tuple[datetime, datetime, int]:
    start = draw(instants)
    wall_us = draw(st.integers(0, 120 * 86_400 * 10**6))
    end = start + timedelta(microseconds=wall_us)
    gpus = draw(st.integers(1, 64))
    # ElapsedRaw: whole seconds, at most the wall time (suspended time is not counted)
    elapsed = draw(st.integers(0, wall_us // 10**6))
    return start, end, gpus * elapsed


@given(jobs())
def test_the_months_sum_to_the_jobs_gpu_seconds(job: tuple[datetime, datetime, int]) -> None:
    start, end, total = job
    parts = gpu_seconds_by_month(start, end, total)
    assert sum(parts.values()) == total
    wall = (end - start).total_seconds()
    for month, part in parts.items():
        assert month.start < end or month == Month.of(start)
        if wall > 0:
            overlap = (min(end, month.end) - max(start, month.start)).total_seconds()
            assert abs(part - total * overlap / wall) < 1 + 1e-6
    for month in parts:
        window = TimeWindow(month.start, month.end)
        assert gpu_seconds_in(start, end, total, window) == parts[month]


@given(jobs(), st.floats(0, 1))
def test_windows_that_tile_a_month_sum_to_it(
    job: tuple[datetime, datetime, int], fraction: float
) -> None:
    start, end, total = job
    month = Month.of(start + (end - start) / 2)
    cut = month.start + (month.end - month.start) * fraction
    first = gpu_seconds_in(start, end, total, TimeWindow(month.start, cut))
    second = gpu_seconds_in(start, end, total, TimeWindow(cut, month.end))
    assert first + second == gpu_seconds_by_month(start, end, total).get(month, 0)
    whole = TimeWindow(EPOCH - timedelta(days=1), EPOCH + timedelta(days=600))
    assert gpu_seconds_in(start, end, total, whole) == total


def test_a_job_across_a_month_end_is_split_exactly() -> None:
    start = datetime(2026, 10, 31, 23, 0, tzinfo=UTC)
    end = datetime(2026, 11, 1, 1, 0, tzinfo=UTC)
    # 3 GPUs x 7,199 s (1 s suspended): rounding each month alone gives 10,798 or 10,800
    parts = gpu_seconds_by_month(start, end, 3 * 7_199)
    assert parts == {Month(2026, 10): 10_799, Month(2026, 11): 10_798}
    assert gpu_seconds_by_month(start, start, 5) == {Month(2026, 10): 5}
