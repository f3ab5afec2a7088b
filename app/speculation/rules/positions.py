"""Acceptance per draft position, from vLLM's per-request acceptance histograms, and which
positions pay for themselves: pure.

**What vLLM reports.** With ``--per-request-spec-decode-metrics summary`` each response (or
the final usage chunk of a stream) carries ``metrics.speculative_decoding.acceptance_histogram``:
a dense list of ``k + 1`` counts (``k`` = ``num_speculative_tokens``) whose entry ``j`` is the
number of the request's verification steps that accepted exactly ``j`` drafted tokens; the
bonus token the target adds every step is not counted, and steps that drafted nothing are left
out. So ``sum(h) = num_spec_steps`` and ``sum(j * h[j]) = num_accepted_draft_tokens``
(vLLM's docs/features/speculative_decoding/acceptance_metrics.md).

**Derivation.** A step checks its drafted tokens in order and stops at the first rejection,
so a step that accepted ``j`` tokens accepted positions ``1..j`` and no other. Position ``p``
(1-based) was therefore accepted in the tail sum::

    A[p] = h[p] + h[p + 1] + ... + h[k]        steps that accepted at least p tokens

which, for one request, is what vLLM's Prometheus counter
``vllm:spec_decode_num_accepted_tokens_per_pos{position="p-1"}`` adds. Position ``p`` was
drafted in ``D[p]`` steps: the histogram's length is the request's draft length, so each of
its ``sum(h)`` steps drafted ``k`` tokens and ``D[p] = sum(h)`` for ``p <= k``, 0 beyond. The
acceptance rate of position ``p`` is ``r[p] = A[p] / D[p]``: the chance that a token drafted
at ``p`` is kept, which is the chance that its step accepted at least ``p`` tokens.

``A`` and ``D`` add over requests (the counts of a sum of requests are the sums of their
counts), so a deployment's rates are ratios of sums; histograms of one length also add,
and the counts of the summed histogram are the summed counts. Histograms of different
lengths are not summed as histograms: padding a ``k = 2`` histogram to ``k = 4`` would count
its steps as drafting positions 3 and 4. For requests of one ``k``, ``r`` is non-increasing
in ``p`` (a tail sum over a constant); across different ``k`` it need not be.

Dynamic speculation (``num_speculative_tokens_per_batch_size``) can draft fewer than ``k``
tokens in a step; the summary histogram does not say in which steps, so ``D`` is then an upper
bound and ``r`` a lower bound. A record's ``draft_tokens < num_drafts * k`` shows it
(:attr:`PositionCounts.short_drafts`).

**Which positions pay.** Drafting only ``k' <= k`` tokens, the same steps would accept
``min(j, k')`` tokens (a position's fate does not depend on the positions after it), so the
tokens a step emits with ``k'`` drafts are, from the measured rates and with no assumption of
i.i.d. acceptance::

    E(k') = 1 + r[1] + ... + r[k']

Given the time of a step with ``k'`` drafted tokens, ``t(k')`` (``t(0)`` a plain step; from
the fitted breakeven model, :func:`modelled_step_s`: ``t(B, k'+1) + drafter overhead +
k' * c * t(B, 1)`` at the deployment's concurrency ``B``), output throughput is proportional
to ``E(k') / t(k')`` and the best ``k`` maximises it (the smaller ``k`` on a tie). Position
``p`` adds ``r[p]`` tokens per step (its marginal gain) and ``t(p) - t(p - 1)`` seconds; it
keeps the throughput when ``r[p] >= E(p - 1) * (t(p) - t(p - 1)) / t(p - 1)``, its marginal
cost in tokens per step. The positions that pay are ``1..best k``. For one ``k`` the gains
fall with ``p`` and every position after the first adds the same time (``t`` is affine in
``k' >= 1``), so ``E / t`` rises then falls there and the best ``k' >= 1`` is the largest
``p >= 2`` whose marginal gain exceeds its marginal cost (else 1). Position 1 also carries
the drafter's fixed overhead, so best ``k`` is that or 0, whichever gives more output:
position 1 may not pay alone and still pay together with the positions after it.

Without a fitted step-time model each position costs :data:`MARGINAL_ACCEPTANCE_FLOOR` tokens
per step, the rule the low-acceptance finding uses (``app.domain.findings``): best ``k``
maximises ``E(k') - floor * k'``, i.e. positions pay while they are accepted at least a
quarter of the time, now measured per position instead of inferred as ``alpha**p``.
"""

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.breakeven.rules.model import SpeculationModel, StepTimeModel, speculative_step_s
from app.domain.errors import InvalidInput
from app.domain.findings import (
    MARGINAL_ACCEPTANCE_FLOOR,
    Finding,
    FindingKind,
    Scope,
    monthly,
)
from app.domain.usage import HISTOGRAM_MAX

