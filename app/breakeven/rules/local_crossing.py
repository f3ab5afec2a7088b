"""The breakeven from the measurements near it: a model-free interval for the crossing.

The step-time model is an approximation of the engine (a drafter whose cost grows with the
batch, for one, is not in it), so an interval from the residuals of that one model is too
narrow where the model is biased: on generated sweeps its 95% interval held the true
crossing about half the time. This module estimates the crossing from the levels that
bracket it instead: the measured log speedup ``y = mean log(spec) - mean log(plain)`` at
each level is close to a straight line in ``x = log(concurrency)`` over the few levels
around the sign change, so a weighted line through the bracketing pair and one level on
each side gives ``x0 = -a / b``, and Fieller's theorem gives its interval: the ``x`` where
the line's value is within ``t`` standard errors of zero. The noise of one throughput comes
from the fit's residuals (which include the model's misfit, so it errs wide) with their
degrees of freedom; repeated rows at a level shrink that level's variance. When the slope
is not clearly away from zero, Fieller's set is unbounded: the data cannot pin the
crossing down, and :func:`next_levels` says where to measure.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from app.breakeven.rules.sweep import ConfigSweep

WINDOW_NEIGHBOURS = 0
"""Levels taken on each side of the bracketing pair for the local line."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LocalCrossing:
    """The crossing of the measured speedup through 1, from the levels around it."""

    estimate: float
    """Concurrency where the local line crosses zero log speedup."""
    interval: tuple[float, float] | None
    """Fieller interval, or None when it is unbounded (the slope is not significant)."""
    bracket: tuple[float, float]
    """The measured levels between which the speedup falls through 1."""
    levels_used: tuple[float, ...]


def _level_means(config: ConfigSweep) -> dict[float, tuple[float, int]]:
    """Per level: mean log throughput and how many rows measured it."""
    found: dict[float, list[float]] = {}
    for level, rate in zip(config.concurrency, config.tokens_per_s, strict=True):
        found.setdefault(level, []).append(math.log(rate))
    return {level: (float(np.mean(logs)), len(logs)) for level, logs in found.items()}


def local_crossing(
    baseline: ConfigSweep,
    config: ConfigSweep,
    *,
    sigma: float,
    df: int,
    confidence: float,
) -> LocalCrossing | None:
    """The measured crossing and its Fieller interval, or None when the measured speedup
    never falls through 1 between two shared levels.

    Args:
        baseline, config: The plain and the speculative config's rows.
        sigma: Standard deviation of one row's log throughput.
        df: Degrees of freedom of ``sigma``.
        confidence: Two-sided coverage of the interval.
    """
    plain, spec = _level_means(baseline), _level_means(config)
    levels = sorted(set(plain) & set(spec))
    y = np.array([spec[c][0] - plain[c][0] for c in levels])
    # A level's variance is sigma^2 times this: more runs, less variance.
    runs_factor = np.array([1 / spec[c][1] + 1 / plain[c][1] for c in levels])
    falls = [i for i in range(len(levels) - 1) if y[i] > 0 >= y[i + 1]]
    if not falls:
        return None
    first = falls[0]
    window = range(
        max(first - WINDOW_NEIGHBOURS, 0), min(first + 2 + WINDOW_NEIGHBOURS, len(levels))
    )
    x = np.log([levels[i] for i in window])
    weights = 1 / runs_factor[list(window)]
    design = np.column_stack([np.ones_like(x), x])
    unscaled = np.linalg.inv(design.T @ (design * weights[:, None]))
    a, b = unscaled @ (design.T @ (weights * y[list(window)]))
    covariance = sigma**2 * unscaled
    quantile = float(student_t.ppf(0.5 + confidence / 2, max(df, 1)))
    x0 = -a / b
    interval = (x0, x0) if sigma <= 0 else _fieller(a, b, covariance, quantile)
    return LocalCrossing(
        estimate=math.exp(x0),
        interval=None if interval is None else (math.exp(interval[0]), math.exp(interval[1])),
        bracket=(levels[first], levels[first + 1]),
        levels_used=tuple(levels[i] for i in window),
    )


def _fieller(
    a: float, b: float, covariance: np.ndarray, quantile: float
) -> tuple[float, float] | None:
    """The ``x`` with ``(a + b x)^2 <= q^2 var(a + b x)``, when that set is an interval."""
    q2 = quantile**2
    va, cab, vb = covariance[0, 0], covariance[0, 1], covariance[1, 1]
    quad, half_lin, const = b * b - q2 * vb, a * b - q2 * cab, a * a - q2 * va
    if quad <= 0:
        return None
    # With quad > 0 the discriminant is q^2 * b^2 * var(a + b x0) >= 0; below 0 is rounding.
    spread = math.sqrt(max(half_lin * half_lin - quad * const, 0.0))
    return (-half_lin - spread) / quad, (-half_lin + spread) / quad


def next_levels(
    estimate: float, interval: tuple[float, float] | None, measured: Sequence[float]
) -> tuple[int, ...]:
    """Concurrency levels to measure next to pin a crossing down: the estimate and the
    geometric midpoints between it and the ends of the interval (half and twice the
    estimate for an end that is missing or unbounded), rounded, without levels already
    measured."""
    low, high = interval if interval is not None else (0.0, math.inf)
    low = low if math.isfinite(low) and low > 0 else estimate / 2
    high = high if math.isfinite(high) else estimate * 2
    low, high = max(low, 1.0), max(high, 1.0)
    wanted = {round(v) for v in (math.sqrt(low * estimate), estimate, math.sqrt(estimate * high))}
    return tuple(sorted(level for level in wanted if level >= 1 and level not in set(measured)))
