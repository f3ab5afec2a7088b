"""Probe figures and probe drift (pure): per-position acceptance from vLLM's histograms, a
run's summary, and the CUSUM on generated probe series with a known change point."""

import hashlib
import itertools
from importlib import resources

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.anomalies.rules.acceptance_drift import AcceptanceBucket
from app.domain.errors import InvalidInput
from app.probe.probe_set import BUNDLED_SHA256, InvalidProbeSet, load_probe_set
from app.probe.rules.drift import (
    BASELINE_RUNS,
    ProbeResponse,
    acceptance_per_position,
    detect_probe_drop,
    extra_work_share,
    summarize,
)

DRAFTED = 1500


def _runs(rates: list[float]) -> list[AcceptanceBucket]:
    return [AcceptanceBucket(accepted=round(r * DRAFTED), drafted=DRAFTED) for r in rates]


def _noisy(
    seed: int, runs: int, *, noise: float = 0.01, change: int | None = None, fall: float = 0.0
) -> list[float]:
    rates = np.random.default_rng(seed).normal(0.62, noise, runs)
    if change is not None:
        rates[change:] -= fall
    return [float(r) for r in np.clip(rates, 0, 1)]


def test_position_rates_are_tail_sums_over_steps():
    histogram, rates = acceptance_per_position([[6, 6, 5, 0, 6], [1, 0, 0, 0, 1], [], [0] * 5])
    assert histogram == [7, 6, 5, 0, 7]
    assert rates == pytest.approx([18 / 25, 12 / 25, 7 / 25, 7 / 25])
    assert acceptance_per_position([[0, 0, 0]]) == ([0, 0, 0], [])
    assert acceptance_per_position([]) == ([], [])


@given(st.lists(st.lists(st.integers(0, 50), min_size=5, max_size=5), min_size=1, max_size=8))
def test_position_rates_fall_and_average_to_the_acceptance(histograms):
    histogram, rates = acceptance_per_position(histograms)
    steps = sum(histogram)
    if steps == 0:
        assert rates == []
        return
    assert all(a >= b for a, b in itertools.pairwise(rates))
    accepted = sum(j * n for j, n in enumerate(histogram))
    assert sum(rates) / 4 == pytest.approx(accepted / (4 * steps))


def test_a_run_summary_counts_only_answered_requests_and_times_like_vllm_bench():
    ok = ProbeResponse(
        ok=True, seconds=2.0, ttft_s=0.5, output_tokens=31, num_drafts=10, draft_tokens=40,
        accepted_tokens=20, histogram=(2, 2, 2, 2, 2),
    )  # fmt: skip
    one_token = ProbeResponse(ok=True, seconds=0.3, ttft_s=0.3, output_tokens=1)
    failed = ProbeResponse(ok=False, seconds=0.1, ttft_s=None, output_tokens=0)
    summary = summarize([ok, one_token, failed], wall_seconds=4.0)
    assert (summary.requests, summary.ok, summary.output_tokens) == (3, 2, 32)
    assert (summary.draft_tokens, summary.accepted_tokens, summary.num_drafts) == (40, 20, 10)
    assert summary.acceptance_rate == 0.5
    assert summary.acceptance_per_position == pytest.approx([0.8, 0.6, 0.4, 0.2])
    assert summary.tokens_per_s == 8.0
    assert summary.tpot_p50_ms == summary.tpot_p90_ms == pytest.approx(50.0)  # 1.5 s / 30
    assert summary.ttft_p50_ms == pytest.approx(400.0)
    nothing = summarize([failed], wall_seconds=1.0)
    assert (nothing.acceptance_rate, nothing.tokens_per_s, nothing.tpot_p50_ms) == (None,) * 3


def test_extra_work_is_the_share_the_lost_acceptance_added():
    # 1 + 570/1000 = 1.57 verified tokens per output token before, 1 + 720/1000 after.
    share = extra_work_share(before=(930, 1500, 1000), after=(780, 1500, 1000))
    assert share == pytest.approx(1 - 1.57 / 1.72)
    assert extra_work_share(before=(780, 1500, 1000), after=(930, 1500, 1000)) == 0.0


