"""Waste findings: where speculative serving spends money for nothing, and what to do about it.

Six kinds of finding, each with the cost seen in the query window, an estimated monthly
cost (the window's rate over an average month) and a recommended action:

* ``low_acceptance``: drafted tokens are mostly rejected. A group is flagged only when even
  the upper bound of its acceptance rate's interval lies below the threshold, so a handful
  of unlucky requests is never flagged. The interval treats requests, not tokens, as the
  sampled units (:func:`acceptance_interval`). The cost is the share of the group's cost
  spent verifying rejected draft tokens, as the meter charges them (GPU time is split by
  scheduled tokens, rejected drafts included).
* ``above_breakeven``: requests ran with speculation at concurrencies above the fitted
  breakeven, where speculation is slower than plain decoding. The cost is what those
  requests cost times the modelled slowdown ``1 - speedup``.
* ``idle_gpu``: a deployment's idle share of its GPU cost is above a threshold.
* ``draft_memory``: the draft model's memory would serve more as KV cache than speculation
  gains, or the drafter is loaded and unused (judged in :mod:`app.engine_health.rules.engine_memory`).
* ``unpaid_draft_positions``: a deployment drafts positions beyond the ones that pay, by
  the measured acceptance of each position (judged in
  :mod:`app.speculation.rules.positions`).
* ``acceptance_drift``: a deployment's probe acceptance fell from its baseline (Page's
  CUSUM, :mod:`app.probe.rules.drift`); the cost is the deployment's spend since the change
  times the share of GPU work the lost acceptance added (found by :mod:`app.probe`).

Drafted tokens are not independent trials: a draft step stops at its first rejection, and
one request's steps share a prompt, a drafter state and a kind of text, so acceptance is
correlated within a request. A binomial interval over tokens (Wilson's) is then far too
narrow: on generated traffic whose true acceptance is 55% with requests that differ
(tests/waste/test_waste_rules.py), it flagged 16% of such deployments as below 50% at 95%,
against 0.8% for the interval used here. The interval used is cluster-robust instead: the
acceptance rate is a ratio of sums over requests, its variance is estimated from the
requests' residuals (the linearization, or delta-method, variance of a ratio estimator
used for cluster samples in survey statistics, with the n/(n-1) correction) and a Student t
quantile with n - 1 degrees of freedom; it is never narrower than the token-level Wilson
interval. Correlation between draft steps is inside a request, so it is covered too.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, TypeVar

from app.domain.errors import InvalidInput
from app.domain.windows import TimeWindow

SECONDS_PER_MONTH = 365.25 / 12 * 86_400
"""An average calendar month, for monthly estimates."""

MARGINAL_ACCEPTANCE_FLOOR = 0.25
"""A drafted position is worth keeping while its acceptance probability alpha**j is at least
this: below it, three verification slots in four at that position are wasted."""


class FindingKind(StrEnum):
    low_acceptance = "low_acceptance"
    above_breakeven = "above_breakeven"
    idle_gpu = "idle_gpu"
    acceptance_drift = "acceptance_drift"
    """A deployment's probe acceptance fell from its baseline (app.probe)."""
    unpaid_draft_positions = "unpaid_draft_positions"
    """Draft positions beyond the ones that pay (app.speculation.rules.positions)."""
    draft_memory = "draft_memory"
    """The drafter's memory would serve more as KV cache (app.engine_health.rules.engine_memory)."""


class Scope(StrEnum):
    deployment = "deployment"
    team = "team"
    session = "session"


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """When a finding is raised."""

    acceptance: float = 0.5
    """Flag acceptance rates confidently below this."""
    confidence: float = 0.95
    """Two-sided coverage of the acceptance rate's interval."""
    min_requests: int = 5
    """Groups with fewer speculative requests are not judged."""
    idle_share: float = 0.3
    """Flag deployments whose idle cost exceeds this share of their GPU cost."""

    def __post_init__(self) -> None:
        if not 0.0 < self.acceptance < 1.0:
            raise InvalidInput(f"acceptance threshold must lie in (0, 1), got {self.acceptance}")
        if not 0.5 <= self.confidence < 1.0:
            raise InvalidInput(f"confidence must lie in [0.5, 1), got {self.confidence}")
        if self.min_requests < 1:
            raise InvalidInput(f"min_requests must be >= 1, got {self.min_requests}")
        if not 0.0 < self.idle_share < 1.0:
            raise InvalidInput(f"idle share threshold must lie in (0, 1), got {self.idle_share}")


@dataclass(frozen=True, slots=True, kw_only=True)
class AcceptanceGroup:
    """Speculative requests of one deployment, team or session in the window."""

    scope: Scope
    key: str
    method: str
    """Speculation method; ``mixed`` when the group used several."""
    k: int | None
    """Drafted tokens per step; the largest seen when the group used several."""
    requests: int
    num_drafts: int
    draft_tokens: int
    accepted_tokens: int
    scheduled_tokens: int
    """Prompt + completion + rejected draft tokens: the meter's GPU-time basis."""
    cost_micros: int
    accepted_sq: int = 0
    """Sum over the requests of accepted tokens squared (with the next two, the spread
    between requests that :func:`acceptance_interval` needs)."""
    accepted_drafted: int = 0
    """Sum over the requests of accepted x drafted tokens."""
    drafted_sq: int = 0
    """Sum over the requests of drafted tokens squared."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    kind: FindingKind
    scope: Scope
    key: str
    window_cost_micros: int
    """What the waste cost in the query window."""
    monthly_cost_micros: int
    """The window's rate over an average month."""
    action: str
    detail: str
    metrics: Mapping[str, float | int | str | None] = field(default_factory=dict)


def monthly_total(findings: Sequence[Finding]) -> int:
    """Estimated monthly waste without double counting: the deployment-level findings.

    Team and session findings break the same waste down by who caused it.
    """
    return sum(f.monthly_cost_micros for f in findings if f.scope is Scope.deployment)


def monthly(amount_micros: int, window_seconds: float) -> int:
    """An amount seen over ``window_seconds`` scaled to an average month, in micros."""
    if window_seconds <= 0:
        raise InvalidInput(f"window must be positive, got {window_seconds} s")
    return round(amount_micros * SECONDS_PER_MONTH / window_seconds)


@dataclass(frozen=True, slots=True, kw_only=True)
class FindingInputs:
    """What every finding source of a window is given: the window, whose view, the
    thresholds, and the measures that several sources share (gathered once)."""

    window: TimeWindow
    team: str | None
    """A team's view (its own requests only), or None for the admin view."""
    thresholds: Thresholds
    observed_seconds: float
    """The part of the window that has passed: the basis of the monthly estimates."""
    acceptance: Mapping[Scope, Mapping[str, AcceptanceGroup]]
    """Speculative requests per scope and key, priced."""
    idle: Mapping[str, tuple[int, int]]
    """Per deployment, (idle, idle + request) effective cost; empty in a team's view."""


Readers = TypeVar("Readers", contravariant=True)


class FindingSource(Protocol[Readers]):
    """A producer of waste findings, living in its feature and registered with the waste
    report (``SOURCES`` in :mod:`app.waste.sources`). ``Readers`` is where it reads the
    window (the waste report's: :class:`app.storage.entry_reader.LedgerReaders`)."""

    @property
    def name(self) -> str: ...

    @property
    def kinds(self) -> frozenset[FindingKind]:
        """The kinds of finding it produces (each kind has one source)."""
        ...

    def find(self, inputs: FindingInputs, readers: Readers) -> list[Finding]: ...
