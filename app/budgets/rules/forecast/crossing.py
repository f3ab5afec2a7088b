"""The day a forecast's cumulative spend reaches a budget (:func:`budget_crossing`): from the
elapsed days when actual spend has already reached it, otherwise from the expected spend and
the two bands, which give the expected, earliest and latest plausible days.
"""

from collections.abc import Sequence
from datetime import date, timedelta

from app.budgets.rules.forecast.values import (
    BudgetCrossing,
    ForecastDay,
    InvalidForecastInput,
    SpendForecast,
    _integer,
)


def budget_crossing(forecast: SpendForecast, budget_micros: int) -> BudgetCrossing | None:
    """The day cumulative spend reaches ``budget_micros``, with its plausible range.

    Returns:
        None when even the upper band stays below the budget within the period. When
        actual spend has already reached it, the day it did (from the elapsed days).

    Raises:
        InvalidForecastInput: If the budget is not a positive integer.
    """
    budget = _integer(budget_micros, "budget_micros")
    if budget <= 0:
        raise InvalidForecastInput(f"budget_micros must be positive, got {budget}")
    for offset, spent in enumerate(forecast.actual_cumulative_micros):
        if spent >= budget:
            day = forecast.period_start + timedelta(days=offset)
            return BudgetCrossing(
                budget_micros=budget,
                already_crossed=True,
                expected_day=day,
                earliest_day=day,
                latest_day=day,
            )
    earliest = _first_day(forecast.days, budget, "upper_micros")
    if earliest is None:
        return None
    return BudgetCrossing(
        budget_micros=budget,
        already_crossed=False,
        expected_day=_first_day(forecast.days, budget, "expected_micros"),
        earliest_day=earliest,
        latest_day=_first_day(forecast.days, budget, "lower_micros"),
    )


def _first_day(days: Sequence[ForecastDay], budget: int, band: str) -> date | None:
    return next((d.day for d in days if getattr(d, band) >= budget), None)
