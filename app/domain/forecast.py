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
  corrected for that bias (:func:`_lag1`); uncorrected, the 90% interval held 84% of
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
  (:func:`_despiked`); a step stands out from one side only, so it is left to the step
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
"""

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from enum import StrEnum
from itertools import accumulate
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt
from scipy.stats import t as student_t

from app.domain.errors import InvalidInput

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

FIT_WINDOW_DAYS = 56
"""The model is fitted on at most the last eight weeks: older spend says little about this
month's slope (on the backtest, 35 and 84 days did no better)."""
MIN_SEASONAL_DAYS = 14
"""Two of each weekday: with fewer days the weekday levels and trend are not fitted."""
MIN_STEP_FIT_DAYS = 28
"""Steps are looked for in four weeks or more; in less they mostly fit noise."""
FIRST_STEP_DAY = 3
"""Candidate steps start on any day from the window's fourth to its last: earlier ones
differ from no step by too few days to matter."""
STEP_PRIOR = 0.5
"""Prior probability that the window has a step, spread evenly over its candidate days."""
SPIKE_SCALES = 5.0
"""How far a one-off day stands out from the days on both sides of it, in robust standard
deviations of the residuals (:func:`_despiked`)."""
MAX_ONE_OFF_DAYS = 4
"""At most this many days of a window are taken for one-offs."""
LAST_DAY_BAR = 2.0
"""The bar for the window's last day, in multiples of :data:`SPIKE_SCALES`."""
PHI_MAX = 0.95
"""The AR(1) coefficient is capped below 1: a unit root would make the sum's variance
explode, and it cannot be told from a slow drift in a few weeks."""
_SHRINK = 6.0
"""An AR(1) coefficient's estimate from regression residuals shrinks by about ``1 - 6/n``."""


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


def _integer(value: object, name: str) -> int:
    if type(value) is int:  # the common case, without the slow protocol check below
        return value
    if isinstance(value, bool) or not isinstance(value, SupportsIndex):
        raise InvalidForecastInput(f"{name} must be integer micros, got {value!r}")
    return operator.index(value)


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


def _designs(
    days: int, first_weekday: int, steps: IntArray | None, *, offset: int = 0
) -> FloatArray:
    """Regressors, one matrix per model: seven weekday levels and the trend (time in weeks),
    plus, with ``steps``, an indicator from each model's step day on (days counted from the
    fit window's start). Shape ``(models, days, 8 or 9)``."""
    t = np.arange(offset, offset + days)
    base = np.zeros((days, 8))
    base[np.arange(days), (first_weekday + t) % 7] = 1.0
    base[:, 7] = t / 7.0
    if steps is None:
        return base[None]
    step = (t[None, :] >= steps[:, None]).astype(np.float64)
    return np.concatenate([np.broadcast_to(base, (len(steps), days, 8)), step[..., None]], axis=2)


@dataclass(frozen=True, slots=True)
class _Fits:
    """GLS fits of several models (one per row) to the same window."""

    beta: FloatArray
    phi: FloatArray
    sigma2: FloatArray
    """Innovation variance (unbiased)."""
    covariance: FloatArray
    """GLS covariance of ``beta``."""
    df: int
    bic: FloatArray
    last_error: FloatArray
    """What the line and weekday levels (and step) miss on the window's last day."""


