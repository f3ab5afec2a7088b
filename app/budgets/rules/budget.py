"""Budgets: what a scope may spend in a period, and where its spend stands (pure).

Spend for a period is the ledger's allocated cost for the hours the ledger covers, plus, for
usage after that, the metered GPU-seconds priced at the deployment's latest unit cost
(:class:`UnitPrice`). Each allocation replaces the estimate for the hours it covers with the
ledger's figures (the true-up), so the two differ only for usage not yet allocated.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from app.domain.periods import Month


class ScopeKind(StrEnum):
    team = "team"
    cost_center = "cost_center"
    deployment = "deployment"
    tag = "tag"


class PeriodKind(StrEnum):
    month = "month"
    """Every calendar month (UTC); the budget renews each month."""
    custom = "custom"
    """One fixed period, ``[start, end)``."""


DEFAULT_THRESHOLDS = (50, 80, 100)


@dataclass(frozen=True, slots=True)
class BudgetScope:
    """Whose spend a budget limits: a team, a cost center, a deployment, or a tag ``k=v``."""

    kind: ScopeKind
    value: str

    @classmethod
    def parse(cls, text: str) -> "BudgetScope":
        """``team=search``, ``cost_center=cc-7``, ``deployment=smol`` or ``tag:app=rag``.

        Raises:
            ValueError: If the text names no known scope or an empty value.
        """
        head, sep, value = text.strip().partition("=")
        if head.startswith("tag:"):
            key = head.removeprefix("tag:").strip()
            if not key or not sep or not value.strip():
                raise ValueError(f"scope {text!r}: write a tag scope as tag:KEY=VALUE")
            return cls(ScopeKind.tag, f"{key}={value.strip()}")
        kinds = {k.value: k for k in ScopeKind if k is not ScopeKind.tag}
        kind = kinds.get(head.strip().replace("-", "_"))
        if kind is None or not sep or not value.strip():
            raise ValueError(
                f"scope {text!r}: write team=NAME, cost_center=NAME, deployment=NAME or "
                "tag:KEY=VALUE"
            )
        return cls(kind, value.strip())

    @property
    def tag(self) -> tuple[str, str]:
        key, _, value = self.value.partition("=")
        return key, value

    def matches(
        self,
        *,
        team: str | None,
        cost_center: str | None,
        deployment: str | None,
        tags: Mapping[str, str],
    ) -> bool:
        """Whether a request with these attributes is in the scope."""
        if self.kind is ScopeKind.team:
            return team == self.value
        if self.kind is ScopeKind.cost_center:
            return cost_center == self.value
        if self.kind is ScopeKind.deployment:
            return deployment == self.value
        key, value = self.tag
        return tags.get(key) == value

    def __str__(self) -> str:
        return f"tag:{self.value}" if self.kind is ScopeKind.tag else f"{self.kind}={self.value}"


def budget_period(
    kind: PeriodKind, start: datetime | None, end: datetime | None, now: datetime
) -> tuple[datetime, datetime]:
    """The period ``[start, end)`` a budget's spend counts in at ``now``: the calendar month
    of ``now`` for a monthly budget, the fixed period otherwise."""
    if kind is PeriodKind.month:
        month = Month.of(now)
        return month.start, month.end
    if start is None or end is None:
        raise ValueError("a custom budget period needs a start and an end")
    return start, end


def check_thresholds(thresholds: Sequence[int]) -> tuple[int, ...]:
    """Sorted, distinct percentages in 1..1000.

    Raises:
        ValueError: For a value out of range.
    """
    bad = [t for t in thresholds if not 1 <= t <= 1000]
    if bad:
        raise ValueError(f"threshold {bad[0]}% is not between 1 and 1000")
    return tuple(sorted(set(thresholds)))


@dataclass(frozen=True, slots=True)
class UnitPrice:
    """A deployment's latest unit cost: ``cost_micros`` over ``gpu_ns`` metered GPU time
    (from the ledger's most recent allocated day)."""

    cost_micros: int
    gpu_ns: int

    def cost_of(self, gpu_ns: int) -> int:
        """Micros for ``gpu_ns`` of metered GPU time, rounded half up, exactly."""
        if self.gpu_ns <= 0:
            return 0
        return (gpu_ns * self.cost_micros * 2 + self.gpu_ns) // (2 * self.gpu_ns)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """Where a budget stands: thresholds reached, hard limit reached."""

    amount_micros: int
    spent_micros: int
    hard_limit_micros: int | None
    reached: tuple[int, ...]
    """The thresholds (percent of the amount) that spend has reached."""

    @property
    def over_hard_limit(self) -> bool:
        return self.hard_limit_micros is not None and self.spent_micros >= self.hard_limit_micros

    @property
    def percent(self) -> float:
        return 100.0 * self.spent_micros / self.amount_micros


def evaluate(
    *,
    amount_micros: int,
    spent_micros: int,
    thresholds: Sequence[int],
    hard_limit_micros: int | None,
) -> BudgetState:
    """The thresholds ``spent_micros`` has reached (``spent * 100 >= amount * t``, exact)."""
    reached = tuple(t for t in sorted(thresholds) if spent_micros * 100 >= amount_micros * t)
    return BudgetState(amount_micros, spent_micros, hard_limit_micros, reached)
