"""Quoted figures as claims, checked against what the tier model computes.

The product brief quotes, per tier, a monthly cost range and a cost per 1K session-seconds,
and a speedup for the whole architecture. Each is a claim: :func:`check_monthly_cost`,
:func:`check_session_second_cost` and :func:`check_speedup` say whether the computed figure
lies within, below or above it (:func:`range_verdict`), and why, in the model's own terms:

* monthly cost ``= instances x on-demand price per hour x hours a month`` (instance-hours are
  the only cost component modelled), so a quote is met by changing one of those three;
* cost per 1K session-seconds ``= fleet price per second x 1000 / concurrent sessions``
  (:mod:`app.breakeven.rules.tier_costs`), so a quote is met at one session count;
* speedup ``= E x t(B, 1) / t_spec(B, k)`` (:mod:`app.breakeven.rules.model`), so a quote
  needs an acceptance length ``E``, which cannot exceed ``k + 1``.

Money is integer micros; :func:`usd` writes it for people.
"""

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from app.breakeven.rules.model import (
    SpeculationModel,
    StepTimeModel,
    acceptance_needed,
    speedup,
)
from app.breakeven.rules.tier_costs import SECONDS_PER_HOUR
from app.domain.errors import InvalidInput
from app.domain.money import micros_to_decimal


class RangeVerdict(StrEnum):
    """Where a computed figure lies against a quoted one."""

    within = "within"
    """The computed range and the quoted range overlap."""
    below = "below"
    """All of the computed range lies under the quote's bottom."""
    above = "above"
    """All of the computed range lies over the quote's top."""