def test_a_broken_draft_is_found_at_its_first_run():
    alarm = detect_probe_drop(_runs(_noisy(1, 80, change=50, fall=0.42)))
    assert alarm is not None
    assert alarm.alarm_index == 50
    assert 46 <= alarm.change_index <= 50
    assert alarm.baseline_rate == pytest.approx(0.62, abs=0.01)
    assert alarm.recent_rate < 0.3


@pytest.mark.parametrize("seed", range(20))
def test_a_fall_of_five_points_is_found_within_eight_runs_and_dated(seed):
    change = 40
    alarm = detect_probe_drop(_runs(_noisy(seed, 100, change=change, fall=0.05)))
    assert alarm is not None
    delay = alarm.alarm_index - change
    assert 0 <= delay <= 8, delay  # bench/probe_drift.py: median 3, p90 4 at 1 point noise
    assert abs(alarm.change_index - change) <= 1  # dated by likelihood


def test_detection_delay_and_false_alarms_over_many_series():
    """100 series each: a 3-point fall at 1 point of noise, and no change at all."""
    delays, dated, false_alarms = [], [], 0
    for seed in range(100):
        change = BASELINE_RUNS + 10 + seed % 40
        alarm = detect_probe_drop(_runs(_noisy(1000 + seed, 120, change=change, fall=0.03)))
        assert alarm is not None
        if alarm.alarm_index < change:
            false_alarms += 1
        else:
            delays.append(alarm.alarm_index - change)
            dated.append(alarm.change_index - change)
        steady = detect_probe_drop(_runs(_noisy(5000 + seed, BASELINE_RUNS + 168)))
        false_alarms += steady is not None
    assert np.median(delays) <= 7
    assert np.mean(np.abs(dated) <= 2) >= 0.95
    assert np.percentile(delays, 90) <= 12
    assert false_alarms <= 4  # of 200 series (bench: 1 in 50 weeks at this noise)


@pytest.mark.parametrize("seed", range(10))
def test_a_deterministic_probe_raises_nothing_and_a_rise_never_alarms(seed):
    # One engine at concurrency 1 answers a greedy set identically: no noise at all.
    assert detect_probe_drop(_runs([0.62] * 200)) is None
    rising = _noisy(seed, 200, change=60, fall=-0.1)
    assert detect_probe_drop(_runs(rising)) is None


def test_no_test_before_the_baseline_is_complete_or_without_drafts():
    assert detect_probe_drop(_runs([0.62] * BASELINE_RUNS + [0.1])) is not None
    assert detect_probe_drop(_runs([0.62] * (BASELINE_RUNS - 1) + [0.1])) is None
    speculation_off = [AcceptanceBucket(0, 0)] * BASELINE_RUNS + _runs([0.1] * 5)
    assert detect_probe_drop(speculation_off) is None
    with pytest.raises(InvalidInput, match="at least 3 runs"):
        detect_probe_drop(_runs([0.6] * 10), baseline=2)


def test_the_bundled_probe_set_is_fixed_and_versioned():
    data = resources.files("app").joinpath("data/probe_v1.jsonl").read_bytes()
    assert hashlib.sha256(data).hexdigest() == BUNDLED_SHA256["v1"], (
        "probe_v1.jsonl changed: a released probe set never changes; add probe_v2.jsonl"
    )
    probe_set = load_probe_set()
    assert (probe_set.version, probe_set.sha256) == ("v1", BUNDLED_SHA256["v1"])
    assert 12 <= len(probe_set.prompts) <= 20
    assert {p.kind for p in probe_set.prompts} == {"copy", "code", "chat", "qa"}
    assert {p.max_tokens for p in probe_set.prompts} == {64}
    with pytest.raises(InvalidProbeSet, match="no bundled probe set"):
        load_probe_set(version="v9")


def test_a_probe_set_file_is_versioned_by_its_name_and_checked(tmp_path):
    path = tmp_path / "nightly.jsonl"
    path.write_text(
        '{"id": "a", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}\n'
    )
    probe_set = load_probe_set(path)
    assert probe_set.version == "nightly"
    assert probe_set.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    path.write_text(path.read_text() * 2)
    with pytest.raises(InvalidProbeSet, match="unique ids"):
        load_probe_set(path)
    path.write_text('{"id": "a"}\n')
    with pytest.raises(InvalidProbeSet, match="line 1"):
        load_probe_set(path)
