"""Spend forecasts: a period's total spend with a prediction interval, and budget crossings.

The model (``trend_weekday_ar1``): daily spend is a straight line in time plus one level
per day of the week, and what that misses is an AR(1) process; it is fitted by feasible
generalized least squares (Prais-Winsten) on the last :data:`FIT_WINDOW_DAYS` days, with
and without a step in the level on each day of the window, and the forecasts of those
fits are averaged with Bayesian-information-criterion weights. Why this one:

* LLM serving spend follows working days (weekends are quieter) and drifts with adoption,
  so a trend and seven weekday levels describe most of it. Both are linear: each fit is
  one small least-squares problem, with no optimizer that can fail to converge.
* Daily errors are not independent: a busy day is followed by a busy day. The interval is
  for a sum of up to a month of days, where that matters most: with a lag-1
  autocorrelation of 0.6 the sum of 20 days has 3.6 times the variance it has with
  independent days. AR(1) errors carry the correlation with one parameter, and the
  forecast carries the last day's error forward (``phi**j`` times it). The lag-1
  autocorrelation of regression residuals reads low in a few weeks of data, so it is
  corrected for that bias (:func:`.model._lag1`); uncorrected, the 90% interval held 84% of
  AR(1) totals on the backtest (78% without context) instead of 90% (84%).
* Spend steps when a team, model or price changes, and a straight line through a step
  extrapolates the wrong level and the wrong slope. Averaging over "no step" and "a step
  on day d" for every d, weighted by how well each fits (``exp(-BIC / 2)``, half the prior
  on no step), follows a step once the data show it and keeps the doubt about its day and
  size in the interval. Picking the single best fit instead did worse either way on the
  backtest: with a BIC penalty that keeps false steps out, its 90% interval held 84% of
  the stepped totals (90% averaged); without one, false steps in AR(1) noise brought it to
  81% there (88% averaged).
* Billing has one-off days (a batch job, a reservation bought, a day of missing data),
  and one such day tilts a least-squares line and its weekday's level. Before the fit,
  days that stand out from the days on both sides of them are brought back in line
  (:func:`.model._despiked`); a step stands out from one side only, so it is left to the step
  fits. They still count, in full, in the actual spend.
* The interval is analytic: the variance of each remaining day's cumulative sum adds the
  future errors (AR(1) propagation) to the doubt in the fitted coefficients (their GLS
  covariance, the last day's error included), the average adds the spread between the
  fits' forecasts, and a Student t quantile with the residual degrees of freedom widens it
  for short windows. It needs no random numbers, so a forecast is deterministic.

What it does not know: a step or one-off day still to come; a large step on the last day
alone, which it takes for a one-off day until the next day confirms it (with a narrow,
wrong interval in between); and the doubt in the AR(1) coefficient itself, which leaves
AR(1) series a little under-covered (86-92% for 90% across backtest seeds). The backtest
(``python -m bench.forecast_backtest``) measures the coverage on generated series with
known trend, weekly seasonality, independent and autocorrelated noise, multiplicative
seasonality, level steps and one-off days, beside the naive run-rate.

Short histories: with fewer than :data:`MIN_SEASONAL_DAYS` days, seven weekday levels and a
trend cannot be told from noise, so the forecast falls back to ``short_mean``: the mean day
with independent errors, the interval from the sample variance and the mean's own error,
with a Student t quantile of n - 1 degrees of freedom (wide on purpose: three days give
t = 2.92 at 90%; it does not know about weekends it has not seen). One day gives no spread
at all; the band then runs from no further spend to twice that day's rate, an assumption
rather than a probability (``single_day``). No history gives zero with a zero-width band,
flagged ``no_history``. A constant window is forecast exactly, with a zero-width band.

Bands: cumulative spend cannot fall, so a lower bound for one day holds for every later
day and an upper bound for one day holds for every earlier day; the per-day bands use that
(a running maximum of the lower bounds, a running minimum from the end of the upper ones)
to stay monotone without losing coverage. Daily spend is never negative, so the lower band
never drops below what has been spent and a negative expected day counts as zero.

Money is integer micros; periods are half-open ``[period_start, period_end)``.

* :mod:`.values`: the forecast, its days and bases, the budget crossing, the input error.
* :mod:`.spend`: :func:`forecast_spend`: checks the history, picks the basis, makes the
  monotone bands.
* :mod:`.model`: the full model: despiking, the GLS fits with and without a step, their
  BIC-weighted forecast and its variance.
* :mod:`.crossing`: :func:`budget_crossing`.
"""

from app.budgets.rules.forecast.crossing import budget_crossing
from app.budgets.rules.forecast.model import (
    FIRST_STEP_DAY,
    FIT_WINDOW_DAYS,
    LAST_DAY_BAR,
    MAX_ONE_OFF_DAYS,
    MIN_SEASONAL_DAYS,
    MIN_STEP_FIT_DAYS,
    PHI_MAX,
    SPIKE_SCALES,
    STEP_PRIOR,
)
from app.budgets.rules.forecast.spend import at_least_spent, forecast_spend
from app.budgets.rules.forecast.values import (
    Basis,
    BudgetCrossing,
    ForecastDay,
    InvalidForecastInput,
    SpendForecast,
)

__all__ = [
    "FIRST_STEP_DAY",
    "FIT_WINDOW_DAYS",
    "LAST_DAY_BAR",
    "MAX_ONE_OFF_DAYS",
    "MIN_SEASONAL_DAYS",
    "MIN_STEP_FIT_DAYS",
    "PHI_MAX",
    "SPIKE_SCALES",
    "STEP_PRIOR",
    "Basis",
    "BudgetCrossing",
    "ForecastDay",
    "InvalidForecastInput",
    "SpendForecast",
    "at_least_spent",
    "budget_crossing",
    "forecast_spend",
]
