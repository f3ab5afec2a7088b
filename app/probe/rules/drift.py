"""Acceptance probes: the figures of one probe run, and drift of a deployment's probe
acceptance from its baseline (pure).

A probe run sends a fixed, versioned prompt set (greedy, fixed ``max_tokens``) through a
deployment and reads vLLM's per-request ``metrics.speculative_decoding`` (with
``--enable-per-request-metrics``). Its ``acceptance_histogram`` has ``k + 1`` entries: entry
``i`` counts the draft steps that accepted exactly ``i`` drafted tokens. Summed over the
run's requests, the acceptance at position ``p`` (1-based) is the share of steps that
accepted at least ``p`` tokens, ``sum(h[p:]) / sum(h)`` (derived in
:mod:`app.speculation.rules.positions`): position 1 is the chance that the first drafted
token is kept, and the rates fall with the position.

Drift. Each run is one observation: accepted over drafted tokens of the whole set. The
test is Page's CUSUM, one-sided (downward), the same as production acceptance drift
(:func:`app.anomalies.rules.acceptance_drift.detect_drop`): rates standardised by the baseline's
median and MAD (x 1.4826, floored at one point of acceptance), each run adds ``-(z + k)``,
the statistic is floored at 0 and alarms at ``h``. The change is dated by maximum likelihood
(:func:`date_change`) between the run after the statistic last left 0 and the alarm: that
run alone (Page's own estimate) comes many runs early when noise keeps the statistic above
0 before the fall (at 1 point of noise it was exact in 54% of detected falls and 13+ runs
early in 5%; the likelihood dating, in bench/probe_drift.py, exact in 84 to 100% and within
2 runs in 99 to 100%). The baseline is the first :data:`BASELINE_RUNS` runs of a series
(one deployment, model, probe set and concurrency); fewer runs, no test. A median and a MAD from
a couple of dozen runs are much less certain than the hourly test's 168 buckets, so the
threshold is higher: :data:`PROBE_H`. bench/probe_drift.py measured, on generated series
(the set's acceptance 62%, run-to-run noise of 0.5, 1 and 2 points; 500 series each), for
``N = 24``, ``k = 0.5``, ``h = 16``: a false alarm in 0, 1 in 50 and 1 in 18 weeks of
hourly runs (0, 0.12 and 0.33 per 1,000 runs; the production test accepts 1 in 50); a fall
of 3 points found after a median of 6, 6 and 14 runs (90th percentile 7, 9 and 29), of 10
points after 1, 1 and 3, a broken draft (to 20%) at its first run.
"""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import median

import numpy as np

from app.anomalies.rules import verified_per_output_token
from app.anomalies.rules.acceptance_drift import AcceptanceBucket, DriftAlarm, detect_drop
from app.domain.errors import InvalidInput
from app.probe.rules.defaults import BASELINE_RUNS as BASELINE_RUNS
from app.probe.rules.defaults import PROBE_H as PROBE_H
from app.probe.rules.defaults import PROBE_K as PROBE_K
from app.speculation.rules.positions import MAX_HISTOGRAM, PositionCounts, sum_histograms


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeResponse:
    """What one probe request measured."""

    ok: bool
    seconds: float
    """From sending the request to its last byte."""
    ttft_s: float | None
    """From sending to the first chunk with text."""
    output_tokens: int
    num_drafts: int = 0
    """Speculative (draft) steps."""
    draft_tokens: int = 0
    accepted_tokens: int = 0
    histogram: Sequence[int] = ()
    """vLLM's ``acceptance_histogram``: steps that accepted exactly i tokens."""

    @property
    def tpot_s(self) -> float | None:
        """Time per output token after the first (as ``vllm bench serve``); None for one
        token or none."""
        if not self.ok or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.seconds - self.ttft_s) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeSummary:
    """The figures of one probe run."""

    requests: int
    ok: int
    output_tokens: int
    num_drafts: int
    draft_tokens: int
    accepted_tokens: int
    acceptance_rate: float | None
    """Accepted over drafted tokens; None when nothing was drafted."""
    histogram: list[int]
    acceptance_per_position: list[float]
    tokens_per_s: float | None
    """Output tokens of the run over its wall time."""
    tpot_p50_ms: float | None
    tpot_p90_ms: float | None
    ttft_p50_ms: float | None


