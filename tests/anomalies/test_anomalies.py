"""Cost anomalies (pure): the causal seasonal-median detector and the money decomposition of
what drove a bucket away from its baseline."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.anomalies.rules import (
    NOT_COVERED,
    BucketFacts,
    Direction,
    Driver,
    Factor,
    baseline_indices,
    detect,
    expected_at,
    explain,
)
from app.domain.errors import InvalidInput

DOLLAR = 1_000_000
WEEK = (1.0, 1.0, 1.05, 1.0, 0.95, 0.6, 0.55)


def noisy_daily(days: int = 84, *, seed: int = 0, noise: float = 0.05) -> list[int]:
    """About $800 a weekday, weekends lower, +20% over the span, log-normal noise."""
    rng = np.random.default_rng(seed)
    return [
        round(800 * DOLLAR * WEEK[d % 7] * (1 + 0.2 * d / days) * math.exp(rng.normal(0, noise)))
        for d in range(days)
    ]


# --- detection ------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    season=st.sampled_from([7, 24]),
    cycles=st.integers(3, 5),
    pattern=st.lists(st.integers(0, 10**10), min_size=24, max_size=24),
    extra=st.integers(1, 40),
)
def test_a_clean_seasonal_series_is_never_flagged(season, cycles, pattern, extra):
    series = [pattern[t % season] for t in range(cycles * season + extra)]
    assert detect(series, season=season, cycles=cycles) == []


@settings(max_examples=60, deadline=None)
@given(
    season=st.sampled_from([7, 24]),
    cycles=st.integers(3, 5),
    pattern=st.lists(st.integers(10**8, 10**10), min_size=24, max_size=24),
    growth=st.floats(-0.1, 0.1),
    extra=st.integers(1, 40),
)
def test_a_clean_series_growing_at_a_constant_rate_is_never_flagged(
    season, cycles, pattern, growth, extra
):
    """Up to 10% a season either way; costs from $100 a bucket, far above the log offset
    (the $1 money floor), where the log of the series is a straight line plus a season."""
    n = cycles * season + extra
    series = [round(pattern[t % season] * (1 + growth) ** (t / season)) for t in range(n)]
    assert detect(series, season=season, cycles=cycles) == []


@settings(max_examples=60, deadline=None)
@given(
    series=st.lists(st.integers(0, 10**9), min_size=30, max_size=60),
    cut=st.integers(21, 59),
    new_value=st.integers(0, 10**10),
)
def test_detection_never_uses_later_buckets(series, cut, new_value):
    cut = min(cut, len(series) - 1)
    changed = [*series[:cut], new_value, *series[cut + 1 :]]
    before = [a for a in detect(series, season=7, cycles=3) if a.index < cut]
    after = [a for a in detect(changed, season=7, cycles=3) if a.index < cut]
    assert before == after


def test_a_spike_and_a_drop_are_found_with_their_size():
    series = noisy_daily()
    clean_spike, clean_drop = series[50], series[65]
    series[50] = 2 * clean_spike
    series[65] = round(0.4 * clean_drop)

    found = {a.index: a for a in detect(series, season=7)}

    assert set(found) == {50, 65}
    spike, drop = found[50], found[65]
    assert spike.direction is Direction.spike
    assert spike.score > 3.5
    assert spike.deviation_micros == spike.actual_micros - spike.expected_micros
    assert spike.expected_micros == pytest.approx(clean_spike, rel=0.1)
    assert drop.direction is Direction.drop
    assert drop.score < -3.5
    assert drop.deviation_micros < 0
    assert drop.expected_micros == pytest.approx(clean_drop, rel=0.1)


def test_an_anomaly_in_the_history_does_not_raise_later_flags():
    series = noisy_daily()
    series[40] *= 4
    series[47] = round(series[47] * 0.3)  # the same weekday a week later
    found = detect(series, season=7)
    assert [a.index for a in found] == [40, 47]


def test_nothing_is_flagged_in_the_warm_up():
    series = noisy_daily(50)
    series[34] *= 10
    assert detect(series, season=7) == []  # 5 cycles of 7: 35 buckets of warm-up
    series[35] *= 10
    assert [a.index for a in detect(series, season=7)] == [35]


def test_cents_do_not_alert():
    series = [500_000 if d % 7 < 5 else 300_000 for d in range(60)]  # 50 and 30 cents a day
    series[50] = 1_200_000  # +70 cents
    assert detect(series, season=7) == []
    assert [a.index for a in detect(series, season=7, min_deviation_micros=100_000)] == [50]


def test_expected_at_is_what_detect_compares_with():
    series = noisy_daily()
    series[60] *= 3
    (anomaly,) = detect(series, season=7)
    expected, sigma = expected_at(series, 60, season=7)
    assert expected == anomaly.expected_micros
    assert 0.01 <= sigma < 0.2
    with pytest.raises(InvalidInput, match="index 10 must lie in"):
        expected_at(series, 10, season=7)


def test_baseline_indices_are_the_same_position_in_earlier_seasons():
    assert baseline_indices(40, season=7) == [33, 26, 19, 12, 5]
    assert baseline_indices(10, season=7, cycles=3) == [3]


@pytest.mark.parametrize(
    ("series", "kwargs", "message"),
    [
        ([1, -1, 2], {"season": 1}, "bucket 1 is -1"),
        ([1, 2.5], {"season": 1}, "bucket 1 is 2.5"),
        ([True], {"season": 1}, "bucket 0 is True"),
        ([1], {"season": 0}, "season must be a positive"),
        ([1], {"season": 7, "cycles": 2}, "cycles must be an integer >= 3"),
        ([1], {"season": 7, "threshold": 0.0}, "threshold must be positive"),
        ([1], {"season": 7, "min_deviation_micros": -1}, "min_deviation_micros"),
    ],
)
def test_bad_detector_input_is_refused(series, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        detect(series, **kwargs)


# --- explanation ----------------------------------------------------------------------------

K = 4
PRICE = 4.0 / 3600 * DOLLAR  # micros per GPU-second
TEAMS = {"search": 0.5, "ads": 0.3, "chat": 0.2}


def facts(
    *,
    tokens: float = 200e6,
    acceptance: float = 0.7,
    idle_share: float = 0.15,
    price: float = PRICE,
    boost: dict[str, float] | None = None,
    gpu_per_verified: float = 0.002,
) -> BucketFacts:
    """A day of an autoscaled deployment: GPU time follows the verified tokens."""
    by_team = {team: tokens * share * (boost or {}).get(team, 1.0) for team, share in TEAMS.items()}
    verified = (K + 1) / (1 + K * acceptance)
    gpu = {team: n * verified * gpu_per_verified for team, n in by_team.items()}
    request_gpu = sum(gpu.values())
    idle_gpu = request_gpu * idle_share / (1 - idle_share)
    cost_by_team = {team: round(g * price) for team, g in gpu.items()}
    idle_cost = round(idle_gpu * price)
    output = round(sum(by_team.values()))
    draft = round(K * output / (1 + K * acceptance))
    return BucketFacts(
        cost_micros=sum(cost_by_team.values()) + idle_cost,
        idle_cost_micros=idle_cost,
        by_dimension={"team": cost_by_team, "model": {"llama-8b": sum(cost_by_team.values())}},
        output_tokens=output,
        request_gpu_seconds=request_gpu,
        idle_gpu_seconds=idle_gpu,
        draft_tokens=draft,
        accepted_tokens=round(draft * acceptance),
    )


def by_key(drivers: list[Driver]) -> dict[tuple[str, str | None], Driver]:
    return {(d.dimension, d.value): d for d in drivers}


def assert_views_add_up(drivers: list[Driver], deviation: int) -> None:
    factors = [d for d in drivers if d.value is None]
    assert sorted(d.dimension for d in factors) == sorted(Factor)
    assert sum(d.effect_micros for d in factors) == deviation
    for dimension in {d.dimension for d in drivers if d.value is not None}:
        values = [d for d in drivers if d.dimension == dimension]
        assert sum(d.effect_micros for d in values) == deviation, dimension


def test_low_acceptance_is_named_as_the_driver():
    baseline = [facts(tokens=t) for t in (195e6, 200e6, 205e6, 198e6, 202e6)]
    incident = facts(acceptance=0.2)

    drivers = explain(incident, baseline)

    top = drivers[0]
    assert (top.dimension, top.value) == (Factor.acceptance, None)
    assert top.baseline == pytest.approx(0.7, abs=1e-3)
    assert top.actual == pytest.approx(0.2, abs=1e-3)
    deviation = incident.cost_micros - round(np.mean([b.cost_micros for b in baseline]))
    assert top.effect_micros == pytest.approx(deviation, rel=0.02)
    assert "acceptance rate 70.0% -> 20.0%" in top.description
    assert_views_add_up(drivers, deviation)


def test_the_incident_is_detected_and_explained_end_to_end():
    rng = np.random.default_rng(7)
    days = [
        facts(
            tokens=200e6 * WEEK[d % 7] * math.exp(rng.normal(0, 0.03)),
            acceptance=0.2 if d == 50 else 0.7,
        )
        for d in range(56)
    ]
    found = detect([f.cost_micros for f in days], season=7)
    assert [a.index for a in found] == [50]
    (anomaly,) = found
    baseline = [days[i] for i in baseline_indices(50, season=7)]

    drivers = explain(days[50], baseline, expected_micros=anomaly.expected_micros)

    assert drivers[0].dimension == Factor.acceptance
    assert_views_add_up(drivers, anomaly.deviation_micros)


def test_a_team_spike_names_the_team():
    baseline = [facts() for _ in range(3)]
    spike = facts(boost={"ads": 3.0})

    drivers = explain(spike, baseline)

    top = drivers[0]
    assert (top.dimension, top.value) == ("team", "ads")
    assert top.effect_micros == spike.by_dimension["team"]["ads"] - round(
        baseline[0].by_dimension["team"]["ads"]
    )
    found = by_key(drivers)
    assert found[(Factor.volume, None)].effect_micros > 0
    assert abs(found[(Factor.acceptance, None)].effect_micros) <= 1
    assert_views_add_up(drivers, spike.cost_micros - baseline[0].cost_micros)


def test_growth_everywhere_is_volume():
    drivers = explain(facts(tokens=300e6), [facts()])
    assert drivers[0].dimension == Factor.volume
    # Every team moved in proportion: the team view ranks after the factors.
    assert [d.value for d in drivers[:5]] == [None] * 5


def test_idle_and_price_are_told_apart():
    baseline = [facts()]
    idle = explain(facts(idle_share=0.5), baseline)
    assert idle[0].dimension == Factor.idle_share
    assert idle[0].baseline == pytest.approx(0.15, abs=1e-3)
    assert idle[0].actual == pytest.approx(0.5, abs=1e-3)
    priced = explain(facts(price=1.5 * PRICE), baseline)
    assert priced[0].dimension == Factor.price
    assert priced[0].baseline == pytest.approx(4.0 * DOLLAR, rel=1e-6)  # per GPU-hour
    assert priced[0].actual == pytest.approx(6.0 * DOLLAR, rel=1e-6)
    effects = by_key(priced)
    assert all(abs(effects[(f, None)].effect_micros) <= 2 for f in Factor if f != Factor.price)


def test_a_single_factor_change_is_all_its_own():
    """With one factor moved, its Shapley value is the whole change."""
    baseline = facts()
    moved = facts(gpu_per_verified=0.003)
    effects = by_key(explain(moved, [baseline]))
    deviation = moved.cost_micros - baseline.cost_micros
    assert effects[(Factor.gpu_time, None)].effect_micros == pytest.approx(deviation, abs=3)


def test_expected_scales_the_baseline():
    baseline = [facts()]
    drivers = explain(facts(), baseline, expected_micros=baseline[0].cost_micros // 2)
    assert drivers[0].dimension == Factor.volume
    assert drivers[0].effect_micros == pytest.approx(baseline[0].cost_micros / 2, abs=2)


def test_a_bucket_with_no_requests_falls_back_to_request_and_idle_cost():
    baseline = [facts()]
    idle_only = BucketFacts(cost_micros=100 * DOLLAR, idle_cost_micros=100 * DOLLAR)
    effects = by_key(explain(idle_only, baseline))
    request_cost = baseline[0].cost_micros - baseline[0].idle_cost_micros
    assert effects[(Factor.volume, None)].effect_micros == -request_cost
    assert effects[(Factor.idle_share, None)].effect_micros == (
        100 * DOLLAR - baseline[0].idle_cost_micros
    )
    assert effects[("team", NOT_COVERED)].actual == 100 * DOLLAR


@st.composite
def bucket_facts(draw):
    cost = draw(st.integers(0, 10**12))
    idle = draw(st.integers(0, cost))
    dims = draw(
        st.dictionaries(
            st.sampled_from(["team", "session", "model", "method"]),
            st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 10**12), max_size=3),
            max_size=3,
        )
    )
    draft = draw(st.integers(0, 10**9))
    return BucketFacts(
        cost_micros=cost,
        idle_cost_micros=idle,
        by_dimension=dims,
        output_tokens=draw(st.integers(0, 10**9)),
        request_gpu_seconds=draw(st.floats(0, 1e7)),
        idle_gpu_seconds=draw(st.floats(0, 1e7)),
        draft_tokens=draft,
        accepted_tokens=draw(st.integers(0, draft)),
    )


@settings(max_examples=150, deadline=None)
@given(
    actual=bucket_facts(),
    baseline=st.lists(bucket_facts(), min_size=1, max_size=4),
    expected=st.none() | st.integers(0, 10**12),
)
def test_effects_add_up_to_the_deviation(actual, baseline, expected):
    mean_cost = sum(b.cost_micros for b in baseline) / len(baseline)
    if expected is not None and mean_cost == 0:
        expected = None
    drivers = explain(actual, baseline, expected_micros=expected)
    deviation = actual.cost_micros - (round(mean_cost) if expected is None else expected)
    assert_views_add_up(drivers, deviation)
    ranked = [d for d in drivers if d.value is None]
    assert len(ranked) == len(Factor)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cost_micros": -1}, "cost_micros must be a non-negative integer"),
        ({"cost_micros": 1.5}, "cost_micros must be a non-negative integer"),
        ({"cost_micros": 5, "idle_cost_micros": 6}, "idle cost \\(6\\) exceeds"),
        ({"cost_micros": 5, "draft_tokens": 2, "accepted_tokens": 3}, "accepted tokens"),
        ({"cost_micros": 5, "request_gpu_seconds": math.nan}, "request_gpu_seconds must be"),
        ({"cost_micros": 5, "by_dimension": {"volume": {}}}, "a factor's name"),
        ({"cost_micros": 5, "by_dimension": {"team": {NOT_COVERED: 1}}}, "is reserved"),
        ({"cost_micros": 5, "by_dimension": {"team": {"a": 0.5}}}, "team=a must be integer"),
    ],
)
def test_bad_facts_are_refused(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        BucketFacts(**kwargs)


def test_bad_explain_input_is_refused():
    with pytest.raises(InvalidInput, match="at least one bucket"):
        explain(facts(), [])
    with pytest.raises(InvalidInput, match="cost nothing"):
        explain(facts(), [BucketFacts(cost_micros=0)], expected_micros=5)


def test_a_new_subject_whose_baseline_cost_nothing_is_explained_against_zero():
    """A deployment whose spend starts inside the judged window: its baseline buckets cost
    nothing and the detector expected 0; the whole cost is the deviation (it used to raise
    and stop `alerts check` for every subject)."""
    drivers = explain(facts(), [BucketFacts(cost_micros=0)], expected_micros=0)
    assert_views_add_up(drivers, facts().cost_micros)