def range_verdict(computed: tuple[float, float], quoted: tuple[float, float]) -> RangeVerdict:
    """Compare a computed ``(low, high)`` with a quoted ``(low, high)``; a single figure is
    a range with equal ends.

    Raises:
        InvalidInput: If a range is not finite or its low end exceeds its high end.
    """
    for name, (low, high) in (("computed", computed), ("quoted", quoted)):
        if not (math.isfinite(low) and math.isfinite(high) and low <= high):
            raise InvalidInput(f"{name} range must be finite with low <= high, got {low}-{high}")
    if computed[0] > quoted[1]:
        return RangeVerdict.above
    if computed[1] < quoted[0]:
        return RangeVerdict.below
    return RangeVerdict.within


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetTerms:
    """The terms of a tier's computed cost: instance-hours are its only cost component."""

    instance_type: str
    instance_usd_micros_per_hour: int
    """On-demand price of one instance."""
    gpus_per_instance: int
    instances_min: int
    instances_max: int
    hours_per_month: float
    """Hours each instance runs in a month (730: around the clock)."""
    sessions_min: int
    sessions_max: int
    """Concurrent sessions the figure is computed for (the tier's range, or one load)."""
    scope: str = "the tier"
    """Whose sizes and sessions these are, for reasons: ``the tier``, ``this load``."""

    def monthly_micros(self, instances: int) -> int:
        """``instances x price per hour x hours per month``."""
        return round(instances * self.instance_usd_micros_per_hour * self.hours_per_month)

    def per_1k_session_seconds_micros(self, instances: int, sessions: float) -> int:
        """The fleet's price per second x 1000 over the concurrent sessions."""
        return round(
            instances * self.instance_usd_micros_per_hour * 1000 / (SECONDS_PER_HOUR * sessions)
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class CostCheck:
    """A quoted cost against the computed one."""

    claim: str
    """``usd_per_month`` or ``usd_per_1k_session_seconds``."""
    verdict: RangeVerdict
    computed_micros: tuple[int, int]
    """Over the tier's sizes (and, per session-second, its session range)."""
    quoted_micros: tuple[int, int]
    reason: str
    """Which terms put the computed figure where it is, and what the quote would need."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedupCheck:
    """A quoted speedup against the modelled one over a tier's batch sizes."""

    verdict: RangeVerdict
    computed: tuple[float, float]
    quoted: float
    per_replica_concurrency: tuple[float, float]
    reason: str


def usd(micros: int | float) -> str:
    """Dollars for people: cents from $100 up, else every significant micro (``$0.12``)."""
    amount = micros_to_decimal(round(micros))
    if abs(amount) >= 100:
        return f"${amount:,.2f}"
    text = f"{amount.normalize():f}"
    return f"${text if '.' in text else text + '.00'}"


def _share(value: float) -> str:
    return f"{value:.0%}"


def _of(instances: int, terms: FleetTerms) -> str:
    gpus = instances * terms.gpus_per_instance
    return f"{instances} x {terms.instance_type} ({gpus} GPUs)"


def check_monthly_cost(terms: FleetTerms, *, quoted_micros: tuple[int, int]) -> CostCheck:
    """The quoted monthly cost range against ``instances x price x hours`` over the tier's sizes.

    Args:
        terms: Price, sizes and hours of the tier.
        quoted_micros: The quote's ``(low, high)`` in USD micros, ``low <= high``.

    Returns:
        The verdict and its reason: what the quote would need of each term (instances, hours
        a month, price per instance-hour) for the computed figure to meet it.
    """
    low, high = terms.monthly_micros(terms.instances_min), terms.monthly_micros(terms.instances_max)
    verdict = range_verdict((low, high), quoted_micros)
    price, hours = terms.instance_usd_micros_per_hour, terms.hours_per_month
    sizes = (
        f"{terms.instances_min}"
        if terms.instances_min == terms.instances_max
        else f"{terms.instances_min}-{terms.instances_max}"
    )
    head = (
        f"{sizes} x {terms.instance_type} at {usd(price)}/h on demand for {hours:g} h a month "
        f"cost {usd(low)}" + (f"-{usd(high)}" if high != low else "")
    )
    if verdict is RangeVerdict.within:
        reason = f"{head}, which meets the quoted {usd(quoted_micros[0])}-{usd(quoted_micros[1])}"
    elif verdict is RangeVerdict.above:
        top, n = quoted_micros[1], terms.instances_min
        size = _of(n, terms) if high == low else f"the cheapest size, {_of(n, terms)},"
        reason = (
            f"{head}: {size} is {low / top:.2f}x the quoted top of "
            f"{usd(top)}. Instance-hours are the model's only cost component, so the quote holds "
            f"only with {top / (price * hours):.2f} instances running all month, or {n} running "
            f"{top / (n * price):.0f} h a month ({_share(top / (n * price * hours))} of "
            f"{hours:g} h), or at {usd(top / (n * hours))} per instance-hour "
            f"({_share(1 - top / low)} below the on-demand price)"
        )
    else:
        bottom, n = quoted_micros[0], terms.instances_max
        size = _of(n, terms) if high == low else f"the largest size, {_of(n, terms)},"
        reason = (
            f"{head}: {size} is {high / bottom:.2f}x the quoted "
            f"bottom of {usd(bottom)}. The quote would buy {bottom / (price * hours):.2f} "
            f"instances all month, or {n} at {usd(bottom / (n * hours))} per instance-hour; "
            f"else {usd(bottom - high)} a month goes to costs the model leaves out (storage, "
            "networking, support)"
        )
    return CostCheck(
        claim="usd_per_month",
        verdict=verdict,
        computed_micros=(low, high),
        quoted_micros=quoted_micros,
        reason=reason,
    )


def check_session_second_cost(terms: FleetTerms, *, quoted_micros: int) -> CostCheck:
    """The quoted cost per 1K session-seconds against the fleet's price over its sessions.

    The computed range runs from the cheapest point (fewest instances, most sessions) to the
    dearest (most instances, fewest sessions).

    Args:
        terms: Price, sizes and session range of the tier.
        quoted_micros: The quoted figure in USD micros per 1K session-seconds, > 0.

    Returns:
        The verdict and its reason: the concurrent sessions at which the fleet's price meets
        the quote, against the tier's session range.

    Raises:
        InvalidInput: If the quote is not positive.
    """
    if quoted_micros <= 0:
        raise InvalidInput(f"a quoted cost per 1K session-seconds must be > 0, got {quoted_micros}")
    n_min, n_max = terms.instances_min, terms.instances_max
    s_min, s_max = terms.sessions_min, terms.sessions_max
    low = terms.per_1k_session_seconds_micros(n_min, s_max)
    high = terms.per_1k_session_seconds_micros(n_max, s_min)
    verdict = range_verdict((low, high), (quoted_micros, quoted_micros))
    price = terms.instance_usd_micros_per_hour

    def sessions_at_quote(instances: int) -> float:
        return instances * price * 1000 / (SECONDS_PER_HOUR * quoted_micros)

    rule = "cost per 1K session-seconds is the fleet's price per second x 1000 / sessions"
    quote = usd(quoted_micros)
    if verdict is RangeVerdict.within:
        n = next(
            (n for n in range(n_min, n_max + 1) if s_min <= sessions_at_quote(n) <= s_max), n_min
        )
        reason = (
            f"{rule}: the quoted {quote} is reached at {sessions_at_quote(n):.1f} concurrent "
            f"sessions on {_of(n, terms)} at {usd(price)}/h each ({terms.scope}: "
            f"{s_min}-{s_max} sessions); computed {usd(low)}-{usd(high)}"
        )
    elif verdict is RangeVerdict.above:
        reason = (
            f"{rule}: the cheapest point, {_of(n_min, terms)} at {usd(price)}/h each with "
            f"{s_max} sessions, costs {usd(low)}; the quoted {quote} needs "
            f"{sessions_at_quote(n_min):.0f} concurrent sessions around the clock, more than "
            f"{terms.scope}'s {s_max}, or {usd(quoted_micros * SECONDS_PER_HOUR / 1000 * s_max / n_min)} per "
            "instance-hour"
        )
    else:
        reason = (
            f"{rule}: the dearest point, {_of(n_max, terms)} with {s_min} sessions, costs "
            f"{usd(high)}; the quoted {quote} would mean {sessions_at_quote(n_max):.1f} "
            f"sessions on {n_max} instance(s), fewer than {terms.scope}'s {s_min}"
        )
    return CostCheck(
        claim="usd_per_1k_session_seconds",
        verdict=verdict,
        computed_micros=(low, high),
        quoted_micros=(quoted_micros, quoted_micros),
        reason=reason,
    )


def check_speedup(
    step: StepTimeModel,
    spec: SpeculationModel,
    *,
    per_replica_concurrency: tuple[float, float],
    quoted: float,
    points: int = 33,
) -> SpeedupCheck:
    """A quoted speedup against the modelled ``E x t(B, 1) / t_spec(B, k)`` over a batch range.

    Args:
        step: Step-time model of one replica.
        spec: The tier's speculative configuration.
        per_replica_concurrency: ``(low, high)`` sequences per replica the tier runs, > 0.
        quoted: The quoted speedup, > 0.
        points: Grid points on the log-concurrency axis.

    Returns:
        The verdict and its reason: the acceptance length the quote needs at the tier's
        lightest load, against ``k + 1`` (the most a step can emit).

    Raises:
        InvalidInput: If the range or the quote is not positive.
    """
    low_b, high_b = per_replica_concurrency
    if not (0.0 < low_b <= high_b and math.isfinite(high_b)) or not quoted > 0:
        raise InvalidInput(
            f"need 0 < low <= high concurrency and a positive quote, got "
            f"{low_b}-{high_b} and {quoted}"
        )
    grid = np.geomspace(low_b, high_b, points)
    curve = speedup(step, spec, concurrency=grid)
    computed = (float(curve.min()), float(curve.max()))
    verdict = range_verdict(computed, (quoted, quoted))
    at_one = float(speedup(step, spec, concurrency=1.0))
    need = acceptance_needed(step, spec, concurrency=low_b, target_speedup=quoted)
    terms = (
        f"speedup = E x t(B,1) / t_spec(B,k) with E = {spec.mean_acceptance_length:.2f} tokens "
        f"per step at k={spec.k}: {float(curve[0]):.2f}x at {low_b:.3g} to {float(curve[-1]):.2f}x "
        f"at {high_b:.3g} sequences per replica ({at_one:.2f}x at batch one)"
    )
    if need.alpha is None:
        needs = (
            f"{quoted:g}x at {low_b:.3g} per replica needs E = {need.mean_acceptance_length:.2f}, "
            f"more than k+1 = {spec.k + 1}: out of reach at k={spec.k} whatever the acceptance"
        )
    else:
        needs = (
            f"{quoted:g}x at {low_b:.3g} per replica needs E = {need.mean_acceptance_length:.2f} "
            f"(alpha {need.alpha:.2f})"
        )
    reason = {
        RangeVerdict.within: f"{terms}; the quoted {quoted:g}x lies in that range",
        RangeVerdict.below: f"{terms}; {needs}",
        RangeVerdict.above: f"{terms}: more than the quoted {quoted:g}x everywhere",
    }[verdict]
    return SpeedupCheck(
        verdict=verdict,
        computed=computed,
        quoted=quoted,
        per_replica_concurrency=per_replica_concurrency,
        reason=reason,
    )
