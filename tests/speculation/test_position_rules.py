"""Acceptance per draft position (pure): counts from vLLM's histograms, their sums, the
rates' shape, which positions pay, and the waste finding."""

import itertools
import math
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from app.breakeven.rules.model import StepTimeModel
from app.domain.errors import InvalidInput
from app.domain.findings import MARGINAL_ACCEPTANCE_FLOOR, Finding, FindingKind, Scope
from app.speculation.rules.positions import (
    MIN_STEPS,
    CostBasis,
    PositionCounts,
    advise,
    modelled_step_s,
    sum_histograms,
    unpaid_positions_finding,
)

DAY = 86_400.0


def histograms(k: int | None = None) -> st.SearchStrategy[list[int]]:
    lengths = st.just(k + 1) if k is not None else st.integers(1, 9)
    return lengths.flatmap(lambda n: st.lists(st.integers(0, 500), min_size=n, max_size=n))


same_k = st.integers(1, 8).flatmap(lambda k: st.lists(histograms(k), min_size=1, max_size=12))
mixed_k = st.lists(histograms(), min_size=1, max_size=12)


def total(counts: list[PositionCounts]) -> PositionCounts:
    result = PositionCounts()
    for c in counts:
        result = result + c
    return result


class TestCounts:
    def test_vllm_documented_example(self):
        # docs/features/speculative_decoding/acceptance_metrics.md: k = 3, 43 steps, 10 accepted
        counts = PositionCounts.of_histogram([39, 1, 0, 3])
        assert counts.steps == 43
        assert counts.accepted == (4, 3, 3)
        assert counts.drafted == (43, 43, 43)
        assert counts.accepted_tokens == 10
        assert counts.mean_acceptance_length == pytest.approx(1 + 10 / 43)
        assert counts.rates == pytest.approx((4 / 43, 3 / 43, 3 / 43))

    def test_real_server_histogram_all_accepted(self):
        # tests/serving/fixtures/vllm/completion.json: 3 steps, every drafted token kept
        counts = PositionCounts.of_histogram([0, 0, 0, 0, 3])
        assert counts.rates == (1.0, 1.0, 1.0, 1.0)
        assert counts.mean_acceptance_length == 5.0

    def test_no_steps_say_nothing(self):
        assert PositionCounts.of_histogram([0, 0, 0, 0, 0]) == PositionCounts()
        assert PositionCounts().k == 0
        assert PositionCounts().mean_acceptance_length is None
        assert PositionCounts().per_step == ()

    def test_mixed_k_keeps_each_requests_draft_length(self):
        # a k=2 request must not count as drafting positions 3 and 4
        counts = PositionCounts.of_histogram([0, 0, 10]) + PositionCounts.of_histogram(
            [10, 0, 0, 0, 0]
        )
        assert counts.drafted == (20, 20, 10, 10)
        assert counts.accepted == (10, 10, 0, 0)
        assert counts.rates == (0.5, 0.5, 0.0, 0.0)

    def test_short_drafts_flag_dynamic_k(self):
        counts = PositionCounts.of_histogram([2, 3, 5])  # 10 steps of k=2: 20 if all full
        assert not counts.short_drafts(20)
        assert counts.short_drafts(17)

    @pytest.mark.parametrize("bad", [[], [1, -1], [0.5, 1], [True, 1], [0] * 66])
    def test_bad_histograms_are_refused(self, bad):
        with pytest.raises(InvalidInput):
            PositionCounts.of_histogram(bad)
        with pytest.raises(InvalidInput):
            sum_histograms([bad])

    def test_inconsistent_counts_are_refused(self):
        with pytest.raises(InvalidInput):
            PositionCounts(steps=5, accepted=(6,), drafted=(5,))
        with pytest.raises(InvalidInput):
            PositionCounts(steps=5, accepted=(0, 0), drafted=(5, 0))
        with pytest.raises(InvalidInput):
            PositionCounts(steps=5, accepted=(1,), drafted=(5, 5))


@given(histograms())
def test_counts_match_the_histogram(histogram):
    counts = PositionCounts.of_histogram(histogram)
    steps = sum(histogram)
    assert counts.steps == steps
    assert counts.accepted_tokens == sum(j * n for j, n in enumerate(histogram))
    if steps:
        assert counts.drafted == (steps,) * (len(histogram) - 1)
        for p in range(1, counts.k + 1):  # accepted at p: steps that accepted >= p tokens
            assert counts.accepted[p - 1] == sum(histogram[p:])


