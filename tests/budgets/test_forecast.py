"""Spend forecasts (pure): exact cases, the bands' invariants, budget crossings, errors, and
the coverage of the 90% interval on generated series."""

import math
from datetime import date, timedelta
from itertools import accumulate, pairwise

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.stats import t as student_t

from app.budgets.rules.forecast import (
    Basis,
    InvalidForecastInput,
    SpendForecast,
    budget_crossing,
    forecast_spend,
)
from app.domain.errors import InvalidInput
from bench.forecast_backtest import generate, run_rate

JUNE = date(2026, 6, 1)
JULY = date(2026, 7, 1)
UNIT = 1_000_000


def june(history: list[int], *, context: int = 0, level: float = 0.9) -> SpendForecast:
    """Forecast June 2026 from ``history``, whose first ``context`` days are in May."""
    return forecast_spend(
        history,
        first_day=JUNE - timedelta(days=context),
        period_start=JUNE,
        period_end=JULY,
        level=level,
    )


class TestExactCases:
    def test_a_constant_series_is_forecast_exactly(self) -> None:
        forecast = june([7 * UNIT] * 70, context=56)
        assert forecast.model is Basis.trend_weekday_ar1
        assert forecast.as_of == date(2026, 6, 15)
        assert forecast.actual_micros == 14 * 7 * UNIT
        assert forecast.expected_total_micros == 30 * 7 * UNIT
        assert forecast.lower_total_micros == forecast.upper_total_micros == 30 * 7 * UNIT
        assert [d.expected_micros for d in forecast.days] == [
            (15 + j) * 7 * UNIT for j in range(16)
        ]

    def test_a_short_constant_series_is_forecast_exactly(self) -> None:
        forecast = june([3 * UNIT] * 4)
        assert forecast.model is Basis.short_mean
        assert forecast.lower_total_micros == forecast.upper_total_micros == 90 * UNIT

    def test_trend_and_weekdays_without_noise_are_continued(self) -> None:
        weekly = [0, 40, 60, 50, 30, -400, -450]
        first = JUNE - timedelta(days=49)
        spend = [
            1_000 * UNIT + 5 * UNIT * t + weekly[(first + timedelta(days=t)).weekday()] * UNIT
            for t in range(49 + 30)
        ]
        forecast = june(spend[:60], context=49)
        truth = sum(spend[49:])
        assert forecast.expected_total_micros == pytest.approx(truth, rel=1e-9)
        assert forecast.upper_total_micros - forecast.lower_total_micros <= 10

    def test_a_step_in_the_level_is_followed(self) -> None:
        rng = np.random.default_rng(3)
        spend = [
            round(UNIT * (100 + (50 if t >= 42 else 0)) * (1 + 0.03 * rng.normal()))
            for t in range(70)
        ]
        forecast = june(spend, context=56)
        daily = (forecast.expected_total_micros - forecast.actual_micros) / 16
        assert daily == pytest.approx(150 * UNIT, rel=0.05)
        assert forecast.lower_total_micros < forecast.expected_total_micros

    @pytest.mark.parametrize("spike_day", [0, 20, 62, 69])
    def test_a_one_off_day_is_not_extrapolated(self, spike_day: int) -> None:
        rng = np.random.default_rng(7)
        spend = [round(UNIT * 1_000 * (1 + 0.05 * rng.normal())) for _ in range(70)]
        spend[spike_day] = 50_000 * UNIT
        forecast = june(spend, context=56)
        daily = (forecast.expected_total_micros - forecast.actual_micros) / 16
        assert daily == pytest.approx(1_000 * UNIT, rel=0.03)
        assert forecast.actual_micros == sum(spend[56:])

    def test_a_step_two_days_ago_is_followed(self) -> None:
        rng = np.random.default_rng(8)
        spend = [
            round(UNIT * (1_000 if t < 68 else 2_000) * (1 + 0.03 * rng.normal()))
            for t in range(70)
        ]
        forecast = june(spend, context=56)
        daily = (forecast.expected_total_micros - forecast.actual_micros) / 16
        assert daily == pytest.approx(2_000 * UNIT, rel=0.05)

    def test_no_history_is_zero_and_flagged(self) -> None:
        forecast = june([])
        assert forecast.model is Basis.no_history
        assert forecast.as_of == JUNE
        assert len(forecast.days) == 30
        assert forecast.expected_total_micros == forecast.upper_total_micros == 0

    def test_one_day_spans_no_more_spend_to_twice_its_rate(self) -> None:
        forecast = june([4 * UNIT])
        assert forecast.model is Basis.single_day
        assert forecast.expected_total_micros == 30 * 4 * UNIT
        assert forecast.lower_total_micros == 4 * UNIT
        assert forecast.upper_total_micros == 4 * UNIT + 2 * 29 * 4 * UNIT

    def test_short_history_is_the_mean_day_with_a_student_t_interval(self) -> None:
        spend = [90 * UNIT, 110 * UNIT, 100 * UNIT, 120 * UNIT, 80 * UNIT]
        forecast = june(spend)
        assert forecast.model is Basis.short_mean
        remaining = 25
        assert forecast.expected_total_micros == 30 * 100 * UNIT
        # sd of a day: sqrt(1000 / 4) units; the sum of 25 days and the mean's own error.
        half = student_t.ppf(0.95, 4) * math.sqrt(250) * math.sqrt(remaining + remaining**2 / 5)
        assert forecast.upper_total_micros == round(3_000 * UNIT + half * UNIT)
        assert forecast.lower_total_micros == round(3_000 * UNIT - half * UNIT)

    def test_a_complete_period_is_its_actual_spend(self) -> None:
        forecast = june([UNIT + t for t in range(40)], context=10)
        assert forecast.model is Basis.period_complete
        assert forecast.days == ()
        assert forecast.actual_micros == sum(UNIT + t for t in range(10, 40))
        assert forecast.lower_total_micros == forecast.upper_total_micros == forecast.actual_micros


