"""Tier unit costs against concurrency (pure): roofline, session-seconds, tokens, breakeven."""

import math

import numpy as np
import pytest

from app.breakeven.rules.model import (
    SpeculationModel,
    StepTimeModel,
    baseline_tokens_per_s,
    breakeven_concurrency,
)
from app.breakeven.rules.tier_costs import (
    SpeculationMode,
    TierCapacity,
    cost_breakeven_concurrency,
    cost_curve,
    draft_cost_ratio,
    fits_capacity,
    roofline_step_model,
    tpot_at,
)
from app.domain.errors import InvalidInput

STEP = StepTimeModel(floor_s=0.01, per_token_s=4e-5)
SPEC = SpeculationModel(k=3, mean_acceptance_length=2.6, draft_cost_ratio=0.2)
TWO_NODES = TierCapacity(instance_usd_micros_per_hour=36_000_000, instances=2)  # $36/h each


def test_roofline_calibrated_on_the_published_h100_fit_reproduces_it() -> None:
    # reference/specdecode.md 3.6: Llama-3.1-8B on one H100.
    model = roofline_step_model(
        params_billion=8.03,
        bytes_per_param=2,
        gpus=1,
        peak_tflops_per_gpu=989,
        hbm_tb_per_s_per_gpu=3.35,
        bandwidth_efficiency=0.8145,
        compute_efficiency=0.7729,
        step_overhead_s=1.20683946e-03,
    )
    assert model.floor_s == pytest.approx(5.88590713e-03 + 1.20683946e-03, rel=1e-3)
    assert model.per_token_s == pytest.approx(2.10103129e-05, rel=1e-3)


def test_tensor_parallel_gpus_share_the_step() -> None:
    kwargs = {
        "params_billion": 70.0,
        "bytes_per_param": 2.0,
        "peak_tflops_per_gpu": 312.0,
        "hbm_tb_per_s_per_gpu": 1.555,
        "bandwidth_efficiency": 1.0,
        "compute_efficiency": 1.0,
        "step_overhead_s": 0.0,
    }
    one = roofline_step_model(gpus=1, **kwargs)
    eight = roofline_step_model(gpus=8, **kwargs)
    assert eight.floor_s == pytest.approx(one.floor_s / 8)
    assert eight.per_token_s == pytest.approx(one.per_token_s / 8)
    assert one.floor_s == pytest.approx(140e9 / 1.555e12)


def test_draft_cost_ratio_is_the_batch_one_step_ratio() -> None:
    draft = StepTimeModel(floor_s=0.002, per_token_s=1e-5)
    assert draft_cost_ratio(draft=draft, target=STEP) == pytest.approx(0.00201 / 0.01004)


def test_session_second_cost_is_the_fleet_price_over_sessions_in_every_mode() -> None:
    sessions = np.asarray([10.0, 100.0, 400.0])
    for mode in SpeculationMode:
        curve = cost_curve(STEP, SPEC, TWO_NODES, concurrency=sessions, mode=mode)
        # $72/h = 20,000 micros/s; per 1K session-seconds at N sessions: 20,000 * 1000 / N
        assert curve.usd_micros_per_1k_session_seconds.tolist() == [2_000_000, 200_000, 50_000]


def test_token_cost_follows_the_fleet_throughput() -> None:
    curve = cost_curve(
        STEP, None, TWO_NODES, concurrency=np.asarray([64.0]), mode=SpeculationMode.none
    )
    per_replica = float(baseline_tokens_per_s(STEP, concurrency=32.0))
    assert curve.tokens_per_s[0] == pytest.approx(2 * per_replica)
    assert curve.usd_micros_per_1m_tokens[0] == round(20_000 * 1e6 / (2 * per_replica))
    assert curve.tpot_s[0] == pytest.approx(STEP.floor_s + 32 * STEP.per_token_s)


def test_dynamic_speculation_is_never_worse_than_either_fixed_choice() -> None:
    sessions = np.geomspace(1, 2000, 60)
    curves = {
        mode: cost_curve(STEP, SPEC, TWO_NODES, concurrency=sessions, mode=mode)
        for mode in SpeculationMode
    }
    best_fixed = np.maximum(
        curves[SpeculationMode.none].tokens_per_s, curves[SpeculationMode.fixed].tokens_per_s
    )
    assert np.all(curves[SpeculationMode.dynamic].tokens_per_s >= best_fixed * (1 - 1e-9))
    assert curves[SpeculationMode.dynamic].k[0] >= 1
    assert curves[SpeculationMode.dynamic].k[-1] == 0


def test_speculative_tpot_is_step_time_over_tokens_per_step() -> None:
    tpot = tpot_at(STEP, SPEC, TWO_NODES, concurrency=3, mode=SpeculationMode.fixed)
    step_s = (
        STEP.floor_s + 2 * 4 * STEP.per_token_s + 3 * 0.2 * (STEP.floor_s + 2 * STEP.per_token_s)
    )
    assert tpot == pytest.approx(step_s / 2.6)  # busiest replica holds ceil(3 / 2) = 2


def test_cost_breakeven_is_the_throughput_breakeven_times_replicas() -> None:
    per_replica = breakeven_concurrency(STEP, SPEC, low=0.1, high=1e4)
    fleet = cost_breakeven_concurrency(STEP, SPEC, TWO_NODES, low=1.0, high=1e4)
    assert fleet == pytest.approx(2 * per_replica, rel=1e-3)
    never = SpeculationModel(k=3, mean_acceptance_length=1.0, draft_cost_ratio=0.3)
    assert cost_breakeven_concurrency(STEP, never, TWO_NODES, low=1.0, high=100.0) is None


def test_capacity_limit_is_per_replica() -> None:
    assert fits_capacity(TWO_NODES, concurrency=512)
    assert not fits_capacity(TWO_NODES, concurrency=513)


@pytest.mark.parametrize(
    "bad",
    [
        {"params_billion": 0.0},
        {"gpus": 0},
        {"bandwidth_efficiency": 1.5},
        {"compute_efficiency": 0.0},
        {"step_overhead_s": -1.0},
        {"peak_tflops_per_gpu": math.nan},
    ],
)
def test_roofline_rejects_bad_figures(bad: dict[str, float]) -> None:
    kwargs = {
        "params_billion": 8.0,
        "bytes_per_param": 2.0,
        "gpus": 1,
        "peak_tflops_per_gpu": 989.0,
        "hbm_tb_per_s_per_gpu": 3.35,
        "bandwidth_efficiency": 0.8,
        "compute_efficiency": 0.8,
        "step_overhead_s": 0.001,
    }
    kwargs.update(bad)
    with pytest.raises(InvalidInput):
        roofline_step_model(**kwargs)  # type: ignore[arg-type]


def test_cost_curve_rejects_bad_input() -> None:
    with pytest.raises(InvalidInput):
        cost_curve(STEP, SPEC, TWO_NODES, concurrency=np.asarray([0.0]), mode=SpeculationMode.none)
    with pytest.raises(InvalidInput):
        cost_curve(STEP, None, TWO_NODES, concurrency=np.asarray([1.0]), mode=SpeculationMode.fixed)