def acceptance_per_position(histograms: Sequence[Sequence[int]]) -> tuple[list[int], list[float]]:
    """The summed histogram and position p's acceptance (p = 1..k): steps that accepted at
    least p tokens over the steps (:class:`~app.speculation.rules.positions.PositionCounts`).
    Empty histograms (no speculation) and over-long ones are left out; rates are empty
    without steps."""
    usable = [h for h in histograms if 0 < len(h) <= MAX_HISTOGRAM and min(h) >= 0]
    total = list(sum_histograms(usable))
    rates = list(PositionCounts.of_histogram(total).rates) if sum(total) else []
    return total, rates


def _percentile_ms(values: Sequence[float], q: float) -> float | None:
    return float(np.percentile(np.asarray(values), q)) * 1000.0 if values else None


def summarize(responses: Sequence[ProbeResponse], *, wall_seconds: float) -> ProbeSummary:
    """The figures of a run from its responses (failed ones count as requests only)."""
    ok = [r for r in responses if r.ok]
    histogram, positions = acceptance_per_position([r.histogram for r in ok])
    drafted = sum(r.draft_tokens for r in ok)
    accepted = sum(r.accepted_tokens for r in ok)
    output = sum(r.output_tokens for r in ok)
    tpot = [t for r in ok if (t := r.tpot_s) is not None]
    ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
    return ProbeSummary(
        requests=len(responses),
        ok=len(ok),
        output_tokens=output,
        num_drafts=sum(r.num_drafts for r in ok),
        draft_tokens=drafted,
        accepted_tokens=accepted,
        acceptance_rate=accepted / drafted if drafted > 0 else None,
        histogram=histogram,
        acceptance_per_position=positions,
        tokens_per_s=output / wall_seconds if wall_seconds > 0 and ok else None,
        tpot_p50_ms=_percentile_ms(tpot, 50),
        tpot_p90_ms=_percentile_ms(tpot, 90),
        ttft_p50_ms=_percentile_ms(ttft, 50),
    )


def detect_probe_drop(
    runs: Sequence[AcceptanceBucket],
    *,
    baseline: int = BASELINE_RUNS,
    k: float = PROBE_K,
    h: float = PROBE_H,
) -> DriftAlarm | None:
    """The first alarm of the downward CUSUM on a series of probe runs (oldest first)
    after its first ``baseline`` runs, the change dated by :func:`date_change`; None before
    the baseline is complete.

    Raises:
        InvalidInput: For a baseline under 3 runs, or bad k or h.
    """
    if baseline < 3:
        raise InvalidInput(f"a probe baseline needs at least 3 runs, got {baseline}")
    if len(runs) <= baseline:
        return None
    rates = [r.accepted / r.drafted for r in runs[:baseline] if r.drafted > 0]
    if len(rates) < 3:
        return None  # a baseline that hardly drafted (speculation off) says nothing
    alarm = detect_drop(runs, baseline=baseline, k=k, h=h)
    if alarm is None:
        return None
    change = date_change(
        runs, center=median(rates), start=alarm.change_index, end=alarm.alarm_index
    )
    after = runs[change:]
    drafted = sum(r.drafted for r in after)
    return replace(
        alarm,
        change_index=change,
        recent_rate=sum(r.accepted for r in after) / drafted if drafted else alarm.recent_rate,
    )


def date_change(runs: Sequence[AcceptanceBucket], *, center: float, start: int, end: int) -> int:
    """The most likely first run of a fall from ``center`` within ``runs[start:end + 1]``:
    the ``t`` maximising ``(sum over runs t..end of (center - rate))**2 / n``, the likelihood
    ratio of a step from the known baseline level to an unknown lower one (equal variances).
    Runs that drafted nothing are left out."""
    best, found = -1.0, start
    for t in range(start, end + 1):
        rates = [r.accepted / r.drafted for r in runs[t : end + 1] if r.drafted > 0]
        fall = sum(center - rate for rate in rates)
        score = fall * fall / len(rates) if rates and fall > 0 else 0.0
        if score > best:
            best, found = score, t
    return found


def extra_work_share(*, before: tuple[int, int, int], after: tuple[int, int, int]) -> float:
    """The share of GPU work the lost acceptance added: ``1 - w_before / w_after``, where w
    is the verified tokens per output token of (accepted, drafted, output) sums
    (:func:`app.anomalies.rules.verified_per_output_token`, as production acceptance drift
    costs it); 0 when the work did not grow."""
    w_before, w_after = (
        verified_per_output_token(accepted=accepted, drafted=drafted, output=output)
        for accepted, drafted, output in (before, after)
    )
    return 0.0 if w_after <= w_before else 1 - w_before / w_after