__all__ = [
    "MARGINAL_ACCEPTANCE_FLOOR",
    "MAX_HISTOGRAM",
    "MIN_STEPS",
    "CostBasis",
    "PositionAdvice",
    "PositionCounts",
    "advise",
    "modelled_step_s",
    "sum_histograms",
    "unpaid_positions_finding",
]

MAX_HISTOGRAM = HISTOGRAM_MAX
"""Longest histogram read: ``k + 1`` entries for k up to 64."""

MIN_STEPS = 200
"""Verification steps a deployment needs before a finding says its k is too long: below
that, a position's rate is too noisy to act on (a binomial standard error of up to 3.5
points, more when a request's steps are alike)."""


def _check_histogram(histogram: Sequence[int]) -> None:
    if not 0 < len(histogram) <= MAX_HISTOGRAM:
        raise InvalidInput(
            f"an acceptance histogram has 1 to {MAX_HISTOGRAM} entries, got {len(histogram)}"
        )
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in histogram):
        raise InvalidInput(f"acceptance histogram entries are counts >= 0, got {histogram!r}")


def sum_histograms(histograms: Iterable[Sequence[int]]) -> tuple[int, ...]:
    """Entry-wise sum of acceptance histograms (shorter ones padded with zeros): how many
    steps accepted exactly ``j`` tokens, over all of them. Keeps no draft lengths: sum
    histograms of one ``k``, or use :class:`PositionCounts` for several.

    Raises:
        InvalidInput: If a histogram is empty, too long or has a negative count.
    """
    total: list[int] = []
    for histogram in histograms:
        _check_histogram(histogram)
        total.extend([0] * (len(histogram) - len(total)))
        for j, n in enumerate(histogram):
            total[j] += n
    return tuple(total)


@dataclass(frozen=True, slots=True)
class PositionCounts:
    """Per draft position ``p = 1..k``: steps that drafted it and steps that accepted it.

    Trailing positions no step drafted are left out, so ``k`` is the longest draft seen.
    """

    steps: int = 0
    """Verification steps (each drafted at least one token, or none for a ``k = 0`` row)."""
    accepted: tuple[int, ...] = ()
    """``accepted[p - 1]``: steps that accepted at least ``p`` drafted tokens."""
    drafted: tuple[int, ...] = ()
    """``drafted[p - 1]``: steps that drafted at least ``p`` tokens."""

    def __post_init__(self) -> None:
        if len(self.accepted) != len(self.drafted):
            raise InvalidInput("accepted and drafted counts must cover the same positions")
        pairs = zip(self.accepted, self.drafted, strict=True)
        if any(not (0 <= a <= d <= self.steps and d > 0) for a, d in pairs):
            raise InvalidInput(
                "need 0 <= accepted <= drafted <= steps and drafted > 0 at every position"
            )

    @classmethod
    def of_histogram(cls, histogram: Sequence[int]) -> "PositionCounts":
        """The counts of one request's histogram (or of a sum of histograms of one ``k``).

        Raises:
            InvalidInput: If the histogram is empty, too long or has a negative count.
        """
        _check_histogram(histogram)
        steps = sum(histogram)
        if steps == 0:
            return cls()
        k = len(histogram) - 1
        accepted = [0] * k
        running = 0
        for p in range(k, 0, -1):
            running += histogram[p]
            accepted[p - 1] = running
        return cls(steps=steps, accepted=tuple(accepted), drafted=(steps,) * k)

    def __add__(self, other: "PositionCounts") -> "PositionCounts":
        k = max(self.k, other.k)
        return PositionCounts(
            steps=self.steps + other.steps,
            accepted=tuple(
                a + b
                for a, b in zip(_padded(self.accepted, k), _padded(other.accepted, k), strict=True)
            ),
            drafted=tuple(
                a + b
                for a, b in zip(_padded(self.drafted, k), _padded(other.drafted, k), strict=True)
            ),
        )

    @property
    def k(self) -> int:
        """The longest draft seen."""
        return len(self.drafted)

    @property
    def accepted_tokens(self) -> int:
        return sum(self.accepted)

    @property
    def draft_tokens(self) -> int:
        """Drafted tokens as the histograms imply them (every step drafting its ``k``)."""
        return sum(self.drafted)

    @property
    def rates(self) -> tuple[float, ...]:
        """``r[p]``: the share of drafts at position ``p`` that were accepted."""
        return tuple(a / d for a, d in zip(self.accepted, self.drafted, strict=True))

    @property
    def per_step(self) -> tuple[float, ...]:
        """Accepted tokens per step at each position (vLLM's per-position rate: accepted at
        ``p`` over all drafts); equals :attr:`rates` when every step drafted ``k``."""
        return tuple(a / self.steps for a in self.accepted) if self.steps else ()

    @property
    def mean_acceptance_length(self) -> float | None:
        """Tokens emitted per step, bonus token included; None without steps."""
        return 1 + self.accepted_tokens / self.steps if self.steps else None

    def short_drafts(self, draft_tokens: int) -> bool:
        """Whether the records' own ``draft_tokens`` fall short of every step drafting its
        ``k``: some steps drafted fewer (dynamic k), so :attr:`rates` are lower bounds."""
        return draft_tokens < self.draft_tokens