class TestBudgetCrossing:
    def test_exact_day_on_a_constant_series(self) -> None:
        forecast = june([10 * UNIT] * 10)
        crossing = budget_crossing(forecast, 250 * UNIT)
        assert crossing is not None
        assert not crossing.already_crossed
        day_25 = date(2026, 6, 25)
        assert crossing.expected_day == crossing.earliest_day == crossing.latest_day == day_25

    def test_already_crossed_gives_the_day_it_happened(self) -> None:
        forecast = june([UNIT] * 5 + [10 * UNIT, 10 * UNIT, 20 * UNIT, UNIT], context=5)
        crossing = budget_crossing(forecast, 15 * UNIT)
        assert crossing is not None
        assert crossing.already_crossed
        assert crossing.expected_day == crossing.latest_day == date(2026, 6, 2)

    def test_a_budget_above_the_upper_band_is_not_crossed(self) -> None:
        forecast = june([10 * UNIT] * 10)
        assert budget_crossing(forecast, 300 * UNIT + 1) is None
        assert budget_crossing(forecast, 300 * UNIT) is not None

    def test_the_bands_order_the_days(self) -> None:
        rng = np.random.default_rng(11)
        spend = [round(UNIT * 100 * (1 + 0.2 * rng.normal())) for _ in range(40)]
        forecast = june(spend, context=30)
        crossing = budget_crossing(forecast, forecast.expected_total_micros)
        assert crossing is not None
        assert crossing.expected_day == date(2026, 6, 30)
        assert crossing.earliest_day < crossing.expected_day
        assert crossing.latest_day is None