@given(same_k)
def test_rates_of_one_k_are_non_increasing_and_within_0_1(hists):
    counts = total([PositionCounts.of_histogram(h) for h in hists])
    rates = counts.rates
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert all(a >= b for a, b in itertools.pairwise(rates))
    assert rates == pytest.approx(counts.per_step)


@given(mixed_k)
def test_any_mix_of_k_keeps_rates_in_range_and_per_step_non_increasing(hists):
    counts = total([PositionCounts.of_histogram(h) for h in hists])
    assert all(0.0 <= r <= 1.0 for r in counts.rates)
    per_step = counts.per_step
    assert all(a >= b for a, b in itertools.pairwise(per_step))
    assert all(a >= b for a, b in zip(counts.drafted, counts.drafted[1:], strict=False))


@given(same_k)
def test_counts_of_the_summed_histogram_are_the_summed_counts(hists):
    summed = sum_histograms(hists)
    assert summed == tuple(map(sum, zip(*hists, strict=True)))
    assert PositionCounts.of_histogram(summed) == total(
        [PositionCounts.of_histogram(h) for h in hists]
    )


@given(mixed_k)
def test_summing_is_order_free_and_keeps_acceptances(hists):
    parts = [PositionCounts.of_histogram(h) for h in hists]
    assert total(parts) == total(parts[::-1])
    summed = PositionCounts.of_histogram(sum_histograms(hists))
    # accepted-at-least-p does not depend on draft lengths; drafted does
    assert total(parts).accepted == summed.accepted[: total(parts).k]
    assert total(parts).steps == summed.steps


class TestAdvice:
    def test_floor_keeps_positions_accepted_a_quarter_of_the_time(self):
        # rates 0.9, 0.6, 0.3, 0.1
        counts = PositionCounts(steps=100, accepted=(90, 60, 30, 10), drafted=(100,) * 4)
        advice = advise(counts)
        assert advice.basis is CostBasis.floor
        assert advice.best_k == 3
        assert advice.paying == (1, 2, 3)
        assert advice.unpaid == (4,)
        assert advice.costs == (MARGINAL_ACCEPTANCE_FLOOR,) * 4
        assert advice.tokens_per_step == pytest.approx((1.0, 1.9, 2.5, 2.8, 2.9))
        assert advice.text() == "positions 1-3 pay; set num_speculative_tokens 3 (now 4)"

    def test_step_model_prices_positions_at_the_concurrency(self):
        counts = PositionCounts(steps=100, accepted=(90, 70, 50, 30), drafted=(100,) * 4)
        step = StepTimeModel(floor_s=0.02, per_token_s=0.0005, per_sequence_s=0.0001)
        light = advise(counts, step_s=modelled_step_s(step, k=4, concurrency=1.0))
        heavy = advise(counts, step_s=modelled_step_s(step, k=4, concurrency=200.0))
        assert light.basis is CostBasis.step_model
        assert light.best_k == 4  # verification is nearly free at batch 1
        assert light.text().startswith("positions 1-4 pay; keep num_speculative_tokens 4")
        assert heavy.best_k < light.best_k  # verification costs compute under load
        assert heavy.relative_output[heavy.best_k] == max(heavy.relative_output)

    def test_draft_model_cost_lowers_k(self):
        counts = PositionCounts(steps=100, accepted=(80, 50, 20, 5), drafted=(100,) * 4)
        step = StepTimeModel(floor_s=0.02, per_token_s=0.0005)
        cheap = advise(counts, step_s=modelled_step_s(step, k=4, concurrency=1.0))
        dear = advise(
            counts, step_s=modelled_step_s(step, k=4, concurrency=1.0, draft_cost_ratio=0.2)
        )
        assert dear.best_k < cheap.best_k

    def test_nothing_pays(self):
        counts = PositionCounts(steps=100, accepted=(3, 1), drafted=(100, 100))
        advice = advise(counts)
        assert advice.best_k == 0
        assert advice.paying == ()
        assert advice.text().startswith("no position pays")
        assert advise(PositionCounts()).text() == "no drafted positions measured"

    def test_step_times_must_fit(self):
        counts = PositionCounts(steps=10, accepted=(5,), drafted=(10,))
        with pytest.raises(InvalidInput):
            advise(counts, step_s=(1.0,))
        with pytest.raises(InvalidInput):
            advise(counts, step_s=(1.0, 0.0))
        with pytest.raises(InvalidInput):
            modelled_step_s(StepTimeModel(floor_s=1, per_token_s=0), k=2, concurrency=0)


step_models = st.builds(
    StepTimeModel,
    floor_s=st.floats(0.001, 0.1),
    per_token_s=st.floats(0.0, 0.01),
    per_sequence_s=st.floats(0.0, 0.001),
)


