"""The breakeven from the levels around it: the local crossing, its Fieller interval, the
runs per level it needs, and the levels to measure when the data cannot pin it down."""

import math

import pytest

from app.breakeven.rules.local_crossing import next_levels
from app.breakeven.rules.report import BreakevenFit, fit_breakeven
from app.breakeven.rules.sweep import SweepPoint
from tests.breakeven.helpers import sweep_rows, true_breakeven

LEVELS = (1, 2, 4, 8, 16, 32, 64)


def _fit(**rows: object) -> BreakevenFit:
    points = [
        SweepPoint(
            config=str(r["config"]),
            method=str(r["method"]),
            k=int(str(r["k"])),
            concurrency=int(str(r["concurrency"])),
            output_tokens_per_s=float(str(r["output_tokens_per_s"])),
            mean_acceptance_length=float(str(r["mean_acceptance_length"]) or "nan"),
        )
        for r in sweep_rows(levels=LEVELS, **rows)  # type: ignore[arg-type]
    ]
    return fit_breakeven(points, bootstrap_samples=60, seed=1)


def test_exact_measurements_put_the_local_crossing_between_the_levels_that_bracket_it() -> None:
    truth = true_breakeven()
    local = _fit(noise=0.0).primary.local
    assert local is not None
    assert local.bracket[0] < truth < local.bracket[1]
    assert local.estimate == pytest.approx(truth, rel=0.05)  # a line in log-log between them
    assert local.interval is not None
    assert local.interval[0] == pytest.approx(local.estimate, rel=1e-6)


def test_noisy_measurements_give_a_bounded_interval_around_the_truth_that_runs_narrow() -> None:
    truth = true_breakeven()
    few, many = (_fit(noise=0.02, repeats=r, seed=3).primary for r in (2, 8))
    assert few.pinned_down
    assert few.breakeven_ci is not None
    assert few.breakeven_ci[0] <= truth <= few.breakeven_ci[1]
    assert few.local is not None
    assert few.local.interval is not None
    assert many.local is not None
    assert many.local.interval is not None

    def width(interval: tuple[float, float]) -> float:
        return math.log(interval[1] / interval[0])

    assert width(many.local.interval) < width(few.local.interval)
    # both say how many runs per level a +-10% interval needs
    assert few.repeats_for_target is not None
    assert many.repeats_for_target is not None
    assert few.repeats_for_target >= 2


def test_data_that_cannot_pin_the_crossing_down_says_where_to_measure() -> None:
    fit = _fit(noise=0.15, seed=5).primary
    assert fit.breakeven_concurrency is not None
    assert not fit.pinned_down
    assert fit.next_levels
    assert not set(fit.next_levels) & set(LEVELS)
    low, high = fit.breakeven_ci or (0.0, math.inf)
    assert all(max(low, 1) - 1 <= level <= high + 1 for level in fit.next_levels)


def test_next_levels_are_the_estimate_and_the_midpoints_towards_the_interval_ends() -> None:
    assert next_levels(27.1, (22.9, 34.8), [1, 2, 4, 8, 16, 32, 64]) == (25, 27, 31)
    assert next_levels(27.1, (22.9, 34.8), [25, 27]) == (31,)
    # no interval: between half and twice the estimate (4 and 8 are measured already)
    assert next_levels(6.0, None, [1, 2, 4, 8]) == (6,)
    assert next_levels(6.0, None, [1, 2]) == (4, 6, 8)
    # a bootstrap interval may leave the searched range: 0 or inf stand for half and twice
    assert next_levels(6.0, (0.0, math.inf), [1, 2]) == (4, 6, 8)