def _gls(x: FloatArray, y: FloatArray) -> _Fits:
    """Feasible GLS with AR(1) errors for each design in ``x`` (``(models, n, p)``): ordinary
    least squares, the errors' lag-1 autocorrelation (:func:`_lag1`), then Prais-Winsten."""
    _, n, p = x.shape
    q, _ = np.linalg.qr(x)
    residuals = y - np.einsum("mnp,mp->mn", q, np.einsum("mnp,n->mp", q, y))
    phi = _lag1(q, residuals)
    first = np.sqrt(1.0 - phi * phi)
    xw = np.concatenate(
        [first[:, None, None] * x[:, :1], x[:, 1:] - phi[:, None, None] * x[:, :-1]], axis=1
    )
    yw = np.concatenate([first[:, None] * y[:1], y[1:] - phi[:, None] * y[:-1]], axis=1)
    qw, rw = np.linalg.qr(xw)
    beta = np.linalg.solve(rw, np.einsum("mnp,mn->mp", qw, yw)[..., None])[..., 0]
    white = yw - np.einsum("mnp,mp->mn", xw, beta)
    ssr = np.maximum(np.einsum("mn,mn->m", white, white), 1e-300)
    df = n - p - 1
    rw_inv = np.linalg.inv(rw)
    # Gaussian log likelihood at the estimates; a step also spends its day, so it counts
    # one parameter more than its size.
    log_likelihood = -0.5 * n * (np.log(2 * np.pi * ssr / n) + 1) + np.log(first)
    parameters = p + 2 + (p > 8)
    return _Fits(
        beta=beta,
        phi=phi,
        sigma2=ssr / df,
        covariance=(ssr / df)[:, None, None] * (rw_inv @ np.swapaxes(rw_inv, 1, 2)),
        df=df,
        bic=-2 * log_likelihood + parameters * math.log(n),
        last_error=y[-1] - np.einsum("mp,mp->m", x[:, -1], beta),
    )


def _lag1(q: FloatArray, residuals: FloatArray) -> FloatArray:
    """Lag-1 autocorrelation of the errors from least-squares ``residuals``, unbiased.

    Residuals of a regression read low: for independent errors the expected lag-1
    autocorrelation of the residuals is ``tr(L M) / (n - p)`` (``M = I - Q Q'`` the residual
    maker, ``L`` the lag matrix), and an AR(1) coefficient is further shrunk by about
    ``1 - 6 / n``; both are undone here. The constant 6 was calibrated by simulation on this
    design (14 to 56 days, phi 0 to 0.8), where it leaves the mean within 0.06 of phi.
    """
    _, n, p = q.shape
    denominator = np.einsum("mn,mn->m", residuals, residuals)
    raw = np.einsum("mn,mn->m", residuals[:, 1:], residuals[:, :-1]) / np.maximum(
        denominator, 1e-300
    )
    white_noise = -np.einsum("mnp,mnp->m", q[:, 1:], q[:, :-1]) / (n - p)
    corrected = (raw - white_noise) / (1.0 - _SHRINK / n)
    return np.where(denominator > 0.0, np.clip(corrected, 0.0, PHI_MAX), 0.0)