class TestErrors:
    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"history": [UNIT, -1]}, "must not be negative: -1 micros on 2026-06-02"),
            ({"history": [UNIT, 1.5]}, r"history\[1\] must be integer micros"),
            ({"history": [True]}, r"history\[0\] must be integer micros"),
            ({"period_end": JUNE}, "must be after period_start"),
            ({"level": 1.0}, r"level must lie in \(0, 1\)"),
            ({"level": 0.0}, r"level must lie in \(0, 1\)"),
            ({"level": float("nan")}, r"level must lie in \(0, 1\)"),
            ({"first_day": date(2026, 6, 2)}, "after the period starts"),
            ({"first_day": date(2026, 5, 1)}, "before the period starts on 2026-06-01"),
            ({"history": [UNIT] * 31}, "past the period's last day 2026-06-30"),
        ],
    )
    def test_bad_input_is_named(self, kwargs: dict[str, object], message: str) -> None:
        arguments: dict[str, object] = {
            "history": [UNIT] * 3,
            "first_day": JUNE,
            "period_start": JUNE,
            "period_end": JULY,
        }
        with pytest.raises(InvalidForecastInput, match=message):
            forecast_spend(**{**arguments, **kwargs})  # type: ignore[arg-type]

    def test_errors_are_value_errors_and_domain_errors(self) -> None:
        with pytest.raises(ValueError, match="must be after"):
            forecast_spend([], first_day=JUNE, period_start=JUNE, period_end=JUNE)
        assert issubclass(InvalidForecastInput, InvalidInput)

    @pytest.mark.parametrize("budget", [0, -5])
    def test_budget_must_be_positive(self, budget: int) -> None:
        with pytest.raises(InvalidForecastInput, match="budget_micros must be positive"):
            budget_crossing(june([UNIT]), budget)


@st.composite
def forecast_inputs(draw: st.DrawFn) -> tuple[list[int], date, date, date, float]:
    size = draw(st.integers(0, 90))
    scale = draw(st.sampled_from([1, 1_000, UNIT, 10**6 * UNIT]))
    history = draw(st.lists(st.integers(0, 10 * scale), min_size=size, max_size=size))
    in_period = draw(st.integers(0, size))
    first_day = date(2026, 1, 1) + timedelta(days=draw(st.integers(0, 365)))
    period_start = first_day + timedelta(days=size - in_period)
    as_of = first_day + timedelta(days=size)
    period_end = as_of + timedelta(days=draw(st.integers(0 if in_period else 1, 45)))
    return history, first_day, period_start, period_end, draw(st.floats(0.5, 0.99))


def _forecast(inputs: tuple[list[int], date, date, date, float]) -> SpendForecast:
    history, first_day, period_start, period_end, level = inputs
    return forecast_spend(
        history, first_day=first_day, period_start=period_start, period_end=period_end, level=level
    )


