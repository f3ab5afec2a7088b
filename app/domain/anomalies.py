"""Cost anomalies per bucket (a day, or an hour where usage is metered) and what drove them.

**Detection** (:func:`detect`) is a seasonal-median decomposition with a MAD threshold, run
as a live detector: each bucket is judged from the ``cycles`` whole seasons just before it
and never from later buckets. The cost is taken on a log scale, ``z = log(cost + offset)``,
because cost noise grows with the level (a busy hour varies by more dollars than a quiet
one); the offset is the money floor ``min_deviation_micros``, so buckets near zero are
compared in money rather than as huge ratios. The window is cut into ``cycles`` blocks of
one season each, aligned so that every block starts at the judged bucket's season position:

* the drift is the median of the per-block slopes between every pair of blocks at every
  season position (Theil-Sen, pooled over the positions);
* the level is the median over the blocks of each block's median, moved on by the drift to
  the judged bucket's block;
* the seasonal index of a position is the median over the blocks of the value less its
  block's median;
* the noise of one bucket is the MAD of the lag-one-season differences, scaled by
  1.4826 / sqrt(2) to a standard deviation, widened by ``sqrt(1 + pi / (2 * cycles))`` for
  the error of a median of ``cycles`` values, and never below :data:`SIGMA_FLOOR`.

The expected value is the level plus the seasonal index, back on the money scale. A bucket
is an anomaly when its score (log deviation over noise: a robust z-score) is at least
``threshold`` and its money deviation at least ``min_deviation_micros``. The first
``cycles * season`` buckets are a warm-up and are never flagged. An anomaly in the window
moves none of the medians much (use an odd ``cycles``: the median of an even count averages
the middle two), so it does not distort what the next buckets are judged against; the
price is that a lasting change of level keeps being flagged until it fills about half the
window. This is the idea of Twitter's S-H-ESD (seasonal decomposition with medians, a MAD
scale) made causal and given a drift.

A noise-free periodic series is forecast exactly and never flagged, and one growing at a
constant rate nearly so (the offset bends the log a little near the floor); a steep trend
that is linear in money (doubling over the window) bends on the log scale and can be
flagged. Hourly buckets want a season of 168 wherever weekends differ from weekdays: with
24, weekend hours are judged against weekdays (on the hourly series of
bench/anomaly_detection.py, 70 false flags per 1,000 normal hours with 24, under 1 with
168). On that bench's series without anomalies, the score had a standard deviation of 1.0
on hourly buckets (3 cycles of 168) and 1.1 on daily ones (5 cycles of 7: 28 differences
estimate the noise, and their own error fattens the tails); the default threshold of 3.5
flagged 0.06% of the hourly buckets and 0.5% of the daily ones.

**Explanation** (:func:`explain`) compares an anomalous bucket's facts with a baseline (the
mean of a few normal buckets, by default those at the same season position in the cycles
before: :func:`baseline_indices`), optionally scaled to the detector's expected cost. Two
views of the deviation ``actual cost - baseline cost`` each add up to it exactly, in micros:

* *why* (the factors): cost is the product ``C = N * w * u * p * f`` of output tokens ``N``
  (volume), verified tokens per output token ``w = 1 + (drafted - accepted) / N`` (the
  acceptance factor: with k drafted tokens per step and token acceptance rate a,
  ``w = (k + 1) / (1 + k * a)``, which is the GPU work per output token under the meter's
  rule that GPU time follows scheduled tokens), GPU-seconds per verified token ``u``
  (prompt length, batching, hardware), request price per GPU-second ``p`` and the idle
  uplift ``f = C / (C - idle cost) = 1 / (1 - idle share)``. Each factor's effect is its
  Shapley value: the mean, over the 120 orders in which the five factors can switch from
  baseline to actual, of the cost change its own switch makes. Shapley values of a product
  add up to the change exactly and do not depend on an arbitrary order. Where a side has
  no output tokens, no request GPU time or no request cost, the product is undefined and
  the split is additive instead: volume takes the change in request cost, idle share the
  change in idle cost.
* *who* (each categorical dimension, e.g. team, session, model, method): a value's effect
  is the change of its cost; what a dimension does not cover (idle cost, say) is the
  value :data:`NOT_COVERED`.

The drivers come back as one list ranked by money, with one rule that keeps the list
useful: a categorical dimension whose cost shares hardly moved (all values moved together,
so it says only that everything grew) is *uninformative* and ranks after everything else,
as does :data:`NOT_COVERED`; and volume, which says that more was served but not by whom,
ranks by what is left of it after the largest same-signed move of a value in an
informative dimension. So a team's spike is headed by that team, a fall in acceptance by
acceptance, and growth everywhere by volume.
"""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from app.domain.errors import InvalidInput

