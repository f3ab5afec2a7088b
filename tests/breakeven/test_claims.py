"""Quoted figures against computed ones (pure): within / below / above, and the reason in the
model's terms (instances, hours a month, price; sessions; acceptance length)."""

import math

import pytest

from app.breakeven.rules.claims import (
    FleetTerms,
    RangeVerdict,
    check_monthly_cost,
    check_session_second_cost,
    check_speedup,
    range_verdict,
    usd,
)
from app.breakeven.rules.model import SpeculationModel, StepTimeModel, speedup
from app.domain.errors import InvalidInput

STEP = StepTimeModel(floor_s=0.01, per_token_s=4e-5)
SPEC = SpeculationModel(k=3, mean_acceptance_length=2.6, draft_cost_ratio=0.2)

USD = 10**6
PROTOTYPE = FleetTerms(  # 1 x g5.12xlarge, $5.672/h, the brief's 5-20 sessions
    instance_type="g5.12xlarge",
    instance_usd_micros_per_hour=5_672_000,
    gpus_per_instance=4,
    instances_min=1,
    instances_max=1,
    hours_per_month=730,
    sessions_min=5,
    sessions_max=20,
)
ENTERPRISE = FleetTerms(  # 8 x p5.48xlarge, $55.04/h, 500-3,000 sessions
    instance_type="p5.48xlarge",
    instance_usd_micros_per_hour=55_040_000,
    gpus_per_instance=8,
    instances_min=8,
    instances_max=8,
    hours_per_month=730,
    sessions_min=500,
    sessions_max=3000,
)


@pytest.mark.parametrize(
    ("computed", "quoted", "verdict"),
    [
        ((4140.56, 4140.56), (1200, 3500), RangeVerdict.above),
        ((1000, 1100), (1200, 3500), RangeVerdict.below),
        ((2000, 2000), (1200, 3500), RangeVerdict.within),
        ((3500, 3500), (1200, 3500), RangeVerdict.within),  # the ends belong to the quote
        ((1200, 1200), (1200, 3500), RangeVerdict.within),
        ((0.0788, 0.315), (0.12, 0.12), RangeVerdict.within),  # a point quote inside a range
        ((3000, 5000), (1200, 3500), RangeVerdict.within),  # overlapping ranges meet
        ((3500.01, 5000), (1200, 3500), RangeVerdict.above),
        ((1.37, 1.50), (2.5, 2.5), RangeVerdict.below),
    ],
)
def test_range_verdict(
    computed: tuple[float, float], quoted: tuple[float, float], verdict: RangeVerdict
) -> None:
    assert range_verdict(computed, quoted) is verdict


@pytest.mark.parametrize("bad", [((2, 1), (1, 2)), ((1, 2), (3, 2)), ((math.nan, 1), (1, 2))])
def test_range_verdict_rejects_bad_ranges(
    bad: tuple[tuple[float, float], tuple[float, float]],
) -> None:
    with pytest.raises(InvalidInput):
        range_verdict(*bad)


def test_monthly_cost_above_the_quote_names_the_terms_that_drive_it() -> None:
    check = check_monthly_cost(PROTOTYPE, quoted_micros=(1200 * USD, 3500 * USD))
    assert check.verdict is RangeVerdict.above
    assert check.computed_micros == (4_140_560_000, 4_140_560_000)  # 5.672 x 730
    assert "1 x g5.12xlarge at $5.672/h on demand for 730 h a month cost $4,140.56" in check.reason
    assert "1.18x the quoted top of $3,500.00" in check.reason
    assert "0.85 instances running all month" in check.reason  # 3500 / 4140.56
    assert "1 running 617 h a month (85% of 730 h)" in check.reason  # 3500 / 5.672
    assert "$4.794521 per instance-hour (15% below the on-demand price)" in check.reason


def test_enterprise_monthly_cost_is_eight_nodes_around_the_clock() -> None:
    check = check_monthly_cost(ENTERPRISE, quoted_micros=(22_000 * USD, 95_000 * USD))
    assert check.verdict is RangeVerdict.above
    assert check.computed_micros[0] == 321_433_600_000  # 8 x 55.04 x 730
    assert "8 x p5.48xlarge (64 GPUs) is 3.38x the quoted top of $95,000.00" in check.reason
    assert "2.36 instances running all month" in check.reason
    assert "8 running 216 h a month (30% of 730 h)" in check.reason
    assert "$16.267123 per instance-hour (70% below" in check.reason


def test_monthly_cost_below_and_within_the_quote() -> None:
    below = check_monthly_cost(PROTOTYPE, quoted_micros=(5000 * USD, 9000 * USD))
    assert below.verdict is RangeVerdict.below
    assert "0.83x the quoted bottom of $5,000.00" in below.reason
    assert "$859.44 a month goes to costs the model leaves out" in below.reason
    within = check_monthly_cost(PROTOTYPE, quoted_micros=(4000 * USD, 4500 * USD))
    assert within.verdict is RangeVerdict.within
    assert "meets the quoted $4,000.00-$4,500.00" in within.reason


def test_session_second_cost_says_where_the_quote_is_reached() -> None:
    within = check_session_second_cost(PROTOTYPE, quoted_micros=120_000)
    assert within.verdict is RangeVerdict.within
    assert within.computed_micros == (78_778, 315_111)  # 5.672 / 3.6 over 20 and 5 sessions
    assert "the quoted $0.12 is reached at 13.1 concurrent sessions" in within.reason
    above = check_session_second_cost(PROTOTYPE, quoted_micros=50_000)
    assert above.verdict is RangeVerdict.above
    assert "needs 32 concurrent sessions around the clock, more than the tier's 20" in above.reason
    below = check_session_second_cost(PROTOTYPE, quoted_micros=500_000)
    assert below.verdict is RangeVerdict.below
    assert "would mean 3.2 sessions on 1 instance(s), fewer than the tier's 5" in below.reason
    with pytest.raises(InvalidInput):
        check_session_second_cost(PROTOTYPE, quoted_micros=0)


def test_speedup_check_uses_the_models_own_terms() -> None:
    below = check_speedup(STEP, SPEC, per_replica_concurrency=(5.0, 20.0), quoted=2.5)
    assert below.verdict is RangeVerdict.below
    low, high = below.computed
    assert high == pytest.approx(float(speedup(STEP, SPEC, concurrency=5.0)))
    assert low == pytest.approx(float(speedup(STEP, SPEC, concurrency=20.0)))
    assert "E = 2.60 tokens per step at k=3" in below.reason
    assert "out of reach at k=3 whatever the acceptance" in below.reason  # E would exceed 4
    within = check_speedup(STEP, SPEC, per_replica_concurrency=(1.0, 20.0), quoted=high)
    assert within.verdict is RangeVerdict.within
    above = check_speedup(STEP, SPEC, per_replica_concurrency=(5.0, 20.0), quoted=1.0)
    assert above.verdict is RangeVerdict.above
    reachable = check_speedup(STEP, SPEC, per_replica_concurrency=(5.0, 20.0), quoted=high * 1.1)
    assert reachable.verdict is RangeVerdict.below
    assert "(alpha " in reachable.reason


@pytest.mark.parametrize(
    ("micros", "text"),
    [(4_140_560_000, "$4,140.56"), (120_000, "$0.12"), (5_672_000, "$5.672"), (3_000_000, "$3.00")],
)
def test_usd_for_people(micros: int, text: str) -> None:
    assert usd(micros) == text
