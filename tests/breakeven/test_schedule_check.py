"""The schedule against never and always speculating, level by level, by medians."""

import pytest

from app.breakeven.rules.schedule_check import check_schedules, schedule_check_as_dict
from app.breakeven.rules.sweep import SweepPoint


def _point(config: str, level: int, rate: float) -> SweepPoint:
    method = "none" if config == "none" else "ngram"
    return SweepPoint(
        config=config,
        method=method,
        k=0 if method == "none" else 4,
        concurrency=level,
        output_tokens_per_s=rate,
    )


NEVER = [_point("none", 1, 25.0), _point("none", 8, 120.0), _point("none", 16, 180.0)]
ALWAYS = [_point("ngram-k4", 1, 50.0), _point("ngram-k4", 8, 110.0), _point("ngram-k4", 16, 140.0)]


def test_each_level_is_compared_with_the_better_fixed_choice() -> None:
    scheduled = [
        _point("dyn", 1, 49.0),
        _point("dyn", 8, 119.0),
        _point("dyn", 16, 160.0),
        _point("dyn", 32, 200.0),
    ]  # no fixed rows at 32: left out

    (check,) = check_schedules(scheduled, never=NEVER, always=ALWAYS)

    assert [level.concurrency for level in check.levels] == [1, 8, 16]
    assert [round(level.ratio_to_best, 4) for level in check.levels] == [
        0.98,
        round(119 / 120, 4),
        round(160 / 180, 4),
    ]
    assert not check.meets_target  # 160 / 180 = 0.89 < 0.95
    assert check.worst_ratio == pytest.approx(160 / 180)
    assert schedule_check_as_dict(check)["meets_target"] is False


def test_repeated_runs_are_compared_by_their_median() -> None:
    scheduled = [_point("dyn", 16, rate) for rate in (100.0, 175.0, 178.0)]  # one bad run
    never = [*NEVER, _point("none", 16, 120.0), _point("none", 16, 181.0)]

    (check,) = check_schedules(scheduled, never=never, always=ALWAYS)

    (level,) = check.levels
    assert (level.scheduled_tokens_per_s, level.never_tokens_per_s, level.runs) == (175.0, 180.0, 3)
    assert check.meets_target


def test_configs_are_checked_separately_and_unmatched_ones_dropped() -> None:
    scheduled = [_point("a", 1, 50.0), _point("b", 8, 100.0), _point("c", 64, 1.0)]
    checks = check_schedules(scheduled, never=NEVER, always=ALWAYS)
    assert [(c.config, c.meets_target) for c in checks] == [("a", True), ("b", False)]
