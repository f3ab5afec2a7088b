"""The acceptance-drift CUSUM: silent on a stable series, dates a fall near its start."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.anomalies.rules.acceptance_drift import AcceptanceBucket, detect_drop
from app.domain.errors import InvalidInput


def _series(rates: list[float], drafted: int = 4000) -> list[AcceptanceBucket]:
    return [AcceptanceBucket(accepted=round(r * drafted), drafted=drafted) for r in rates]


def _noisy(seed: int, hours: int, change: int | None = None, fall: float = 0.0) -> list[float]:
    rates = np.random.default_rng(seed).normal(0.7, 0.03, hours)
    if change is not None:
        rates[change:] -= fall
    return [float(r) for r in np.clip(rates, 0, 1)]


def test_a_broken_draft_is_found_at_once_and_dated_at_the_change():
    alarm = detect_drop(_series(_noisy(1, 240, change=200, fall=0.5)), baseline=168)
    assert alarm is not None
    assert alarm.alarm_index == 200  # the first bucket of the fall
    assert 195 <= alarm.change_index <= 200  # dated where the statistic last left 0
    assert alarm.baseline_rate == pytest.approx(0.7, abs=0.01)
    assert alarm.recent_rate < 0.5


def test_a_small_fall_is_found_within_two_days():
    alarm = detect_drop(_series(_noisy(2, 336, change=200, fall=0.06)), baseline=168)
    assert alarm is not None
    assert 200 <= alarm.alarm_index <= 248
    assert 190 <= alarm.change_index <= alarm.alarm_index


@pytest.mark.parametrize("seed", range(10))
def test_a_stable_week_raises_nothing(seed):
    assert detect_drop(_series(_noisy(seed, 336)), baseline=168) is None


@given(
    baseline=st.lists(st.floats(0.5, 0.9), min_size=10, max_size=10),
    later=st.lists(st.floats(0.0, 0.1), min_size=1, max_size=60),
    falls=st.booleans(),
)
def test_only_later_buckets_alarm_and_never_when_acceptance_rises(baseline, later, falls):
    top = max(baseline)
    rates = baseline + [max(0.0, min(baseline) - x) if falls else min(1.0, top + x) for x in later]
    alarm = detect_drop(_series(rates), baseline=10)
    if alarm is not None:
        assert falls
        assert 10 <= alarm.change_index <= alarm.alarm_index < len(rates)


def test_buckets_without_drafts_carry_no_evidence_and_a_thin_baseline_is_refused():
    quiet = [AcceptanceBucket(0, 0)] * 50
    assert detect_drop(_series([0.7, 0.71, 0.69]) + quiet, baseline=3) is None
    with pytest.raises(InvalidInput, match="at least 3 buckets"):
        detect_drop(quiet, baseline=10)


def test_an_alarm_needs_a_real_fall_of_the_tokens_acceptance():
    """Light buckets at 30% carry the median-based CUSUM over its threshold while the heavy
    ones hold the tokens' acceptance at 49%: no "fell from 49% to 49%"."""
    baseline = [AcceptanceBucket(accepted=490, drafted=1000)] * 10
    later = [AcceptanceBucket(3, 10), AcceptanceBucket(49_000, 100_000)] * 10
    assert detect_drop(baseline + later, baseline=10) is None
    flat = detect_drop(baseline + later, baseline=10, min_drop=1e-9)
    assert flat is not None  # what used to be reported
    assert f"{flat.baseline_rate:.0%}" == f"{flat.recent_rate:.0%}" == "49%"
    fell = [AcceptanceBucket(3, 10), AcceptanceBucket(45_000, 100_000)] * 10
    alarm = detect_drop(baseline + fell, baseline=10)
    assert alarm is not None
    assert alarm.baseline_rate - alarm.recent_rate >= 0.01
    with pytest.raises(InvalidInput, match="min_drop"):
        detect_drop(baseline + later, baseline=10, min_drop=0)