class TestProperties:
    @given(inputs=forecast_inputs())
    def test_bands_are_ordered_monotone_integers_above_actual(
        self, inputs: tuple[list[int], date, date, date, float]
    ) -> None:
        history, _, period_start, period_end, _ = inputs
        forecast = _forecast(inputs)
        elapsed = (forecast.as_of - period_start).days
        in_period = history[len(history) - elapsed :] if elapsed else []
        assert forecast.actual_cumulative_micros == tuple(accumulate(in_period))
        assert forecast.actual_micros == sum(in_period)
        assert [d.day for d in forecast.days] == [
            forecast.as_of + timedelta(days=j) for j in range((period_end - forecast.as_of).days)
        ]
        for day in forecast.days:
            values = (day.lower_micros, day.expected_micros, day.upper_micros)
            assert all(type(v) is int for v in values)
            assert forecast.actual_micros <= day.lower_micros <= day.expected_micros
            assert day.expected_micros <= day.upper_micros
        for earlier, later in pairwise(forecast.days):
            assert earlier.lower_micros <= later.lower_micros
            assert earlier.expected_micros <= later.expected_micros
            assert earlier.upper_micros <= later.upper_micros
        assert (
            forecast.actual_micros
            <= forecast.lower_total_micros
            <= forecast.expected_total_micros
            <= forecast.upper_total_micros
        )
        if forecast.days:
            last = forecast.days[-1]
            totals = (last.lower_micros, last.expected_micros, last.upper_micros)
            assert totals == (
                forecast.lower_total_micros,
                forecast.expected_total_micros,
                forecast.upper_total_micros,
            )

    @given(inputs=forecast_inputs())
    def test_a_higher_level_gives_a_wider_interval(
        self, inputs: tuple[list[int], date, date, date, float]
    ) -> None:
        narrow = _forecast((*inputs[:4], 0.8))
        wide = _forecast((*inputs[:4], 0.95))
        assert narrow.expected_total_micros == wide.expected_total_micros
        assert wide.lower_total_micros <= narrow.lower_total_micros
        assert wide.upper_total_micros >= narrow.upper_total_micros

    @given(
        value=st.integers(0, 10**12),  # a million units a day; see forecast_spend
        size=st.integers(2, 90),
        remaining=st.integers(1, 40),
    )
    def test_constant_series_are_exact(self, value: int, size: int, remaining: int) -> None:
        first_day = date(2026, 3, 1)
        forecast = forecast_spend(
            [value] * size,
            first_day=first_day,
            period_start=first_day,
            period_end=first_day + timedelta(days=size + remaining),
        )
        exact = value * (size + remaining)
        assert forecast.lower_total_micros == forecast.upper_total_micros == exact

    @given(inputs=forecast_inputs(), share=st.floats(0.0, 1.3))
    def test_budget_crossing_agrees_with_the_bands(
        self, inputs: tuple[list[int], date, date, date, float], share: float
    ) -> None:
        forecast = _forecast(inputs)
        budget = max(1, round(forecast.upper_total_micros * share))
        crossing = budget_crossing(forecast, budget)
        if budget > forecast.upper_total_micros:
            assert crossing is None
            return
        assert crossing is not None
        if forecast.actual_micros >= budget:
            assert crossing.already_crossed
            offset = next(i for i, v in enumerate(forecast.actual_cumulative_micros) if v >= budget)
            assert crossing.expected_day == forecast.period_start + timedelta(days=offset)
            return
        assert not crossing.already_crossed
        by_day = {d.day: d for d in forecast.days}
        for day, band in (
            (crossing.earliest_day, "upper_micros"),
            (crossing.expected_day, "expected_micros"),
            (crossing.latest_day, "lower_micros"),
        ):
            if day is None:
                assert getattr(forecast.days[-1], band) < budget
                continue
            assert getattr(by_day[day], band) >= budget
            if day - timedelta(days=1) in by_day:
                assert getattr(by_day[day - timedelta(days=1)], band) < budget
        if crossing.expected_day is not None:
            assert crossing.earliest_day <= crossing.expected_day
            assert crossing.latest_day is None or crossing.expected_day <= crossing.latest_day


def test_the_90_percent_interval_holds_about_90_percent_of_totals() -> None:
    """720 forecasts (240 generated months with eight weeks of context, as of days 8, 15 and
    22; independent, AR(1) and multiplicative noise): the 90% interval must hold the true
    total 85-95% of the time (it holds 91.1% here). The band rejects known-wrong intervals
    on the same months: the naive run-rate's 90% interval (79.2%) and the model's own 80%
    one (81.5%); the model's interval with the days taken as independent held 80.6% when
    tried."""
    rng = np.random.default_rng(0)
    held = {"model": 0, "model 80%": 0, "run-rate": 0}
    runs = 0
    for i in range(240):
        series = generate(("iid", "ar1", "multiplicative")[i % 3], rng, context_days=56)
        truth = series.month_total()
        for day in (8, 15, 22):
            as_of = series.month_start + timedelta(days=day - 1)
            first_day, history = series.known(as_of, context=True)
            for name, level in (("model", 0.9), ("model 80%", 0.8)):
                forecast = forecast_spend(
                    history,
                    first_day=first_day,
                    period_start=series.month_start,
                    period_end=series.month_end,
                    level=level,
                )
                held[name] += forecast.lower_total_micros <= truth <= forecast.upper_total_micros
            low, high = run_rate(series, as_of).intervals[0.9]
            held["run-rate"] += low <= truth <= high
            runs += 1
    coverage = {name: count / runs for name, count in held.items()}
    assert 0.85 <= coverage["model"] <= 0.95, coverage
    assert coverage["model 80%"] < 0.85, coverage
    assert coverage["run-rate"] < 0.85, coverage
