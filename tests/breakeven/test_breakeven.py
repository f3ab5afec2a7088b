"""Step-time model, breakeven fit, interval, inflection and schedule (DESIGN.md, Breakeven)."""

import itertools
import json
import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from app.breakeven.rules.model import (
    ScheduleBand,
    SpeculationModel,
    StepTimeModel,
    acceptance_needed,
    baseline_tokens_per_s,
    breakeven_concurrency,
    inflection_concurrency,
    speculation_schedule,
    speculative_tokens_per_s,
    speedup,
)
from app.breakeven.rules.report import breakeven_fit_as_dict, fit_breakeven
from app.breakeven.rules.speculation import expected_tokens_per_step, walltime_speedup
from app.breakeven.rules.sweep import InvalidSweep, SweepPoint
from app.domain.errors import InvalidInput, NoBreakeven

# reference/specdecode.md 3.6: Llama-3.1-8B on H100 (SpecDecode-Bench predictor), L = 0.
H100_FLOOR_S = 5.88590713e-03 + 1.20683946e-03  # step constant plus per-step overhead
H100_PER_TOKEN_S = 2.10103129e-05
H100_EAGLE_DRAFT_S = 2.13526175e-03 + 8.41429603e-07 * 4  # k = 3
H100 = StepTimeModel(floor_s=H100_FLOOR_S, per_token_s=H100_PER_TOKEN_S)
CPU = StepTimeModel(floor_s=0.035, per_token_s=0.0033)

# DESIGN.md, "Facts measured": SmolLM2-135M on CPU, copy-heavy prompt, ngram k=4 vs none.
CPU_LEVELS = (1, 2, 4, 8, 16)
CPU_NONE = (25.3, 42.4, 94.6, 127.8, 180.2)
CPU_NGRAM = (54.9, 75.2, 100.0, 119.5, 142.2)


