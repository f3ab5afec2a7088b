"""Live detection of anomalous buckets (:func:`detect`): each bucket is judged from the whole
seasons just before it, by a seasonal-median decomposition with a Theil-Sen drift on the
log scale and a MAD noise; :func:`expected_at` is what the detector expects at one bucket,
and :func:`baseline_indices` the buckets that :func:`.drivers.explain` compares with by
default. The method and its measured false-flag rates are in the notes of
:mod:`app.anomalies.rules`.
"""

import itertools
import math
from collections.abc import Sequence

import numpy as np

from app.anomalies.rules.values import Anomaly, Direction, _non_negative_int
from app.domain.errors import InvalidInput

SIGMA_FLOOR = 0.01
"""The noise of one bucket is never taken as less than 1% (on the log scale): a series that
never varied does not alert on a 2% move."""

MAD_TO_SD = 1.4826
"""MAD of a normal variable times this is its standard deviation."""


def _check_detector(season: int, cycles: int, threshold: float, min_deviation: int) -> None:
    if isinstance(season, bool) or not isinstance(season, int) or season < 1:
        raise InvalidInput(f"season must be a positive number of buckets, got {season!r}")
    if isinstance(cycles, bool) or not isinstance(cycles, int) or cycles < 3:
        raise InvalidInput(f"cycles must be an integer >= 3 (medians need 3), got {cycles!r}")
    if not math.isfinite(threshold) or threshold <= 0:
        raise InvalidInput(f"threshold must be positive, got {threshold}")
    _non_negative_int("min_deviation_micros", min_deviation)


def _series(values: Sequence[int]) -> np.ndarray:
    for position, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(
                f"costs must be non-negative integer micros; bucket {position} is {value!r} "
                "(net credits out before detecting)"
            )
    return np.asarray(values, dtype=np.float64)


def _forecast(window: np.ndarray, *, floor: float) -> tuple[float, float, float]:
    """The next bucket after ``window`` (shape ``cycles x season``, oldest block first,
    each block starting at the next bucket's season position).

    Returns:
        ``(expected log value, noise of one bucket on the log scale, offset)``.
    """
    cycles = window.shape[0]
    offset = max(floor, 1.0)
    z = np.log(window + offset)
    diffs = np.diff(z, axis=0).ravel()
    drift = float(
        np.median([(z[b] - z[a]) / (b - a) for a, b in itertools.combinations(range(cycles), 2)])
    )
    levels = np.median(z, axis=1)
    seasonal = np.median(z - levels[:, None], axis=0)
    level = float(np.median(levels - drift * np.arange(cycles))) + drift * cycles
    mad = float(np.median(np.abs(diffs - drift)))
    sigma = MAD_TO_SD * mad / math.sqrt(2) * math.sqrt(1 + math.pi / (2 * cycles))
    return level + float(seasonal[0]), max(sigma, SIGMA_FLOOR), offset


def expected_at(
    series: Sequence[int],
    index: int,
    *,
    season: int,
    cycles: int = 5,
    min_deviation_micros: int = 1_000_000,
) -> tuple[int, float]:
    """What the detector expects at ``index`` from the buckets before it.

    Returns:
        ``(expected cost in micros, noise of one bucket on the log scale)``.

    Raises:
        InvalidInput: On bad parameters, a bad series, or an index inside the warm-up.
    """
    _check_detector(season, cycles, 1.0, min_deviation_micros)
    if not cycles * season <= index < len(series):
        raise InvalidInput(
            f"index {index} must lie in [{cycles * season}, {len(series)}): the detector "
            f"needs {cycles} whole seasons of {season} buckets before it"
        )
    values = _series(series[:index])
    window = values[index - cycles * season : index].reshape(cycles, season)
    z_hat, sigma, offset = _forecast(window, floor=float(min_deviation_micros))
    return max(round(math.exp(z_hat) - offset), 0), sigma


def detect(
    series: Sequence[int],
    *,
    season: int,
    cycles: int = 5,
    threshold: float = 3.5,
    min_deviation_micros: int = 1_000_000,
) -> list[Anomaly]:
    """Anomalous buckets of a cost series, oldest first (see the notes of
    :mod:`app.anomalies.rules`).

    Args:
        series: Cost per bucket in micros, oldest first, without gaps (a bucket with no
            cost is 0).
        season: Buckets per season: 7 for daily buckets; 168 for hourly ones, or 24 where
            every day of the week looks alike.
        cycles: Whole seasons of history each bucket is judged from (>= 3); the first
            ``cycles * season`` buckets are a warm-up and never flagged.
        threshold: Robust z-score (log deviation over the noise of one bucket) from which
            a bucket is flagged.
        min_deviation_micros: Money deviation below which nothing is flagged (default one
            currency unit).

    Raises:
        InvalidInput: On a negative or non-integer cost or bad parameters.
    """
    _check_detector(season, cycles, threshold, min_deviation_micros)
    values = _series(series)
    span = cycles * season
    found: list[Anomaly] = []
    for index in range(span, len(values)):
        window = values[index - span : index].reshape(cycles, season)
        z_hat, sigma, offset = _forecast(window, floor=float(min_deviation_micros))
        actual = int(series[index])
        score = (math.log(actual + offset) - z_hat) / sigma
        expected = max(round(math.exp(z_hat) - offset), 0)
        deviation = actual - expected
        if abs(score) >= threshold and abs(deviation) >= min_deviation_micros:
            found.append(
                Anomaly(
                    index=index,
                    actual_micros=actual,
                    expected_micros=expected,
                    deviation_micros=deviation,
                    score=score,
                    direction=Direction.spike if deviation > 0 else Direction.drop,
                )
            )
    return found


def baseline_indices(index: int, *, season: int, cycles: int = 5) -> list[int]:
    """The buckets at the same season position in the ``cycles`` seasons before ``index``
    (those that exist), newest first: the default baseline for :func:`explain`."""
    if season < 1 or cycles < 1:
        raise InvalidInput(f"season and cycles must be positive, got {season}, {cycles}")
    return [index - j * season for j in range(1, cycles + 1) if index - j * season >= 0]
