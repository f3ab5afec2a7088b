"""What drove an anomalous bucket's cost away from its baseline (:func:`explain`): the five
factors of the cost's product split by their Shapley values (or additively where the
product is undefined), each categorical value's change of cost, both apportioned to add up
to the deviation in micros, and one list ranked by money that puts uninformative
dimensions last and volume after the move that explains it. The views and the ranking rule
are in the notes of :mod:`app.anomalies.rules`.
"""

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from app.anomalies.rules.values import (
    NOT_COVERED,
    BucketFacts,
    Driver,
    Factor,
    _non_negative_int,
    verified_per_output_token,
)
from app.domain.errors import InvalidInput

MIX_SHARE = 0.2
"""A categorical dimension is informative when the money that moved between its values
(half the sum of the values' changes beyond their share of the total change) is at least
this share of the deviation."""


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
        verified = verified_per_output_token(
            drafted=self.draft, accepted=self.accepted, output=self.tokens
        )
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
    """What drove a bucket's cost away from its baseline, ranked by money (see the notes of
    :mod:`app.anomalies.rules` for the two views and the ranking).

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
        InvalidInput: If the baseline is empty, or an expected cost above 0 is given for a
            baseline that cost nothing.
    """
    if not baseline:
        raise InvalidInput("the baseline needs at least one bucket")
    base = _mean_side(baseline)
    if expected_micros is not None:
        _non_negative_int("expected_micros", expected_micros)
        if base.cost <= 0 < expected_micros:
            raise InvalidInput(
                "cannot scale a baseline that cost nothing to an expected cost; pass "
                "expected_micros=None"
            )
        if base.cost > 0:  # a baseline that cost nothing is already what was expected: 0
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
