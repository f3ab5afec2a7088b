"""Waste findings (pure): the acceptance bounds (Wilson's, and clustered by request on
correlated traffic), monthly scaling, k advice, the three finders."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.breakeven.rules.curve import BreakevenCurve, speedup_at
from app.domain.errors import InvalidInput
from app.domain.findings import (
    SECONDS_PER_MONTH,
    AcceptanceGroup,
    FindingKind,
    Scope,
    Thresholds,
    monthly,
    monthly_total,
)
from app.waste.rules import (
    BreakevenExposure,
    IdleExposure,
    above_breakeven_finding,
    acceptance_interval,
    idle_findings,
    low_acceptance_findings,
    suggested_k,
    unused_capacity_cost,
    wilson_interval,
)

DAY = 86_400.0


def group(
    drafted: int,
    accepted: int,
    *,
    requests: int = 20,
    k: int | None = 4,
    cost: int = 1_000_000,
    key: str = "team-a",
) -> AcceptanceGroup:
    return AcceptanceGroup(
        scope=Scope.team,
        key=key,
        method="ngram",
        k=k,
        requests=requests,
        num_drafts=max(drafted // (k or 1), 1),
        draft_tokens=drafted,
        accepted_tokens=accepted,
        scheduled_tokens=3 * drafted + (drafted - accepted),
        cost_micros=cost,
    )


def test_wilson_matches_the_textbook_value() -> None:
    low, high = wilson_interval(81, 263, confidence=0.95)  # Wikipedia's worked example
    assert low == pytest.approx(0.2553, abs=1e-4)
    assert high == pytest.approx(0.3662, abs=1e-4)


@given(
    st.integers(1, 10_000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))),
    st.floats(0.5, 0.999),
)
def test_wilson_interval_contains_the_rate(counts: tuple[int, int], confidence: float) -> None:
    successes, trials = counts
    low, high = wilson_interval(successes, trials, confidence=confidence)
    assert 0.0 <= low <= successes / trials <= high <= 1.0


@pytest.mark.parametrize(("successes", "trials"), [(1, 0), (5, 3), (-1, 3)])
def test_wilson_refuses_impossible_counts(successes: int, trials: int) -> None:
    with pytest.raises(InvalidInput):
        wilson_interval(successes, trials, confidence=0.95)


def test_small_samples_are_not_flagged_large_ones_are() -> None:
    thresholds = Thresholds(min_requests=1)
    small = low_acceptance_findings([group(8, 2, requests=2)], thresholds, window_seconds=DAY)
    assert small == []  # 25% of 8 tokens: the interval still reaches 50%
    large = low_acceptance_findings([group(800, 200)], thresholds, window_seconds=DAY)
    assert [f.kind for f in large] == [FindingKind.low_acceptance]
    fine = low_acceptance_findings([group(800, 480)], thresholds, window_seconds=DAY)
    assert fine == []


def test_min_requests_and_threshold_are_honoured() -> None:
    assert (
        low_acceptance_findings(
            [group(800, 200, requests=3)], Thresholds(min_requests=5), window_seconds=DAY
        )
        == []
    )
    assert (
        low_acceptance_findings([group(800, 200)], Thresholds(acceptance=0.2), window_seconds=DAY)
        == []
    )


def test_low_acceptance_cost_is_the_rejected_share_scaled_to_a_month() -> None:
    [finding] = low_acceptance_findings(
        [group(1000, 100, cost=4_100_000)], Thresholds(), window_seconds=DAY
    )
    # scheduled = 3 * 1000 + 900 rejected = 3900; rejected share 900/3900 of 4.10
    assert finding.window_cost_micros == round(4_100_000 * 900 / 3900)
    assert finding.monthly_cost_micros == round(
        finding.window_cost_micros * SECONDS_PER_MONTH / DAY
    )


def test_k_advice() -> None:
    # ~86% per-position acceptance: every position of k=4 is worth it, nothing to lower
    assert suggested_k(num_drafts=100, draft_tokens=400, accepted_tokens=300, k=4) == 4
    # ~44%: only the first position clears the 25% floor
    assert suggested_k(num_drafts=100, draft_tokens=400, accepted_tokens=78, k=4) == 1
    assert suggested_k(num_drafts=100, draft_tokens=400, accepted_tokens=5, k=4) == 0
    assert suggested_k(num_drafts=0, draft_tokens=0, accepted_tokens=0, k=4) is None
    assert suggested_k(num_drafts=10, draft_tokens=40, accepted_tokens=5, k=None) is None
    [lower] = low_acceptance_findings([group(400, 78)], Thresholds(), window_seconds=DAY)
    assert "from 4 to 1" in lower.action
    [change] = low_acceptance_findings([group(400, 5)], Thresholds(), window_seconds=DAY)
    assert "change the drafter" in change.action


def test_speedup_interpolates_on_log_concurrency() -> None:
    points = [(1.0, 2.0), (4.0, 1.0), (16.0, 0.5)]
    assert speedup_at(points, 2.0) == pytest.approx(1.5)
    assert speedup_at(points, 0.5) == 2.0
    assert speedup_at(points, 64.0) == 0.5
    with pytest.raises(InvalidInput):
        speedup_at([], 2.0)


def test_above_breakeven_costs_the_modelled_slowdown() -> None:
    curve = BreakevenCurve(
        deployment="d1",
        breakeven_concurrency=4.2,
        speedups=[(4.0, 1.0), (16.0, 0.5)],
        schedule=[[1, 4, 3], [5, 256, 0]],
        sweep_id=7,
    )
    exposure = BreakevenExposure(
        deployment="d1",
        method="draft_model",
        requests=10,
        seconds=50.0,
        mean_concurrency=8.0,
        cost_micros=2_000_000,
    )
    finding = above_breakeven_finding(curve, exposure, window_seconds=DAY)
    assert finding is not None
    assert finding.window_cost_micros == 500_000  # speedup 0.75 at 8: a quarter wasted
    assert "[[1, 4, 3], [5, 256, 0]]" in finding.action
    assert "NUMA" in finding.action
    none = BreakevenExposure(
        deployment="d1",
        method="ngram",
        requests=0,
        seconds=0.0,
        mean_concurrency=0.0,
        cost_micros=0,
    )
    assert above_breakeven_finding(curve, none, window_seconds=DAY) is None


def test_idle_findings_and_the_total() -> None:
    exposures = [
        IdleExposure(deployment="busy", idle_micros=100, gpu_micros=1000, replicas=1),
        IdleExposure(deployment="idle", idle_micros=800, gpu_micros=1000, replicas=3),
        IdleExposure(deployment="empty", idle_micros=0, gpu_micros=0, replicas=1),
    ]
    [finding] = idle_findings(exposures, Thresholds(), window_seconds=SECONDS_PER_MONTH)
    assert finding.key == "idle"
    assert finding.monthly_cost_micros == 800
    assert "consolidate replicas" in finding.action
    team_level = low_acceptance_findings(
        [group(800, 100)], Thresholds(), window_seconds=SECONDS_PER_MONTH
    )
    assert monthly_total([finding, *team_level]) == 800


@pytest.mark.parametrize(
    "kwargs", [{"acceptance": 1.0}, {"confidence": 0.2}, {"min_requests": 0}, {"idle_share": 0.0}]
)
def test_thresholds_are_checked(kwargs: dict[str, float]) -> None:
    with pytest.raises(InvalidInput):
        Thresholds(**kwargs)  # type: ignore[arg-type]


def test_monthly_refuses_an_empty_window() -> None:
    with pytest.raises(InvalidInput):
        monthly(1, 0.0)
    assert math.isclose(monthly(1_000_000, SECONDS_PER_MONTH / 2), 2_000_000)


def _traffic(rng: np.random.Generator, rate: float, requests: int, k: int = 4) -> AcceptanceGroup:
    """A deployment's requests whose acceptance is correlated within each request: each
    request draws its own acceptance probability (Beta, mean ``rate``, wide: some prompts
    suit the drafter, some do not) and its draft steps accept 0..k tokens, stopping at the
    first rejection, with that probability."""
    probabilities = rng.beta(2 * rate, 2 * (1 - rate), size=requests)
    steps = rng.integers(5, 60, size=requests)
    accepted = np.zeros(requests, dtype=np.int64)
    for i, (p, n) in enumerate(zip(probabilities, steps, strict=True)):
        # accepted tokens of a step: the first rejection among k draws, capped at k
        accepted[i] = np.minimum(rng.geometric(1 - p, size=n) - 1, k).sum() if p < 1 else n * k
    drafted = steps * k
    return AcceptanceGroup(
        scope=Scope.deployment,
        key="d",
        method="ngram",
        k=k,
        requests=requests,
        num_drafts=int(steps.sum()),
        draft_tokens=int(drafted.sum()),
        accepted_tokens=int(accepted.sum()),
        scheduled_tokens=int(3 * drafted.sum()),
        cost_micros=1_000_000,
        accepted_sq=int((accepted * accepted).sum()),
        accepted_drafted=int((accepted * drafted).sum()),
        drafted_sq=int((drafted * drafted).sum()),
    )


def _true_rate(rng: np.random.Generator, rate: float, k: int = 4) -> float:
    """The population acceptance (accepted / drafted) of :func:`_traffic`, by simulation."""
    big = _traffic(rng, rate, 20_000, k)
    return big.accepted_tokens / big.draft_tokens


def test_a_deployment_truly_above_the_threshold_is_flagged_at_the_nominal_rate_at_most() -> None:
    """Generated traffic whose true acceptance is 55%, correlated within requests: the
    request-clustered bound flags it about as often as its confidence allows (a 95%
    two-sided interval's upper bound falls below the truth 2.5% of the time), where the
    token-level Wilson bound flagged it several times as often."""
    rng = np.random.default_rng(7)
    beta_mean = 0.71  # the Beta mean that gives about 55% accepted per drafted token
    truth = _true_rate(rng, beta_mean)
    assert 0.53 < truth < 0.57
    thresholds = Thresholds(acceptance=0.5, confidence=0.95, min_requests=5)
    flagged = wilson_flagged = 0
    trials = 600
    for _ in range(trials):
        traffic = _traffic(rng, beta_mean, requests=int(rng.integers(8, 60)))
        flagged += bool(low_acceptance_findings([traffic], thresholds, window_seconds=DAY))
        _, high = wilson_interval(traffic.accepted_tokens, traffic.draft_tokens, confidence=0.95)
        wilson_flagged += high < 0.5
    assert flagged / trials <= 0.04
    assert wilson_flagged / trials >= 3 * max(flagged / trials, 0.01)


def test_the_clustered_interval_covers_the_true_rate_at_its_level() -> None:
    rng = np.random.default_rng(11)
    truth = _true_rate(rng, 0.45)
    covered = sum(
        lo <= truth <= hi
        for lo, hi in (
            acceptance_interval(_traffic(rng, 0.45, requests=30), confidence=0.9)
            for _ in range(500)
        )
    )
    assert 0.85 <= covered / 500 <= 0.97


def test_one_request_bounds_nothing_and_a_flat_sample_keeps_the_wilson_width() -> None:
    one = group(400, 100, requests=1)
    assert acceptance_interval(one, confidence=0.95) == (0.0, 1.0)
    flat = group(400, 100, requests=4)  # no spread given: the token-level bound remains
    assert acceptance_interval(flat, confidence=0.95) == wilson_interval(100, 400, confidence=0.95)


@given(
    cost=st.integers(0, 10**12),
    used=st.integers(0, 10**15),
    capacity=st.integers(1, 10**15),
)
def test_unused_capacity_cost_is_the_unused_share_of_the_cost(
    cost: int, used: int, capacity: int
) -> None:
    part = unused_capacity_cost(cost, used_ns=used, capacity_ns=capacity)
    exact = Fraction(cost * max(capacity - used, 0), capacity)
    assert abs(part - exact) <= Fraction(1, 2)
    assert 0 <= part <= cost
    assert unused_capacity_cost(cost, used_ns=used, capacity_ns=0) == 0