def _padded(values: tuple[int, ...], k: int) -> tuple[int, ...]:
    return values + (0,) * (k - len(values))


class CostBasis(StrEnum):
    """What a position's cost came from."""

    step_model = "step_model"
    """The deployment's fitted step-time model at its concurrency."""
    floor = "floor"
    """No fit: each position costs :data:`MARGINAL_ACCEPTANCE_FLOOR` tokens per step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PositionAdvice:
    """How many draft positions pay, and why."""

    k: int
    """Positions drafted now (the longest draft seen)."""
    best_k: int
    """The ``num_speculative_tokens`` with the most output per step time; 0: none pays."""
    basis: CostBasis
    gains: tuple[float, ...]
    """Per position: tokens per step it adds (its acceptance rate)."""
    costs: tuple[float, ...]
    """Per position: tokens per step it must add to pay for the time it adds."""
    tokens_per_step: tuple[float, ...]
    """``E(k')`` for ``k' = 0..k``, bonus token included."""
    relative_output: tuple[float, ...]
    """Per ``k' = 0..k``: output per unit of step time relative to plain decoding (the
    modelled speedup; with the floor, net tokens per step ``E(k') - floor * k'``)."""

    @property
    def paying(self) -> tuple[int, ...]:
        """The positions that pay: ``1..best_k``."""
        return tuple(range(1, self.best_k + 1))

    @property
    def unpaid(self) -> tuple[int, ...]:
        """Drafted positions that do not pay: ``best_k + 1..k``."""
        return tuple(range(self.best_k + 1, self.k + 1))

    def text(self) -> str:
        """The advice in one line, e.g. ``positions 1-2 pay; set num_speculative_tokens 2
        (now 4)``."""
        if self.k == 0:
            return "no drafted positions measured"
        if self.best_k == 0:
            return (
                f"no position pays; turn speculation off or change the drafter "
                f"(num_speculative_tokens now {self.k})"
            )
        paying = "position 1 pays" if self.best_k == 1 else f"positions 1-{self.best_k} pay"
        if self.best_k == self.k:
            return (
                f"{paying}; keep num_speculative_tokens {self.k} (longer drafts are not measured)"
            )
        return f"{paying}; set num_speculative_tokens {self.best_k} (now {self.k})"


def modelled_step_s(
    step: StepTimeModel,
    *,
    k: int,
    concurrency: float,
    drafter_overhead_s: float = 0.0,
    draft_cost_ratio: float = 0.0,
) -> tuple[float, ...]:
    """Step time with ``0..k`` drafted tokens at ``concurrency``, from the breakeven model
    (:func:`app.breakeven.rules.model.speculative_step_s`); index 0 is a plain step.

    Raises:
        InvalidInput: If ``k`` is negative or concurrency is not positive.
    """
    if k < 0 or not (math.isfinite(concurrency) and concurrency > 0):
        raise InvalidInput(f"need k >= 0 and concurrency > 0, got k={k}, {concurrency}")
    drafter = SpeculationModel(
        k=max(k, 1),
        mean_acceptance_length=1.0,  # not used for step time
        drafter_overhead_s=drafter_overhead_s,
        draft_cost_ratio=draft_cost_ratio,
    )
    return tuple(
        float(speculative_step_s(step, drafter, concurrency=concurrency, k=drafted))
        for drafted in range(k + 1)
    )


def advise(
    counts: PositionCounts,
    *,
    step_s: Sequence[float] | None = None,
    floor: float = MARGINAL_ACCEPTANCE_FLOOR,
) -> PositionAdvice:
    """Which positions pay (see the module's notes).

    Args:
        counts: The deployment's position counts.
        step_s: Step time with ``0..counts.k`` drafted tokens (:func:`modelled_step_s`);
            None uses the floor.
        floor: Tokens per step a position costs without a step-time model.

    Raises:
        InvalidInput: If ``step_s`` has the wrong length or a time that is not positive.
    """
    k = counts.k
    gains = counts.rates
    tokens = [1.0]
    for gain in gains:
        tokens.append(tokens[-1] + gain)
    if step_s is None:
        basis = CostBasis.floor
        costs = (floor,) * k
        output = [tokens[j] - floor * j for j in range(k + 1)]
    else:
        if len(step_s) != k + 1 or any(not (math.isfinite(t) and t > 0) for t in step_s):
            raise InvalidInput(f"need {k + 1} positive step times, got {list(step_s)!r}")
        basis = CostBasis.step_model
        costs = tuple(
            tokens[p - 1] * (step_s[p] - step_s[p - 1]) / step_s[p - 1] for p in range(1, k + 1)
        )
        output = [tokens[j] / step_s[j] * step_s[0] for j in range(k + 1)]
    best = max(range(k + 1), key=lambda j: (output[j], -j))
    return PositionAdvice(
        k=k,
        best_k=best,
        basis=basis,
        gains=gains,
        costs=costs,
        tokens_per_step=tuple(tokens),
        relative_output=tuple(output),
    )


def unpaid_positions_finding(
    deployment: str,
    *,
    counts: PositionCounts,
    advice: PositionAdvice,
    requests: int,
    min_requests: int,
    cost_micros: int,
    scheduled_tokens: int,
    window_seconds: float,
    concurrency: float | None = None,
) -> Finding | None:
    """A finding when a deployment drafts positions beyond the ones that pay, or None.

    Only for a deployment where some positions pay (when none does, speculation itself is
    the question: the low-acceptance and above-breakeven findings), with at least
    ``min_requests`` requests and :data:`MIN_STEPS` steps. The cost is the share of the
    requests' cost spent verifying the rejected drafts at the unpaid positions, as the
    meter charges them (GPU time split by scheduled tokens, rejected drafts included).

    Args:
        deployment: The deployment.
        counts: Its position counts in the window.
        advice: :func:`advise` on them.
        requests: Requests with a histogram.
        min_requests: Fewer requests are not judged.
        cost_micros: Effective cost of those requests.
        scheduled_tokens: Their prompt + completion + rejected draft tokens.
        window_seconds: The observed window, for the monthly estimate.
        concurrency: Their mean concurrency, for the message (step-model costs).
    """
    if (
        not advice.unpaid
        or advice.best_k == 0
        or requests < min_requests
        or counts.steps < MIN_STEPS
    ):
        return None
    rejected = sum(counts.drafted[p - 1] - counts.accepted[p - 1] for p in advice.unpaid)
    wasted = round(cost_micros * rejected / scheduled_tokens) if scheduled_tokens > 0 else 0
    first, last = advice.unpaid[0], advice.unpaid[-1]
    where = f"position {first}" if first == last else f"positions {first}-{last}"
    rates = ", ".join(f"{p}: {advice.gains[p - 1]:.0%}" for p in range(1, advice.k + 1))
    if advice.basis is CostBasis.step_model:
        why = (
            f"each needs {advice.costs[first - 1]:.2f}+ tokens per step to pay for its "
            f"verification and drafting time"
            + (f" at concurrency {concurrency:.1f}" if concurrency is not None else "")
        )
    else:
        why = f"each is accepted less than {MARGINAL_ACCEPTANCE_FLOOR:.0%} of the time"
    return Finding(
        kind=FindingKind.unpaid_draft_positions,
        scope=Scope.deployment,
        key=deployment,
        window_cost_micros=wasted,
        monthly_cost_micros=monthly(wasted, window_seconds),
        action=(
            f"lower num_speculative_tokens from {advice.k} to {advice.best_k}: {where} "
            f"{'costs more than it returns' if first == last else 'cost more than they return'}"
        ),
        detail=(
            f"acceptance per draft position over {counts.steps} steps of {requests} "
            f"requests ({rates}); {where} {'does' if first == last else 'do'} not pay: "
            f"{why}; {rejected} rejected draft "
            f"tokens there were verified for nothing"
        ),
        metrics={
            "k": advice.k,
            "suggested_k": advice.best_k,
            "steps": counts.steps,
            "requests": requests,
            "rejected_unpaid_tokens": rejected,
            "cost_basis": str(advice.basis),
        },
    )