SIGMA_FLOOR = 0.01
"""The noise of one bucket is never taken as less than 1% (on the log scale): a series that
never varied does not alert on a 2% move."""

MAD_TO_SD = 1.4826
"""MAD of a normal variable times this is its standard deviation."""

MIX_SHARE = 0.2
"""A categorical dimension is informative when the money that moved between its values
(half the sum of the values' changes beyond their share of the total change) is at least
this share of the deviation."""

NOT_COVERED = "(not covered)"
"""The value that carries the cost a categorical dimension does not cover."""


class Direction(StrEnum):
    spike = "spike"
    drop = "drop"


class Factor(StrEnum):
    """The multiplicative factors of a bucket's cost, in the order of the product."""

    volume = "volume"
    acceptance = "acceptance"
    gpu_time = "gpu_time"
    price = "price"
    idle_share = "idle_share"


@dataclass(frozen=True, slots=True, kw_only=True)
class Anomaly:
    """A bucket whose cost is far from what its history expects."""

    index: int
    """Position of the bucket in the series."""
    actual_micros: int
    expected_micros: int
    deviation_micros: int
    """``actual - expected``: positive for a spike, negative for a drop."""
    score: float
    """Log deviation over the noise of one bucket (a robust z-score)."""
    direction: Direction


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketFacts:
    """What one deployment (or team) cost and served in one bucket.

    Build it from the ledger and the usage records of the bucket: ``cost_micros`` the
    allocated cost including the idle line, ``idle_cost_micros`` the idle line, the token
    and GPU-second sums of the bucket's requests, and for each categorical dimension the
    ledger cost grouped by its values (``{"team": {"search": 120_000_000, ...}}``).
    """

    cost_micros: int
    idle_cost_micros: int = 0
    by_dimension: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    output_tokens: int = 0
    request_gpu_seconds: float = 0.0
    idle_gpu_seconds: float = 0.0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    def __post_init__(self) -> None:
        for name in (
            "cost_micros",
            "idle_cost_micros",
            "output_tokens",
            "draft_tokens",
            "accepted_tokens",
        ):
            _non_negative_int(name, getattr(self, name))
        if self.idle_cost_micros > self.cost_micros:
            raise InvalidInput(
                f"idle cost ({self.idle_cost_micros}) exceeds the bucket's cost "
                f"({self.cost_micros}); cost_micros must include the idle line"
            )
        if self.accepted_tokens > self.draft_tokens:
            raise InvalidInput(
                f"accepted tokens ({self.accepted_tokens}) exceed drafted tokens "
                f"({self.draft_tokens})"
            )
        for name in ("request_gpu_seconds", "idle_gpu_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"{name} must be finite and >= 0, got {value}")
        for dimension, values in self.by_dimension.items():
            if not dimension or dimension in Factor.__members__:
                raise InvalidInput(
                    f"dimension name {dimension!r} is empty or a factor's name "
                    f"({', '.join(Factor)})"
                )
            for value, micros in values.items():
                if value == NOT_COVERED:
                    raise InvalidInput(f"{NOT_COVERED!r} is reserved ({dimension})")
                if isinstance(micros, bool) or not isinstance(micros, int):
                    raise InvalidInput(
                        f"cost of {dimension}={value} must be integer micros, got {micros!r}"
                    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Driver:
    """One part of an anomaly's deviation, in money, with the measure that moved."""

    dimension: str
    """A :class:`Factor` or a categorical dimension (``team``, ``model``...)."""
    value: str | None
    """The categorical value, or None for a factor."""
    baseline: float | None
    """The measure in the baseline (the unit says which); None where it is undefined,
    e.g. the acceptance rate of a bucket that drafted nothing."""
    actual: float | None
    unit: str
    """``tokens``, ``rate`` (acceptance), ``gpu_s_per_token``, ``per_gpu_hour`` (micros per
    request GPU-hour), ``share`` (idle share of cost) or ``micros`` (a value's cost)."""
    effect_micros: int
    description: str


def _non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be a non-negative integer, got {value!r}")


# --- detection ------------------------------------------------------------------------------


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
    """Anomalous buckets of a cost series, oldest first (see the module's notes).

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


# --- explanation ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Side:
    """Summed (or averaged) facts of one side of the comparison, in floats."""

    cost: float
    idle: float
    tokens: float
    request_gpu_s: float
    draft: float
    accepted: float
    dims: dict[str, dict[str, float]]

    def scaled(self, factor: float) -> "_Side":
        return _Side(
            cost=self.cost * factor,
            idle=self.idle * factor,
            tokens=self.tokens * factor,
            request_gpu_s=self.request_gpu_s * factor,
            draft=self.draft * factor,
            accepted=self.accepted * factor,
            dims={d: {v: c * factor for v, c in vs.items()} for d, vs in self.dims.items()},
        )

    @property
    def regular(self) -> bool:
        """Whether the factors of the product are all defined and positive."""
        return self.tokens > 0 and self.request_gpu_s > 0 and self.cost - self.idle > 0

    def factors(self) -> dict[Factor, float]:
        verified = 1 + (self.draft - self.accepted) / self.tokens
        request_cost = self.cost - self.idle
        return {
            Factor.volume: self.tokens,
            Factor.acceptance: verified,
            Factor.gpu_time: self.request_gpu_s / (self.tokens * verified),
            Factor.price: request_cost / self.request_gpu_s,
            Factor.idle_share: self.cost / request_cost,
        }


def _mean_side(facts: Sequence[BucketFacts]) -> _Side:
    n = len(facts)
    dims: dict[str, dict[str, float]] = {}
    for item in facts:
        for dimension, values in item.by_dimension.items():
            target = dims.setdefault(dimension, {})
            for value, micros in values.items():
                target[value] = target.get(value, 0.0) + micros / n
    return _Side(
        cost=sum(f.cost_micros for f in facts) / n,
        idle=sum(f.idle_cost_micros for f in facts) / n,
        tokens=sum(f.output_tokens for f in facts) / n,
        request_gpu_s=sum(f.request_gpu_seconds for f in facts) / n,
        draft=sum(f.draft_tokens for f in facts) / n,
        accepted=sum(f.accepted_tokens for f in facts) / n,
        dims=dims,
    )


def _apportion(values: Sequence[float], total: int) -> list[int]:
    """Integers that add up to ``total``: the floors of finite ``values``, with what is left
    spread evenly and its remainder given to the largest fractional parts."""
    floors = [math.floor(v) for v in values]
    share, extra = divmod(total - sum(floors), len(values))
    order = sorted(range(len(values)), key=lambda i: (floors[i] - values[i], i))
    result = [f + share for f in floors]
    for i in order[:extra]:
        result[i] += 1
    return result


def _shapley(before: Mapping[Factor, float], after: Mapping[Factor, float]) -> list[float]:
    """Shapley values of each factor of the product for the switch ``before -> after``."""
    names = list(Factor)
    n = len(names)
    effects = []
    for k, name in enumerate(names):
        others = [i for i in range(n) if i != k]
        effect = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for switched in itertools.combinations(others, size):
                product = math.prod(
                    after[names[i]] if i in switched else before[names[i]] for i in others
                )
                effect += weight * product * (after[name] - before[name])
        effects.append(effect)
    return effects


def _money(micros: float) -> str:
    return f"{micros / 1e6:,.2f}"


def _signed(micros: int) -> str:
    return f"{'+' if micros >= 0 else '-'}{abs(micros) / 1e6:,.2f}"


def _factor_drivers(base: _Side, actual: _Side, deviation: int) -> list[Driver]:
    before: Mapping[Factor, float] = {}
    after: Mapping[Factor, float] = {}
    raw: list[float] = []
    if base.regular and actual.regular:
        before, after = base.factors(), actual.factors()
        raw = _shapley(before, after)
        # Factors of wildly different sizes (a bucket with next to no GPU time) can lose the
        # sum to rounding: such a bucket gets the additive split.
        tolerance = 1 + 1e-9 * (actual.cost + base.cost)
        if (
            not all(map(math.isfinite, raw))
            or abs(sum(raw) - (actual.cost - base.cost)) > tolerance
        ):
            before, after, raw = {}, {}, []
    if not raw:
        additive = {
            Factor.volume: (actual.cost - actual.idle) - (base.cost - base.idle),
            Factor.idle_share: actual.idle - base.idle,
        }
        raw = [additive.get(factor, 0.0) for factor in Factor]
    effects = _apportion(raw, deviation)

    def rate(side: _Side) -> float | None:
        return side.accepted / side.draft if side.draft > 0 else None

    def share(side: _Side) -> float | None:
        return side.idle / side.cost if side.cost > 0 else None

    measures: dict[Factor, tuple[float | None, float | None, str]] = {
        Factor.volume: (base.tokens, actual.tokens, "tokens"),
        Factor.acceptance: (rate(base), rate(actual), "rate"),
        Factor.gpu_time: (
            before.get(Factor.gpu_time),
            after.get(Factor.gpu_time),
            "gpu_s_per_token",
        ),
        Factor.price: (
            before[Factor.price] * 3600 if before else None,
            after[Factor.price] * 3600 if after else None,
            "per_gpu_hour",
        ),
        Factor.idle_share: (share(base), share(actual), "share"),
    }
    drivers = []
    for factor, effect in zip(Factor, effects, strict=True):
        low, high, unit = measures[factor]
        drivers.append(
            Driver(
                dimension=factor,
                value=None,
                baseline=low,
                actual=high,
                unit=unit,
                effect_micros=effect,
                description=_describe(factor, low, high, before, after, effect),
            )
        )
    return drivers


def _describe(
    factor: Factor,
    low: float | None,
    high: float | None,
    before: Mapping[Factor, float],
    after: Mapping[Factor, float],
    effect: int,
) -> str:
    def show(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    money = _signed(effect)
    if factor is Factor.volume:
        return f"output tokens {show(low, ',.0f')} -> {show(high, ',.0f')}: {money}"
    if factor is Factor.acceptance:
        verified = (
            f" (verified tokens per output token {before[factor]:.2f} -> {after[factor]:.2f})"
            if before
            else ""
        )
        return f"acceptance rate {show(low, '.1%')} -> {show(high, '.1%')}{verified}: {money}"
    if factor is Factor.gpu_time:
        return (
            f"GPU-seconds per verified token {show(low, '.3g')} -> {show(high, '.3g')} "
            f"(prompt length, batching, hardware): {money}"
        )
    if factor is Factor.price:
        prices = (
            f"{_money(low)} -> {_money(high)}" if low is not None and high is not None else "n/a"
        )
        return f"price per request GPU-hour {prices}: {money}"
    return f"idle share of cost {show(low, '.1%')} -> {show(high, '.1%')}: {money}"


def _dimension_drivers(base: _Side, actual: _Side, deviation: int) -> tuple[list[Driver], set[str]]:
    """Per categorical dimension, each value's change; and the informative dimensions."""
    drivers: list[Driver] = []
    informative: set[str] = set()
    total_change = actual.cost - base.cost
    for dimension in sorted(set(base.dims) | set(actual.dims)):
        before, after = base.dims.get(dimension, {}), actual.dims.get(dimension, {})
        values = sorted(set(before) | set(after))
        pairs = [(before.get(v, 0.0), after.get(v, 0.0)) for v in values]
        rest = (base.cost - sum(b for b, _ in pairs), actual.cost - sum(a for _, a in pairs))
        if not values or abs(rest[0]) >= 0.5 or abs(rest[1]) >= 0.5:
            values.append(NOT_COVERED)
            pairs.append(rest)
        effects = _apportion([a - b for b, a in pairs], deviation)
        if base.cost > 0:
            mix = sum(abs((a - b) - b / base.cost * total_change) for b, a in pairs) / 2
            if mix >= MIX_SHARE * abs(total_change):
                informative.add(dimension)
        else:
            informative.add(dimension)
        for value, (low, high), effect in zip(values, pairs, effects, strict=True):
            drivers.append(
                Driver(
                    dimension=dimension,
                    value=value,
                    baseline=low,
                    actual=high,
                    unit="micros",
                    effect_micros=effect,
                    description=(
                        f"{dimension}={value} cost {_money(low)} -> {_money(high)}: "
                        f"{_signed(effect)}"
                    ),
                )
            )
    return drivers, informative


def explain(
    anomalous: BucketFacts,
    baseline: Sequence[BucketFacts],
    *,
    expected_micros: int | None = None,
) -> list[Driver]:
    """What drove a bucket's cost away from its baseline, ranked by money (see the module's
    notes for the two views and the ranking).

    Args:
        anomalous: The bucket's facts.
        baseline: Normal buckets to compare with; their mean is the baseline (e.g. the
            buckets at :func:`baseline_indices`, less any that were anomalous themselves).
        expected_micros: The detector's expected cost (:attr:`Anomaly.expected_micros`).
            When given, every amount of the baseline is scaled so its cost is this (the
            usual mix at the expected level), and the deviation explained is the
            detector's. Otherwise it is ``anomalous.cost_micros - round(mean baseline
            cost)``.

    Returns:
        Drivers whose factors (:class:`Factor`) add up to the deviation exactly, as do
        the values of each categorical dimension.

    Raises:
        InvalidInput: If the baseline is empty, or an expected cost is given for a baseline
            that cost nothing.
    """
    if not baseline:
        raise InvalidInput("the baseline needs at least one bucket")
    base = _mean_side(baseline)
    if expected_micros is not None:
        _non_negative_int("expected_micros", expected_micros)
        if base.cost <= 0:
            raise InvalidInput(
                "cannot scale a baseline that cost nothing to an expected cost; pass "
                "expected_micros=None"
            )
        base = base.scaled(expected_micros / base.cost)
    actual = _mean_side([anomalous])
    deviation = anomalous.cost_micros - round(base.cost)
    factors = _factor_drivers(base, actual, deviation)
    by_value, informative = _dimension_drivers(base, actual, deviation)

    specific = [
        d.effect_micros for d in by_value if d.dimension in informative and d.value != NOT_COVERED
    ]

    def rank(driver: Driver) -> tuple[int, int]:
        """(tier, minus the money it ranks by): the list sorts on this."""
        money = abs(driver.effect_micros)
        if driver.dimension == Factor.volume:
            same_sign = [abs(e) for e in specific if e * driver.effect_micros > 0]
            return 0, -max(money - max(same_sign, default=0), 0)
        if driver.value is None or (
            driver.dimension in informative and driver.value != NOT_COVERED
        ):
            return 0, -money
        return 1, -money

    return sorted(factors + by_value, key=rank)
