"""Forecast of a period's total spend (:func:`forecast_spend`): checks the daily history,
sums the actual spend, picks the basis by how much history there is (nothing, one day, a
constant window, under two weeks: the short mean, or the full model of :mod:`.model`), and
turns the remaining days' forecast into monotone cumulative bands.
"""

from collections.abc import Sequence
from dataclasses import replace
from datetime import date, timedelta
from itertools import accumulate

import numpy as np
from scipy.stats import t as student_t

from app.budgets.rules.forecast.model import (
    FIT_WINDOW_DAYS,
    MIN_SEASONAL_DAYS,
    _despiked,
    _trend_weekday_ar1,
)
from app.budgets.rules.forecast.values import (
    Basis,
    FloatArray,
    ForecastDay,
    InvalidForecastInput,
    SpendForecast,
    _integer,
    _Remaining,
)


def forecast_spend(
    history: Sequence[int],
    *,
    first_day: date,
    period_start: date,
    period_end: date,
    level: float = 0.9,
) -> SpendForecast:
    """Forecast the total spend of ``[period_start, period_end)`` from daily spend.

    Args:
        history: Consecutive daily spend in integer micros, each >= 0; the first item is
            ``first_day``, the last the last complete day. It may start before the period
            (up to eight weeks of context are used) and must not start after it.
        first_day: The day of ``history[0]``.
        period_start: First day of the period.
        period_end: Day after the period's last day.
        level: Two-sided coverage of the prediction interval, in (0, 1).

    Returns:
        The forecast; ``as_of`` is ``first_day + len(history)`` days and must lie in
        ``[period_start, period_end]``. Actual spend is summed exactly; forecast amounts are
        computed in floating point and rounded to the micro, which is exact for a constant
        series while the period's total stays below 2**53 micros (about 9 billion units).

    Raises:
        InvalidForecastInput: Negative or non-integer spend, an empty or inverted period,
            a level outside (0, 1), history that starts after the period starts, or an
            ``as_of`` outside the period.
    """
    values = _validated(
        history, first_day=first_day, period_start=period_start, period_end=period_end, level=level
    )
    as_of = first_day + timedelta(days=len(values))
    elapsed = (as_of - period_start).days
    in_period = values[len(values) - elapsed :] if elapsed else []
    actual_cumulative = tuple(accumulate(in_period))
    actual = actual_cumulative[-1] if actual_cumulative else 0
    horizon = (period_end - as_of).days
    remaining = _forecast_remaining(values, first_day=first_day, horizon=horizon, level=level)
    days = _bands(remaining, actual=actual, as_of=as_of)
    last = (
        days[-1]
        if days
        else ForecastDay(
            day=as_of, expected_micros=actual, lower_micros=actual, upper_micros=actual
        )
    )
    return SpendForecast(
        period_start=period_start,
        period_end=period_end,
        as_of=as_of,
        level=level,
        model=remaining.basis,
        actual_micros=actual,
        expected_total_micros=last.expected_micros,
        lower_total_micros=last.lower_micros,
        upper_total_micros=last.upper_micros,
        actual_cumulative_micros=actual_cumulative,
        days=days,
    )


def _validated(
    history: Sequence[int],
    *,
    first_day: date,
    period_start: date,
    period_end: date,
    level: float,
) -> list[int]:
    if period_end <= period_start:
        raise InvalidForecastInput(
            f"period_end ({period_end}) must be after period_start ({period_start}); "
            "periods are half-open"
        )
    if not (isinstance(level, int | float) and 0.0 < level < 1.0):
        raise InvalidForecastInput(f"level must lie in (0, 1), got {level!r}")
    if first_day > period_start:
        raise InvalidForecastInput(
            f"history starts on {first_day}, after the period starts on {period_start}: the "
            "spend of the period's first days is unknown (pass zeros for days without spend)"
        )
    values = [_integer(v, f"history[{i}]") for i, v in enumerate(history)]
    negative = next(((i, v) for i, v in enumerate(values) if v < 0), None)
    if negative is not None:
        day = first_day + timedelta(days=negative[0])
        raise InvalidForecastInput(
            f"daily spend must not be negative: {negative[1]} micros on {day} "
            f"(history[{negative[0]}]); net credits out before forecasting"
        )
    as_of = first_day + timedelta(days=len(values))
    if as_of < period_start:
        raise InvalidForecastInput(
            f"history ends on {as_of - timedelta(days=1)}, before the period starts on "
            f"{period_start}: extend it to at least the day before the period"
        )
    if as_of > period_end:
        raise InvalidForecastInput(
            f"history runs to {as_of - timedelta(days=1)}, past the period's last day "
            f"{period_end - timedelta(days=1)}: cut it at the period's end"
        )
    return values


