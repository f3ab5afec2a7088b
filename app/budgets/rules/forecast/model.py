"""The full model (``trend_weekday_ar1``): one-off days set back in line, feasible GLS fits with
AR(1) errors of a linear trend plus weekday levels, with and without a level step on each
candidate day, and the BIC-weighted average of their forecasts with its variance (the
coefficients' doubt, the future errors and the spread between the fits). Why this model,
and what it does not know, is in the notes of :mod:`app.budgets.rules.forecast`.
"""

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from app.budgets.rules.forecast.values import Basis, FloatArray, IntArray, _Remaining

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
    a step on each candidate day (see the notes of :mod:`app.budgets.rules.forecast`)."""
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
