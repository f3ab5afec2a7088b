"""The waste rules: which acceptance groups, breakeven exposures and idle shares become
findings, and at what cost (the findings' vocabulary and the interval's reasoning are in
:mod:`app.domain.findings`)."""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from scipy.stats import t as student_t

from app.breakeven.rules.curve import BreakevenCurve, speedup_at
from app.breakeven.rules.speculation import alpha_from_acceptance_length
from app.domain.errors import InvalidInput
from app.domain.findings import (
    MARGINAL_ACCEPTANCE_FLOOR,
    AcceptanceGroup,
    Finding,
    FindingKind,
    Scope,
    Thresholds,
    monthly,
)
from app.domain.money import format_micros


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakevenExposure:
    """Speculative requests of a deployment that ran above its breakeven concurrency."""

    deployment: str
    method: str
    requests: int
    seconds: float
    """Wall time of those requests, summed."""
    mean_concurrency: float
    cost_micros: int


@dataclass(frozen=True, slots=True, kw_only=True)
class IdleExposure:
    deployment: str
    idle_micros: int
    gpu_micros: int
    """Request plus idle cost of the deployment's GPU rows."""
    replicas: int


def wilson_interval(successes: int, trials: int, *, confidence: float) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion.

    Args:
        successes: Accepted draft tokens.
        trials: Drafted tokens, > 0.
        confidence: Two-sided coverage, e.g. 0.95.

    Returns:
        ``(low, high)`` within [0, 1].

    Raises:
        InvalidInput: If the counts are inconsistent or confidence is outside (0, 1).
    """
    if trials <= 0 or not 0 <= successes <= trials:
        raise InvalidInput(
            f"need 0 <= successes <= trials and trials > 0, got {successes}/{trials}"
        )
    if not 0.0 < confidence < 1.0:
        raise InvalidInput(f"confidence must lie in (0, 1), got {confidence}")
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # Exact in theory, not in floating point: keep p inside its own interval.
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


def acceptance_interval(group: AcceptanceGroup, *, confidence: float) -> tuple[float, float]:
    """Two-sided interval of a group's acceptance rate with requests as the sampled units
    (see the module's notes), widened to the token-level Wilson interval where that is
    wider. One request alone says nothing about the spread: (0, 1).

    Raises:
        InvalidInput: If the counts are inconsistent or confidence is outside (0, 1).
    """
    drafted, accepted = group.draft_tokens, min(group.accepted_tokens, group.draft_tokens)
    wilson_low, wilson_high = wilson_interval(accepted, drafted, confidence=confidence)
    n = group.requests
    if n < 2:
        return 0.0, 1.0
    rate = accepted / drafted
    residual_ss = max(
        0.0,
        group.accepted_sq - 2 * rate * group.accepted_drafted + rate * rate * group.drafted_sq,
    )
    se = math.sqrt(n / (n - 1) * residual_ss) / drafted
    half = float(student_t.ppf(0.5 + confidence / 2, n - 1)) * se
    return max(0.0, min(rate - half, wilson_low)), min(1.0, max(rate + half, wilson_high))


def suggested_k(
    *, num_drafts: int, draft_tokens: int, accepted_tokens: int, k: int | None
) -> int | None:
    """The k to move to: the longest draft whose last position is still accepted with
    probability at least :data:`MARGINAL_ACCEPTANCE_FLOOR`; 0 means no k is worth drafting.

    Returns:
        The suggestion, or None when k or the draft counts are unknown.
    """
    if not k or k < 1 or num_drafts <= 0 or draft_tokens <= 0:
        return None
    length = min(max((accepted_tokens + num_drafts) / num_drafts, 1.0), k + 1.0)
    try:
        alpha = alpha_from_acceptance_length(mean_acceptance_length=length, k=k)
    except InvalidInput:
        return None
    best = 0
    for j in range(1, k + 1):
        if alpha**j >= MARGINAL_ACCEPTANCE_FLOOR:
            best = j
    return best


def low_acceptance_findings(
    groups: Sequence[AcceptanceGroup], thresholds: Thresholds, *, window_seconds: float
) -> list[Finding]:
    """Groups whose acceptance rate is confidently below the threshold."""
    findings: list[Finding] = []
    for group in groups:
        if group.requests < thresholds.min_requests or group.draft_tokens <= 0:
            continue
        accepted = min(group.accepted_tokens, group.draft_tokens)
        low, high = acceptance_interval(group, confidence=thresholds.confidence)
        if high >= thresholds.acceptance:
            continue
        rejected = group.draft_tokens - accepted
        wasted = (
            round(group.cost_micros * rejected / group.scheduled_tokens)
            if group.scheduled_tokens > 0
            else 0
        )
        target_k = suggested_k(
            num_drafts=group.num_drafts,
            draft_tokens=group.draft_tokens,
            accepted_tokens=accepted,
            k=group.k,
        )
        rate = accepted / group.draft_tokens
        findings.append(
            Finding(
                kind=FindingKind.low_acceptance,
                scope=group.scope,
                key=group.key,
                window_cost_micros=wasted,
                monthly_cost_micros=monthly(wasted, window_seconds),
                action=_acceptance_action(group, target_k),
                detail=(
                    f"{rate:.1%} of {group.draft_tokens} drafted tokens accepted over "
                    f"{group.requests} requests ({thresholds.confidence:.0%} interval "
                    f"{low:.1%}-{high:.1%} with requests as the sampled units, below the "
                    f"{thresholds.acceptance:.0%} threshold); "
                    f"{rejected} rejected draft tokens were verified for nothing"
                ),
                metrics={
                    "acceptance_rate": round(rate, 4),
                    "acceptance_low": round(low, 4),
                    "acceptance_high": round(high, 4),
                    "requests": group.requests,
                    "draft_tokens": group.draft_tokens,
                    "accepted_tokens": accepted,
                    "method": group.method,
                    "k": group.k,
                    "suggested_k": target_k,
                },
            )
        )
    return findings


def _acceptance_action(group: AcceptanceGroup, target_k: int | None) -> str:
    if target_k is not None and group.k and 0 < target_k < group.k:
        return (
            f"lower k (num_speculative_tokens) from {group.k} to {target_k}: positions "
            f"beyond {target_k} are accepted less than "
            f"{MARGINAL_ACCEPTANCE_FLOOR:.0%} of the time"
        )
    return (
        "change the drafter (a draft model closer to the target, or ngram for "
        "copy-heavy traffic), or turn speculation off for this traffic"
    )


def above_breakeven_finding(
    curve: BreakevenCurve, exposure: BreakevenExposure, *, window_seconds: float
) -> Finding | None:
    """A finding for speculative requests above the breakeven, or None if there were none."""
    if exposure.requests <= 0:
        return None
    speedup = speedup_at(curve.speedups, exposure.mean_concurrency) if curve.speedups else 1.0
    loss = max(0.0, 1.0 - min(speedup, 1.0))
    wasted = round(exposure.cost_micros * loss)
    schedule = [list(band) for band in curve.schedule]
    action = (
        "apply the fitted speculation schedule (vLLM "
        f"num_speculative_tokens_per_batch_size: {schedule})"
        if schedule
        else f"turn speculation off above {curve.breakeven_concurrency:.1f} concurrent requests"
    )
    if exposure.method == "draft_model":
        action += (
            "; keep draft and target on one NUMA node, since a drafter on another "
            "node slows every draft step and lowers the breakeven"
        )
    return Finding(
        kind=FindingKind.above_breakeven,
        scope=Scope.deployment,
        key=curve.deployment,
        window_cost_micros=wasted,
        monthly_cost_micros=monthly(wasted, window_seconds),
        action=action,
        detail=(
            f"{exposure.requests} speculative requests ({exposure.seconds:.0f} s) ran at "
            f"concurrency above the fitted breakeven of "
            f"{curve.breakeven_concurrency:.1f} (mean {exposure.mean_concurrency:.1f}, "
            f"modelled speedup {speedup:.2f}); they cost "
            f"{exposure.cost_micros / 1e6:.2f} in the window"
        ),
        metrics={
            "breakeven_concurrency": round(curve.breakeven_concurrency, 3),
            "requests": exposure.requests,
            "seconds": round(exposure.seconds, 3),
            "mean_concurrency": round(exposure.mean_concurrency, 3),
            "modelled_speedup": round(speedup, 4),
            "cost_above_breakeven": format_micros(exposure.cost_micros),
            "sweep_id": curve.sweep_id,
        },
    )


def unused_capacity_cost(cost_micros: int, *, used_ns: int, capacity_ns: int) -> int:
    """The part of a compute pool's cost that paid for unused GPU time: the cost times the
    unused share of its capacity (half up to the micro); 0 without capacity. This is what
    the pool's idle line would hold had idle not been shared to its requests."""
    if capacity_ns <= 0 or used_ns >= capacity_ns or cost_micros <= 0:
        return 0
    unused = capacity_ns - max(used_ns, 0)
    return (2 * cost_micros * unused + capacity_ns) // (2 * capacity_ns)


def idle_findings(
    exposures: Sequence[IdleExposure], thresholds: Thresholds, *, window_seconds: float
) -> list[Finding]:
    """Deployments whose idle share of GPU cost is above the threshold."""
    findings: list[Finding] = []
    for item in exposures:
        if item.gpu_micros <= 0:
            continue
        share = item.idle_micros / item.gpu_micros
        if share <= thresholds.idle_share:
            continue
        action = (
            f"consolidate replicas: {item.replicas} replicas were idle {share:.0%} of the time"
            if item.replicas > 1
            else "scale the deployment down when it is idle, or move this traffic onto a "
            "shared deployment"
        )
        findings.append(
            Finding(
                kind=FindingKind.idle_gpu,
                scope=Scope.deployment,
                key=item.deployment,
                window_cost_micros=item.idle_micros,
                monthly_cost_micros=monthly(item.idle_micros, window_seconds),
                action=action,
                detail=(
                    f"{share:.1%} of the deployment's GPU cost was idle (threshold "
                    f"{thresholds.idle_share:.0%})"
                ),
                metrics={"idle_share": round(share, 4), "replicas": item.replicas},
            )
        )
    return findings
