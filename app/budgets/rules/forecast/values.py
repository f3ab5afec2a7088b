"""The forecast's vocabulary: what a forecast and a budget crossing say, which model made it,
the error for input it cannot forecast from, the remaining days' forecast that a basis hands
to the bands, and the integer-micros check shared by the forecast and the crossing. Money is
integer micros; periods are half-open.
"""

import operator
from dataclasses import dataclass
from datetime import date
from enum import StrEnum
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt

from app.domain.errors import InvalidInput

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class InvalidForecastInput(InvalidInput, ValueError):
    """History, period or level that cannot be forecast from (a ``ValueError`` too)."""


class Basis(StrEnum):
    """Which model produced a forecast."""

    trend_weekday_ar1 = "trend_weekday_ar1"
    """Linear trend + day-of-week levels, AR(1) errors, GLS (the full model)."""
    short_mean = "short_mean"
    """Fewer than two weeks of history: the mean day, independent errors."""
    single_day = "single_day"
    """One day of history: the band is an assumption, not a probability."""
    no_history = "no_history"
    """Nothing to forecast from: zero, with a zero-width band."""
    period_complete = "period_complete"
    """History reaches the end of the period: the total is known."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ForecastDay:
    """Cumulative period spend at the end of one remaining day, in micros."""

    day: date
    expected_micros: int
    lower_micros: int
    upper_micros: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SpendForecast:
    """A period's spend so far and its forecast total with a central prediction interval."""

    period_start: date
    period_end: date
    """Exclusive."""
    as_of: date
    """The first day not yet known: the day after the last complete day of history."""
    level: float
    """Two-sided coverage of the bands, e.g. 0.9."""
    model: Basis
    actual_micros: int
    """Spend inside the period up to (not including) ``as_of``."""
    expected_total_micros: int
    lower_total_micros: int
    """Never below ``actual_micros``."""
    upper_total_micros: int
    actual_cumulative_micros: tuple[int, ...]
    """Cumulative spend at the end of each elapsed day of the period, from ``period_start``
    to the day before ``as_of``."""
    days: tuple[ForecastDay, ...]
    """One per remaining day, ``as_of`` to the day before ``period_end``; the last one
    carries the totals."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BudgetCrossing:
    """When cumulative spend reaches a budget; days are those at whose end it is reached."""

    budget_micros: int
    already_crossed: bool
    """Actual spend has reached the budget: all three days are the day it did."""
    expected_day: date | None
    """From the expected cumulative spend; None when it stays below within the period."""
    earliest_day: date
    """From the upper band: the earliest plausible day."""
    latest_day: date | None
    """From the lower band; None when even that stays below within the period."""


@dataclass(frozen=True, slots=True)
class _Remaining:
    """Forecast of the remaining days: daily means and the cumulative sums' spread."""

    means: FloatArray
    sd: FloatArray
    """Standard deviation of the cumulative sum's forecast error through each day."""
    quantile: float
    """Multiplier of ``sd`` for the band's half width."""
    basis: Basis


def _integer(value: object, name: str) -> int:
    if type(value) is int:  # the common case, without the slow protocol check below
        return value
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise InvalidForecastInput(f"{name} must be integer micros, got {value!r}")
    return operator.index(value)