def sweep_rows(
    step: StepTimeModel,
    spec: SpeculationModel,
    *,
    method: str,
    levels: tuple[int, ...],
    seed: int = 0,
    noise: float = 0.0,
    repeats: int = 1,
    measured_acceptance: bool = True,
) -> list[SweepPoint]:
    """Sweep rows generated from known parameters, with log-normal noise on throughput."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(repeats):
        for level in levels:
            plain = float(baseline_tokens_per_s(step, concurrency=level))
            fast = float(speculative_tokens_per_s(step, spec, concurrency=level))
            rows.append(
                SweepPoint(
                    config="none",
                    method="none",
                    k=0,
                    concurrency=level,
                    output_tokens_per_s=plain * math.exp(rng.normal(0.0, noise)),
                )
            )
            rows.append(
                SweepPoint(
                    config=f"{method}-k{spec.k}",
                    method=method,
                    k=spec.k,
                    concurrency=level,
                    output_tokens_per_s=fast * math.exp(rng.normal(0.0, noise)),
                    mean_acceptance_length=spec.mean_acceptance_length
                    if measured_acceptance
                    else math.nan,
                )
            )
    return rows


def cpu_rows() -> list[SweepPoint]:
    rows = [
        SweepPoint(config="none", method="none", k=0, concurrency=c, output_tokens_per_s=r)
        for c, r in zip(CPU_LEVELS, CPU_NONE, strict=True)
    ]
    rows += [
        SweepPoint(config="ngram-k4", method="ngram", k=4, concurrency=c, output_tokens_per_s=r)
        for c, r in zip(CPU_LEVELS, CPU_NGRAM, strict=True)
    ]
    return rows


# --- the model -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("length", "k", "draft_s", "expected"),
    [
        # reference/specdecode.md 3.6, worked table (L = 0): b* = (AL*F - F - D0) / (C*(k+1-AL)).
        (2.6, 3, H100_EAGLE_DRAFT_S, 314),
        (2.0, 3, H100_EAGLE_DRAFT_S, 118),
        (1.5, 3, H100_EAGLE_DRAFT_S, 27),
    ],
)
def test_breakeven_matches_closed_form(length, k, draft_s, expected):
    spec = SpeculationModel(k=k, mean_acceptance_length=length, drafter_overhead_s=draft_s)
    closed = (length * H100_FLOOR_S - H100_FLOOR_S - draft_s) / (
        H100_PER_TOKEN_S * (k + 1 - length)
    )
    found = breakeven_concurrency(H100, spec, low=1, high=4096)
    assert found == pytest.approx(closed, rel=1e-9)
    assert found == pytest.approx(expected, rel=0.02)
    assert float(speedup(H100, spec, concurrency=found)) == pytest.approx(1.0, abs=1e-10)


def test_small_batch_speedup_is_leviathans():
    # When the floor dominates, verifying k+1 tokens is free: S -> E / (k c + 1).
    step = StepTimeModel(floor_s=1.0, per_token_s=1e-12)
    length = expected_tokens_per_step(alpha=0.8, k=4)
    spec = SpeculationModel(k=4, mean_acceptance_length=length, draft_cost_ratio=0.05)
    expected = walltime_speedup(alpha=0.8, k=4, cost_ratio=0.05)
    assert float(speedup(step, spec, concurrency=1)) == pytest.approx(expected, rel=1e-9)


def test_breakeven_raises_when_curves_do_not_cross():
    spec = SpeculationModel(k=3, mean_acceptance_length=2.6, drafter_overhead_s=H100_EAGLE_DRAFT_S)
    with pytest.raises(NoBreakeven, match="above 1"):
        breakeven_concurrency(H100, spec, low=1, high=64)


@pytest.mark.parametrize(
    "spec",
    [
        SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.004),
        SpeculationModel(k=3, mean_acceptance_length=2.2, draft_cost_ratio=0.1),
    ],
)
def test_inflection_is_the_knee_on_a_log_axis(spec):
    # S(B) is a logistic in log(B) for the linear step model, centred where the speculative
    # step's floor equals its per-batch slope times B.
    k, c = spec.k, spec.draft_cost_ratio
    floor = CPU.floor_s * (1 + k * c) + spec.drafter_overhead_s
    slope = CPU.per_token_s * (k + 1 + k * c)
    found = inflection_concurrency(CPU, spec, low=0.01, high=1000)
    assert found == pytest.approx(floor / slope, rel=1e-4)


def test_inflection_none_outside_search_range():
    spec = SpeculationModel(k=4, mean_acceptance_length=2.6)
    assert inflection_concurrency(CPU, spec, low=100, high=1000) is None


def test_acceptance_needed_at_breakeven_is_the_measured_one():
    spec = SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.002)
    crossing = breakeven_concurrency(CPU, spec, low=1, high=64)
    need = acceptance_needed(CPU, spec, concurrency=crossing)
    assert need.mean_acceptance_length == pytest.approx(2.6, rel=1e-9)
    assert need.alpha == pytest.approx(spec.alpha, rel=1e-6)
    assert need.draft_acceptance_rate == pytest.approx(1.6 / 4)
    # Far above the knee a draft model costs more than k + 1 tokens can repay.
    draft = SpeculationModel(k=4, mean_acceptance_length=2.6, draft_cost_ratio=0.1)
    hopeless = acceptance_needed(CPU, draft, concurrency=10_000)
    assert hopeless.alpha is None
    assert hopeless.draft_acceptance_rate is None
    assert hopeless.mean_acceptance_length > draft.k + 1


@pytest.mark.parametrize(
    ("step", "spec", "max_k"),
    [
        (CPU, SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.002), 4),
        (CPU, SpeculationModel(k=4, mean_acceptance_length=3.5, draft_cost_ratio=0.05), 6),
        (H100, SpeculationModel(k=3, mean_acceptance_length=2.0, drafter_overhead_s=0.002), 5),
    ],
)
def test_schedule_bands_are_contiguous_and_stop_speculating_above_breakeven(step, spec, max_k):
    bands = speculation_schedule(step, spec, max_k=max_k, max_batch_size=1024)
    assert bands[0].start == 1
    assert bands[-1].end == 1024
    for before, after in itertools.pairwise(bands):
        assert after.start == before.end + 1
        assert after.k != before.k
    assert all(band.start <= band.end and 0 <= band.k <= max_k for band in bands)
    # Above the breakeven of every k, k = 0; the config's own k stops at its breakeven.
    crossings = [
        breakeven_concurrency(step, spec_k, low=1, high=1024)
        for spec_k in (
            SpeculationModel(
                k=k,
                mean_acceptance_length=expected_tokens_per_step(alpha=spec.alpha, k=k),
                drafter_overhead_s=spec.drafter_overhead_s,
                draft_cost_ratio=spec.draft_cost_ratio,
            )
            for k in range(1, max_k + 1)
        )
    ]
    assert bands[-1].k == 0
    assert bands[-1].start == math.floor(max(crossings)) + 1
    for band in bands:
        if band.k == spec.k:
            assert band.end <= crossings[spec.k - 1]
        if band.k:  # where it speculates, it beats plain decoding
            batch = np.arange(band.start, band.end + 1, dtype=np.float64)
            fast = speculative_tokens_per_s(step, spec, concurrency=batch, k=band.k)
            assert np.all(fast > baseline_tokens_per_s(step, concurrency=batch))


def test_schedule_is_all_zero_when_speculation_never_pays():
    spec = SpeculationModel(k=4, mean_acceptance_length=1.05, drafter_overhead_s=0.01)
    assert speculation_schedule(CPU, spec, max_k=4, max_batch_size=64) == (ScheduleBand(1, 64, 0),)


# --- the fit ---------------------------------------------------------------------------------

RECOVERY_CASES = {
    "cpu-ngram": (
        CPU,
        SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.002),
        "ngram",
        (1, 2, 4, 8, 16, 32),
    ),
    "h100-ngram": (
        H100,
        SpeculationModel(k=3, mean_acceptance_length=2.0, drafter_overhead_s=0.0004),
        "ngram",
        (1, 4, 16, 32, 64, 128, 256, 512),
    ),
    "h100-draft-model": (
        H100,
        SpeculationModel(k=4, mean_acceptance_length=2.8, draft_cost_ratio=0.08),
        "draft_model",
        (1, 4, 16, 32, 64, 128, 256, 512),
    ),
    "weak-draft-model": (
        StepTimeModel(floor_s=0.02, per_token_s=0.0005),
        SpeculationModel(k=2, mean_acceptance_length=1.9, draft_cost_ratio=0.15),
        "draft_model",
        (1, 2, 4, 8, 16, 32, 64),
    ),
}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("case", sorted(RECOVERY_CASES))
def test_fit_recovers_breakeven_within_5_percent(case, seed):
    step, spec, method, levels = RECOVERY_CASES[case]
    truth = breakeven_concurrency(step, spec, low=levels[0], high=levels[-1])
    # 2% run-to-run noise, three repeats per level (vllm bench sweep's default).
    rows = sweep_rows(step, spec, method=method, levels=levels, seed=seed, noise=0.02, repeats=3)
    fit = fit_breakeven(rows, bootstrap_samples=0)
    assert fit.breakeven_concurrency == pytest.approx(truth, rel=0.05)
    assert fit.breakeven_ci is None  # no bootstrap asked


def test_fit_recovers_breakeven_and_acceptance_when_acceptance_was_not_measured():
    step, spec, method, levels = RECOVERY_CASES["cpu-ngram"]
    truth = breakeven_concurrency(step, spec, low=1, high=32)
    rows = sweep_rows(
        step, spec, method=method, levels=levels, noise=0.02, repeats=3, measured_acceptance=False
    )
    fit = fit_breakeven(rows, bootstrap_samples=0)
    assert fit.breakeven_concurrency == pytest.approx(truth, rel=0.05)
    assert not fit.primary.acceptance_measured
    assert fit.primary.mean_acceptance_length == pytest.approx(2.6, rel=0.1)


def test_default_fit_sees_a_per_sequence_cost_that_a_two_term_model_misreads():
    # Close to the CPU sweep in examples/. The curve is flat near the crossing, so 2% noise
    # moves single fits by up to ~10%; the median over seeds shows the bias, or its absence.
    step = StepTimeModel(floor_s=0.043, per_token_s=0.001, per_sequence_s=0.00036)
    spec = SpeculationModel(k=4, mean_acceptance_length=2.9, drafter_overhead_s=0.043)
    levels = (1, 2, 4, 8, 16, 32, 64)
    truth = breakeven_concurrency(step, spec, low=1, high=64)
    errors: dict[bool, list[float]] = {True: [], False: []}
    for seed in range(7):
        rows = sweep_rows(
            step, spec, method="ngram", levels=levels, seed=seed, noise=0.02, repeats=3
        )
        default = fit_breakeven(rows, bootstrap_samples=0)
        two_term = fit_breakeven(rows, bootstrap_samples=0, fit_per_sequence=False)
        assert "per_sequence_s" in {p.name for p in default.parameters}
        assert default.breakeven_concurrency is not None
        assert two_term.breakeven_concurrency is not None
        errors[True].append(default.breakeven_concurrency / truth - 1)
        errors[False].append(two_term.breakeven_concurrency / truth - 1)
    assert abs(float(np.median(errors[True]))) < 0.05
    assert float(np.median(errors[False])) < -0.2


def test_exact_data_recovers_parameters_with_per_sequence_term():
    step = StepTimeModel(floor_s=0.02, per_token_s=0.001, per_sequence_s=0.0005)
    spec = SpeculationModel(k=3, mean_acceptance_length=2.0, drafter_overhead_s=0.001)
    rows = sweep_rows(step, spec, method="ngram", levels=(1, 2, 4, 8, 16, 32, 64))
    fit = fit_breakeven(rows, bootstrap_samples=0, fit_per_sequence=True)
    assert fit.step_model.floor_s == pytest.approx(0.02, rel=1e-4)
    assert fit.step_model.per_token_s == pytest.approx(0.001, rel=1e-4)
    assert fit.step_model.per_sequence_s == pytest.approx(0.0005, rel=1e-3)
    assert fit.residual_rms_log < 1e-8


def test_bootstrap_interval_is_seeded_and_brackets_the_estimate():
    step, spec, method, levels = RECOVERY_CASES["cpu-ngram"]
    rows = sweep_rows(step, spec, method=method, levels=levels, seed=3, noise=0.03)
    first = fit_breakeven(rows, bootstrap_samples=40, seed=7)
    again = fit_breakeven(rows, bootstrap_samples=40, seed=7)
    assert first.breakeven_ci == again.breakeven_ci
    assert first.breakeven_ci is not None
    low, high = first.breakeven_ci
    assert first.breakeven_concurrency is not None
    assert low < first.breakeven_concurrency < high
    truth = breakeven_concurrency(step, spec, low=1, high=32)
    assert low < truth < high
    assert first.primary.bootstrap_crossing_share == 1.0


def test_standard_errors_come_with_the_parameters():
    step, spec, method, levels = RECOVERY_CASES["h100-draft-model"]
    rows = sweep_rows(step, spec, method=method, levels=levels, seed=1, noise=0.02)
    fit = fit_breakeven(rows, bootstrap_samples=0)
    by_name = {p.name: p for p in fit.parameters}
    assert set(by_name) == {"floor_s", "per_token_s", "draft_model-k4.draft_cost_ratio"}
    floor = by_name["floor_s"]
    assert 0 < floor.standard_error < floor.value
    assert abs(floor.value - H100_FLOOR_S) < 4 * floor.standard_error
    assert by_name["draft_model-k4.draft_cost_ratio"].unit == "1"


def test_no_crossing_in_range_is_an_answer_not_an_error():
    # H100 with good acceptance, measured only up to 64: speculation still pays at the top.
    spec = SpeculationModel(k=3, mean_acceptance_length=2.6, drafter_overhead_s=0.002)
    rows = sweep_rows(H100, spec, method="ngram", levels=(1, 4, 16, 64), noise=0.01)
    fit = fit_breakeven(rows, bootstrap_samples=20)
    assert fit.breakeven_concurrency is None
    assert fit.breakeven_ci is None
    assert fit.primary.speedup_at_low > fit.primary.speedup_at_high > 1.0
    assert (fit.primary.concurrency_low, fit.primary.concurrency_high) == (1.0, 64.0)
    as_json = json.loads(json.dumps(breakeven_fit_as_dict(fit)))
    assert as_json["breakeven_concurrency"] is None
    assert as_json["breakeven_ci"] is None
    assert as_json["speedup_at_edges"][1] > 1.0


def test_speculation_that_never_pays_has_no_crossing_and_never_speculates():
    spec = SpeculationModel(k=4, mean_acceptance_length=1.05, drafter_overhead_s=0.01)
    rows = sweep_rows(CPU, spec, method="ngram", levels=(1, 2, 4, 8, 16), noise=0.01)
    fit = fit_breakeven(rows, bootstrap_samples=0)
    assert fit.breakeven_concurrency is None
    assert fit.primary.speedup_at_low < 1.0
    assert fit.schedule == (ScheduleBand(1, 256, 0),)


def test_design_cpu_sweep_breaks_even_between_4_and_8():
    fit = fit_breakeven(cpu_rows(), bootstrap_samples=50, seed=0)
    assert fit.breakeven_concurrency is not None
    assert 4.0 < fit.breakeven_concurrency < 8.0
    assert fit.breakeven_ci is not None
    assert fit.breakeven_ci[0] < fit.breakeven_concurrency < fit.breakeven_ci[1]
    # The floor dominates at concurrency 1: most of a step is not per-token compute.
    assert fit.step_model.floor_s > 5 * fit.step_model.per_token_s
    primary = fit.primary
    assert [c.concurrency for c in primary.comparisons] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert primary.comparisons[0].measured_speedup == pytest.approx(54.9 / 25.3)
    assert primary.comparisons[0].predicted_speedup > 1.5
    assert primary.comparisons[-1].predicted_speedup < 1.0
    assert primary.inflection_in_range
    # The need for acceptance grows with load.
    needs = [c.acceptance_needed.mean_acceptance_length for c in primary.comparisons]
    assert needs == sorted(needs)
    assert fit.schedule[0] == ScheduleBand(1, fit.schedule[0].end, fit.schedule[0].k)
    assert fit.schedule[0].k > 0
    assert fit.schedule[-1].k == 0
    as_json = json.loads(json.dumps(breakeven_fit_as_dict(fit)))
    assert as_json["breakeven_concurrency"] == pytest.approx(fit.breakeven_concurrency)
    assert len(as_json["breakeven_ci"]) == 2
    assert as_json["schedule"][-1][2] == 0
    assert as_json["schedule"][0][0] == 1


def test_repeats_are_compared_by_median():
    rows = cpu_rows()
    rows.append(replace(rows[0], output_tokens_per_s=1.0))  # one bad repeat at concurrency 1
    rows.append(replace(rows[0], output_tokens_per_s=26.0))
    fit = fit_breakeven(rows, bootstrap_samples=0)
    assert fit.primary.comparisons[0].measured_baseline_tokens_per_s == 25.3


def test_acceptance_rate_stands_in_for_a_missing_acceptance_length():
    spec = SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.002)
    rows = [
        replace(row, acceptance_rate=0.4, mean_acceptance_length=math.nan)
        if row.method == "ngram"
        else row
        for row in sweep_rows(CPU, spec, method="ngram", levels=(1, 2, 4, 8))
    ]
    fit = fit_breakeven(rows, bootstrap_samples=0)
    assert fit.primary.acceptance_measured
    assert fit.primary.mean_acceptance_length == pytest.approx(1 + 4 * 0.4)


def test_several_configs_and_primary_choice():
    ngram = SpeculationModel(k=4, mean_acceptance_length=2.6, drafter_overhead_s=0.002)
    draft = SpeculationModel(k=3, mean_acceptance_length=1.2, draft_cost_ratio=0.2)
    rows = sweep_rows(CPU, ngram, method="ngram", levels=(1, 2, 4, 8, 16))
    rows += [
        r
        for r in sweep_rows(CPU, draft, method="draft_model", levels=(1, 2, 4, 8, 16))
        if r.method != "none"
    ]
    fit = fit_breakeven(rows, bootstrap_samples=0, primary_config="draft_model-k3")
    assert [c.config for c in fit.configs] == ["ngram-k4", "draft_model-k3"]
    assert fit.primary.config == "draft_model-k3"
    assert fit.breakeven_concurrency is None  # a poor draft model never pays
    truth = breakeven_concurrency(CPU, ngram, low=1, high=16)
    assert fit.configs[0].breakeven_concurrency == pytest.approx(truth, rel=1e-6)
    with pytest.raises(InvalidInput, match="primary config 'eagle'"):
        fit_breakeven(rows, bootstrap_samples=0, primary_config="eagle")


# --- degenerate input ------------------------------------------------------------------------


def _without(rows: list[SweepPoint], predicate: Callable[[SweepPoint], bool]) -> list[SweepPoint]:
    return [r for r in rows if not predicate(r)]


def _with_rate(
    rows: list[SweepPoint], config: str, concurrency: int, rate: float
) -> list[SweepPoint]:
    return [
        replace(r, output_tokens_per_s=rate)
        if r.config == config and r.concurrency == concurrency
        else r
        for r in rows
    ]


@pytest.mark.parametrize(
    ("make_rows", "config", "message"),
    [
        (lambda rows: _without(rows, lambda r: r.config == "none"), None, "missing baseline"),
        (
            lambda rows: _without(rows, lambda r: r.config == "ngram-k4" and r.concurrency > 2),
            "ngram-k4",
            "at least 3 concurrency levels, got 2",
        ),
        (
            lambda rows: _without(rows, lambda r: r.config == "none" and r.concurrency < 8),
            "none",
            "at least 3 concurrency levels, got 2",
        ),
        (lambda rows: _with_rate(rows, "ngram-k4", 4, math.nan), "ngram-k4", "NaN"),
        (lambda rows: _with_rate(rows, "none", 8, -12.0), "none", "must be finite and > 0"),
        (lambda rows: _with_rate(rows, "none", 2, 0.0), "none", "must be finite and > 0"),
        (lambda rows: _with_rate(rows, "ngram-k4", 16, math.inf), "ngram-k4", "finite"),
        (lambda rows: [], None, "no rows"),
        (lambda rows: _without(rows, lambda r: r.config != "none"), None, "no speculative"),
        (
            lambda rows: [
                *rows,
                *(replace(r, config="none-2") for r in rows if r.config == "none"),
            ],
            None,
            "more than one baseline",
        ),
        (
            lambda rows: [replace(r, k=0) if r.config == "ngram-k4" else r for r in rows],
            "ngram-k4",
            "k must be >= 1",
        ),
        (
            lambda rows: [
                replace(r, k=2) if r.config == "ngram-k4" and r.concurrency == 16 else r
                for r in rows
            ],
            "ngram-k4",
            "disagree",
        ),
        (
            lambda rows: [replace(r, concurrency=0) if r.concurrency == 1 else r for r in rows],
            "none",
            "concurrency must be a number >= 1",
        ),
        (
            lambda rows: [
                replace(r, mean_acceptance_length=5.5) if r.config == "ngram-k4" else r
                for r in rows
            ],
            "ngram-k4",
            r"mean_acceptance_length must lie in \[1, k\+1\]",
        ),
        (
            lambda rows: [
                replace(r, concurrency=r.concurrency * 100) if r.config == "ngram-k4" else r
                for r in rows
            ],
            "ngram-k4",
            "does not overlap",
        ),
    ],
    ids=[
        "missing-baseline",
        "two-levels-speculative",
        "two-levels-baseline",
        "nan-throughput",
        "negative-throughput",
        "zero-throughput",
        "infinite-throughput",
        "empty",
        "baseline-only",
        "two-baselines",
        "speculative-k0",
        "mixed-k",
        "zero-concurrency",
        "impossible-acceptance",
        "disjoint-ranges",
    ],
)
def test_degenerate_input_is_rejected_with_a_clear_message(make_rows, config, message):
    with pytest.raises(InvalidSweep, match=message) as caught:
        fit_breakeven(make_rows(cpu_rows()), bootstrap_samples=0)
    assert isinstance(caught.value, InvalidInput)
    assert caught.value.config == config
    if config is not None:
        assert str(caught.value).startswith(f"config {config!r}: ")


def test_per_sequence_term_needs_measured_acceptance():
    with pytest.raises(InvalidSweep, match="per_sequence_s"):
        fit_breakeven(cpu_rows(), bootstrap_samples=0, fit_per_sequence=True)


@pytest.mark.parametrize(
    "options",
    [
        {"bootstrap_samples": -1},
        {"confidence": 1.0},
        {"max_k": -1},
        {"max_batch_size": 0},
        {"bootstrap_range_factor": 0.5},
    ],
)
def test_bad_options_are_rejected(options):
    with pytest.raises(InvalidInput):
        fit_breakeven(cpu_rows(), **options)