def _cumulative(
    fits: _Fits, future: FloatArray, last_row: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Daily means and the variance of the cumulative sums of the days in ``future``
    (``(models, horizon, p)``), one row per model."""
    horizon = future.shape[1]
    powers = fits.phi[:, None] ** np.arange(horizon + 1)
    decay = powers[:, 1:]
    means = np.einsum("mhp,mp->mh", future, fits.beta) + decay * fits.last_error[:, None]
    # d(cumulative mean)/d(beta): the last error depends on beta too.
    gradient = np.cumsum(future - decay[..., None] * last_row[:, None, :], axis=1)
    parameter_var = np.einsum("mhi,mij,mhj->mh", gradient, fits.covariance, gradient)
    # An innovation l days before the horizon's day k weighs 1 + phi + ... + phi^(l - 1) in
    # the cumulative sum through k.
    weight = np.cumsum(powers[:, :-1], axis=1)
    innovation_var = fits.sigma2[:, None] * np.cumsum(weight * weight, axis=1)
    return means, parameter_var + innovation_var


def _despiked(y: FloatArray, first_weekday: int) -> FloatArray:
    """``y`` with one-off days (a batch job, a day of missing data) brought back in line.

    A day is one-off when what the line and weekday levels miss on it (its residual, by
    least squares over the other days) differs from the median residual of the (up to)
    three days before it and from that of the (up to) three days after it, both by more than
    :data:`SPIKE_SCALES` robust standard deviations and in the same direction. A step in the
    level stands out from one side only, so it is kept. The window's last day has no days
    after it to tell a one-off from the start of a step, so it is taken for a one-off only
    when it stands out from the three days before it and from the day before it alone, by
    :data:`LAST_DAY_BAR` times the bar: a day ten deviations above the days before it is
    more often a batch job than a new level, and a real step shows again the next day (until
    then its forecast is wrong, with a narrow interval).

    One-off days are found one at a time, the most extreme first, each refit leaving out
    those found so far (up to :data:`MAX_ONE_OFF_DAYS`): a large one pulls its weekday's
    level towards itself, which makes the other days of that weekday look odd until it is
    left out. Each is replaced, for the fit only, by its fitted value plus the mean of the
    two medians.
    """
    x = _designs(len(y), first_weekday, None)[0]
    one_off = np.zeros(len(y), dtype=bool)
    for _ in range(MAX_ONE_OFF_DAYS + 1):
        kept = ~one_off
        fitted = x @ np.linalg.lstsq(x[kept], y[kept], rcond=None)[0]
        residuals = y - fitted
        usual = residuals[kept]
        scale = 1.4826 * float(np.median(np.abs(usual - np.median(usual))))
        padded = np.concatenate([np.full(3, np.nan), residuals, np.full(3, np.nan)])
        windows = np.lib.stride_tricks.sliding_window_view(padded, 3)
        before, after = _nanmedian(windows[: len(y)]), _nanmedian(windows[4:])
        # The window's first day cannot start a step, so the days after it decide alone; the
        # last day must stand out from the day before it too, or a step two days ago would
        # lose its second day.
        before[0], after[-1] = after[0], residuals[-2]
        if scale <= 0.0:  # most days fit exactly: nothing stands out by a robust measure
            break
        from_before, from_after = residuals - before, residuals - after
        same_side = np.sign(from_before) == np.sign(from_after)
        outlying = np.minimum(np.abs(from_before), np.abs(from_after))
        bar = np.full(len(y), SPIKE_SCALES * scale)
        bar[-1] *= LAST_DAY_BAR
        excess = np.where(same_side & ~one_off, outlying / bar, 0.0)
        worst = int(np.argmax(excess))
        if excess[worst] <= 1.0 or one_off.sum() == MAX_ONE_OFF_DAYS:
            break
        one_off[worst] = True
    return np.where(one_off, fitted + (before + after) / 2, y)


def _nanmedian(rows: FloatArray) -> FloatArray:
    """Median of each row's numbers, NaN where a row has none (without numpy's warning)."""
    ordered = np.sort(rows, axis=1)  # NaN sorts last
    count = np.sum(~np.isnan(rows), axis=1)
    middle = np.arange(len(rows))
    low = ordered[middle, np.maximum((count - 1) // 2, 0)]
    high = ordered[middle, np.maximum(count // 2, 0)]
    return np.where(count > 0, (low + high) / 2, np.nan)


def _trend_weekday_ar1(y: FloatArray, first_weekday: int, horizon: int, level: float) -> _Remaining:
    """The full model's forecast: the BIC-weighted average of the fits with no step and with
    a step on each candidate day (see the module's notes)."""
    n = len(y)
    scale = max(float(np.abs(y).mean()), 1.0)
    ys = y / scale
    designs = [_designs(n, first_weekday, None)]
    futures = [_designs(horizon, first_weekday, None, offset=n)]
    if n >= MIN_STEP_FIT_DAYS:
        steps = np.arange(FIRST_STEP_DAY, n)
        designs.append(_designs(n, first_weekday, steps))
        futures.append(_designs(horizon, first_weekday, steps, offset=n))
    parts = [_gls(x, ys) for x in designs]
    bic = np.concatenate([fits.bic for fits in parts])
    prior = np.full(len(bic), STEP_PRIOR / max(len(bic) - 1, 1))
    prior[0] = 1.0 - STEP_PRIOR if len(bic) > 1 else 1.0
    weights = prior * np.exp(-0.5 * (bic - bic.min()))
    weights /= weights.sum()
    forecasts = [
        _cumulative(fits, future, x[:, -1])
        for fits, x, future in zip(parts, designs, futures, strict=True)
    ]
    means = np.concatenate([means for means, _ in forecasts])
    variances = np.concatenate([variances for _, variances in forecasts])
    cumulative = np.cumsum(means, axis=1)
    average = weights @ cumulative
    # The average's variance: each fit's own, plus its forecast's distance from the average
    # (centred first, so that a near-exact fit does not lose its few digits to cancellation).
    sd = np.sqrt(np.maximum(weights @ (variances + (cumulative - average) ** 2), 0.0))
    quantile = float(student_t.ppf(0.5 + level / 2, min(fits.df for fits in parts)))
    return _Remaining((weights @ means) * scale, sd * scale, quantile, Basis.trend_weekday_ar1)


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