@given(
    same_k,
    step_models,
    st.floats(1.0, 256.0),
    st.floats(0.0, 0.01),
    st.floats(0.0, 0.3),
)
def test_best_k_is_the_largest_position_whose_gain_beats_its_cost(
    hists, step, concurrency, overhead, ratio
):
    counts = total([PositionCounts.of_histogram(h) for h in hists])
    assume(counts.k > 0)
    times = modelled_step_s(
        step, k=counts.k, concurrency=concurrency, drafter_overhead_s=overhead,
        draft_cost_ratio=ratio,
    )  # fmt: skip
    advice = advise(counts, step_s=times)
    output = advice.relative_output
    assert output[advice.best_k] == max(output)
    assert 0 <= advice.best_k <= counts.k
    margins = [g - c for g, c in zip(advice.gains, advice.costs, strict=True)]
    assume(all(abs(m) > 1e-9 for m in margins))
    assume(all(abs(output[j] - output[0]) > 1e-9 for j in range(1, counts.k + 1)))
    # one k: gains fall with p and each position after the first adds the same time, so
    # among k >= 1 the best is the last position p >= 2 that beats its marginal cost;
    # position 1 also pays the drafter's fixed overhead: then that k, or none at all
    paying = [p for p, m in enumerate(margins, start=1) if p >= 2 and m > 0]
    best_speculating = max(paying, default=1)
    assert output[best_speculating] == max(output[1:])
    expected = best_speculating if output[best_speculating] > output[0] else 0
    assert advice.best_k == expected


@given(same_k, st.floats(0.01, 0.99))
def test_floor_rule_keeps_exactly_the_positions_above_the_floor(hists, floor):
    counts = total([PositionCounts.of_histogram(h) for h in hists])
    assume(all(abs(r - floor) > 1e-12 for r in counts.rates))
    advice = advise(counts, floor=floor)
    assert advice.paying == tuple(p for p, r in enumerate(counts.rates, start=1) if r > floor)


class TestFinding:
    counts = PositionCounts(steps=1000, accepted=(900, 600, 200, 50), drafted=(1000,) * 4)

    def finding(self, **overrides: Any) -> Finding | None:
        advice = overrides.pop("advice", advise(self.counts))
        args = {
            "counts": self.counts,
            "advice": advice,
            "requests": 50,
            "min_requests": 5,
            "cost_micros": 10_000_000,
            "scheduled_tokens": 20_000,
            "window_seconds": DAY,
        }
        return unpaid_positions_finding("spec-a", **{**args, **overrides})

    def test_unpaid_positions_cost_their_rejected_verifications(self):
        found = self.finding()
        assert found is not None
        assert found.kind is FindingKind.unpaid_draft_positions
        assert found.scope is Scope.deployment
        assert found.key == "spec-a"
        # positions 3 and 4 do not pay: 800 + 950 rejected of 20,000 scheduled tokens
        assert found.window_cost_micros == round(10_000_000 * 1750 / 20_000)
        assert found.monthly_cost_micros == round(found.window_cost_micros * 30.4375)
        assert found.action == (
            "lower num_speculative_tokens from 4 to 2: positions 3-4 cost more than they return"
        )
        assert found.metrics["suggested_k"] == 2
        assert "3: 20%" in found.detail

    def test_no_finding_when_all_pay_none_pays_or_too_little_traffic(self):
        all_pay = PositionCounts(steps=1000, accepted=(900, 800), drafted=(1000, 1000))
        assert self.finding(counts=all_pay, advice=advise(all_pay)) is None
        none_pays = PositionCounts(steps=1000, accepted=(100, 10), drafted=(1000, 1000))
        assert self.finding(counts=none_pays, advice=advise(none_pays)) is None
        assert self.finding(requests=4) is None
        few = PositionCounts(
            steps=MIN_STEPS - 1, accepted=(150, 20, 1, 0), drafted=(MIN_STEPS - 1,) * 4
        )
        assert self.finding(counts=few, advice=advise(few)) is None

    def test_step_model_finding_says_at_which_concurrency(self):
        step = StepTimeModel(floor_s=0.02, per_token_s=0.0005)
        advice = advise(self.counts, step_s=modelled_step_s(step, k=4, concurrency=64.0))
        assert advice.unpaid
        found = self.finding(advice=advice, concurrency=64.0)
        assert found is not None
        assert "at concurrency 64.0" in found.detail
        assert found.metrics["cost_basis"] == "step_model"
        assert not math.isnan(found.monthly_cost_micros)
