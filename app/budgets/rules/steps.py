"""Brownout steps: what the proxy does to a budget's scope as spend nears its hard limit,
before the limit refuses (pure).

Each step acts from a percentage of the hard limit on: ``warn`` marks the scope's responses
with a header, ``route`` sends its requests to a cheaper deployment. At 100% the hard limit
answers 429 as before. The step in force is the highest one spend has reached.
"""

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class StepAction(StrEnum):
    warn = "warn"
    """Mark each response with ``X-SpecLedger-Budget-Step``."""
    route = "route"
    """Send the scope's requests to the deployment the step names (and mark them)."""


@dataclass(frozen=True, slots=True)
class BudgetStep:
    """From ``at_percent`` of the hard limit on, ``action`` (to ``route_to`` for a route)."""

    at_percent: int
    action: StepAction
    route_to: str | None = None

    @classmethod
    def parse(cls, text: str) -> "BudgetStep":
        """``75:warn`` or ``90:route=DEPLOYMENT``.

        Raises:
            ValueError: For any other form, naming the one expected.
        """
        percent, sep, rest = text.strip().partition(":")
        action, _, target = rest.partition("=")
        if not sep or not percent.strip().isdigit():
            raise ValueError(f"step {text!r}: write PERCENT:warn or PERCENT:route=DEPLOYMENT")
        try:
            kind = StepAction(action.strip())
        except ValueError:
            raise ValueError(
                f"step {text!r}: the action is warn or route=DEPLOYMENT, not {action.strip()!r}"
            ) from None
        return cls(int(percent), kind, target.strip() or None)

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> "BudgetStep":
        route_to = value.get("route_to")
        return cls(
            int(str(value["at_percent"])),
            StepAction(str(value["action"])),
            None if route_to is None else str(route_to),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "at_percent": self.at_percent,
            "action": str(self.action),
            "route_to": self.route_to,
        }

    def reached(self, *, hard_limit_micros: int, spent_micros: int) -> bool:
        """Whether ``spent`` has reached the step (``spent * 100 >= limit * percent``)."""
        return spent_micros * 100 >= hard_limit_micros * self.at_percent

    def __str__(self) -> str:
        target = f"={self.route_to}" if self.route_to else ""
        return f"{self.at_percent}:{self.action}{target}"


def check_steps(
    steps: Iterable[BudgetStep], *, hard_limit_micros: int | None
) -> tuple[BudgetStep, ...]:
    """The steps in the order they act, checked.

    Raises:
        ValueError: For steps without a hard limit, a percentage outside 1..99, two steps at
            one percentage, a route without a deployment or a warning with one.
    """
    found = sorted(steps, key=lambda s: s.at_percent)
    if not found:
        return ()
    if hard_limit_micros is None:
        raise ValueError("steps act before a hard limit: give the budget a hard limit")
    for step in found:
        if not 1 <= step.at_percent <= 99:
            raise ValueError(
                f"step {step}: its percentage of the hard limit is between 1 and 99 (at 100 "
                "the hard limit refuses)"
            )
        if step.action is StepAction.route and not step.route_to:
            raise ValueError(f"step {step}: a route names the deployment (route=DEPLOYMENT)")
        if step.action is StepAction.warn and step.route_to:
            raise ValueError(
                f"step {step}: a warning routes nowhere (write {step.at_percent}:warn)"
            )
    percents = [s.at_percent for s in found]
    if len(set(percents)) != len(percents):
        raise ValueError("two steps at the same percentage: give each its own")
    return tuple(found)


def step_in_force(
    steps: Sequence[BudgetStep], *, hard_limit_micros: int, spent_micros: int
) -> BudgetStep | None:
    """The highest step that spend has reached; None below the first."""
    reached = [
        s
        for s in steps
        if s.reached(hard_limit_micros=hard_limit_micros, spent_micros=spent_micros)
    ]
    return max(reached, key=lambda s: s.at_percent, default=None)


def taken_since(
    steps: Sequence[BudgetStep], *, hard_limit_micros: int, hourly: Mapping[datetime, int]
) -> dict[BudgetStep, datetime]:
    """For each step spend has reached, the start of the hour in which it did (``hourly``:
    the period's spend by hour)."""
    taken: dict[BudgetStep, datetime] = {}
    total = 0
    for hour in sorted(hourly):
        total += hourly[hour]
        for step in steps:
            if step not in taken and step.reached(
                hard_limit_micros=hard_limit_micros, spent_micros=total
            ):
                taken[step] = hour
    return taken