def _forecast_remaining(
    values: Sequence[int], *, first_day: date, horizon: int, level: float
) -> _Remaining:
    n = len(values)
    empty = np.zeros(horizon)
    if horizon == 0:
        return _Remaining(empty, empty, 0.0, Basis.period_complete)
    if n == 0:
        return _Remaining(empty, empty, 0.0, Basis.no_history)
    y = np.asarray(values[-FIT_WINDOW_DAYS:], dtype=np.float64)
    steps = np.arange(1, horizon + 1, dtype=np.float64)
    if n == 1:
        # No spread can be measured from one day: assume anything from no further spend to
        # twice the day's rate, and make that the band whatever the level.
        return _Remaining(np.full(horizon, y[0]), y[0] * steps, 1.0, Basis.single_day)
    if np.all(y == y[0]):
        return _Remaining(np.full(horizon, y[0]), empty, 0.0, _basis_for(len(y)))
    if len(y) < MIN_SEASONAL_DAYS:
        return _short_mean(y, steps, level)
    first_weekday = (first_day + timedelta(days=n - len(y))).weekday()
    return _trend_weekday_ar1(_despiked(y, first_weekday), first_weekday, horizon, level)


def _basis_for(days: int) -> Basis:
    return Basis.trend_weekday_ar1 if days >= MIN_SEASONAL_DAYS else Basis.short_mean


def _short_mean(y: FloatArray, steps: FloatArray, level: float) -> _Remaining:
    n = len(y)
    mean, sd = float(y.mean()), float(y.std(ddof=1))
    # The sum of k future days misses by k independent errors plus k times the mean's error.
    spread = sd * np.sqrt(steps + steps * steps / n)
    quantile = float(student_t.ppf(0.5 + level / 2, n - 1))
    return _Remaining(np.full(len(steps), mean), spread, quantile, Basis.short_mean)


def _bands(remaining: _Remaining, *, actual: int, as_of: date) -> tuple[ForecastDay, ...]:
    """Cumulative bands per remaining day: ``actual`` plus the rounded forecast of the days
    since ``as_of`` (rounding is monotone, so order and monotonicity survive it)."""
    expected = np.cumsum(np.maximum(remaining.means, 0.0))
    half = remaining.quantile * remaining.sd
    lower = np.minimum(np.maximum.accumulate(np.maximum(expected - half, 0.0)), expected)
    upper = np.maximum(np.minimum.accumulate((expected + half)[::-1])[::-1], expected)
    return tuple(
        ForecastDay(
            day=as_of + timedelta(days=j),
            expected_micros=actual + round(float(expected[j])),
            lower_micros=actual + round(float(lower[j])),
            upper_micros=actual + round(float(upper[j])),
        )
        for j in range(len(expected))
    )


def at_least_spent(forecast: SpendForecast, spent_micros: int) -> SpendForecast:
    """``forecast`` with every remaining day's cumulative band, and the totals, raised to at
    least ``spent_micros``: the spend already booked in the period, the partial spend of the
    day in progress included, which the daily history (complete days only) does not hold.

    Without it, on the first day of spend a forecast with no history predicts a total of 0,
    below what is already spent."""
    floor = _integer(spent_micros, "spent_micros")
    days = tuple(
        replace(
            day,
            expected_micros=max(day.expected_micros, floor),
            lower_micros=max(day.lower_micros, floor),
            upper_micros=max(day.upper_micros, floor),
        )
        for day in forecast.days
    )
    return replace(
        forecast,
        expected_total_micros=max(forecast.expected_total_micros, floor),
        lower_total_micros=max(forecast.lower_total_micros, floor),
        upper_total_micros=max(forecast.upper_total_micros, floor),
        days=days,
    )
