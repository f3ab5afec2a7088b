"""Closing the loop: does a speculation schedule beat both fixed choices?

A sweep may hold, beside the fixed configs, rows measured on an engine that speculates by
batch size (vLLM's ``num_speculative_tokens_per_batch_size``). At each concurrency level the
schedule should reach at least ``target`` of the better of "never speculate" (the baseline)
and "always speculate" (the fitted config). Repeated rows are compared by their medians, so
one noisy run does not decide it.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from app.breakeven.rules.sweep import SweepPoint

SCHEDULE_TARGET = 0.95
"""Share of the better fixed choice a schedule must reach at every level."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleLevel:
    """The schedule against both fixed choices at one concurrency level (medians)."""

    concurrency: int
    scheduled_tokens_per_s: float
    never_tokens_per_s: float
    always_tokens_per_s: float
    runs: int
    """Scheduled rows at this level (the median is over them)."""

    @property
    def best_fixed_tokens_per_s(self) -> float:
        return max(self.never_tokens_per_s, self.always_tokens_per_s)

    @property
    def ratio_to_best(self) -> float:
        """Scheduled throughput over the better fixed choice's."""
        return self.scheduled_tokens_per_s / self.best_fixed_tokens_per_s


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleCheck:
    """One scheduled config against the baseline and the always-speculating config."""

    config: str
    levels: tuple[ScheduleLevel, ...]
    target: float

    @property
    def worst_ratio(self) -> float:
        return min(level.ratio_to_best for level in self.levels)

    @property
    def meets_target(self) -> bool:
        return all(level.ratio_to_best >= self.target for level in self.levels)


def _medians(points: Sequence[SweepPoint]) -> dict[int, tuple[float, int]]:
    by_level: dict[int, list[float]] = {}
    for point in points:
        by_level.setdefault(point.concurrency, []).append(point.output_tokens_per_s)
    return {level: (median(rates), len(rates)) for level, rates in by_level.items()}


def check_schedules(
    scheduled: Sequence[SweepPoint],
    *,
    never: Sequence[SweepPoint],
    always: Sequence[SweepPoint],
    target: float = SCHEDULE_TARGET,
) -> tuple[ScheduleCheck, ...]:
    """Compare each scheduled config with both fixed choices at the levels all three share.

    Args:
        scheduled: Rows measured with a schedule (any number of configs).
        never: The baseline's rows (no speculation).
        always: The rows of the config that always speculates.
        target: Share of the better fixed choice to reach at every level.

    Returns:
        One check per scheduled config that shares a level with both fixed choices.
    """
    never_at, always_at = _medians(never), _medians(always)
    checks = []
    for config in dict.fromkeys(point.config for point in scheduled):
        mine = _medians([p for p in scheduled if p.config == config])
        levels = tuple(
            ScheduleLevel(
                concurrency=level,
                scheduled_tokens_per_s=mine[level][0],
                never_tokens_per_s=never_at[level][0],
                always_tokens_per_s=always_at[level][0],
                runs=mine[level][1],
            )
            for level in sorted(set(mine) & set(never_at) & set(always_at))
        )
        if levels:
            checks.append(ScheduleCheck(config=config, levels=levels, target=target))
    return tuple(checks)


def schedule_check_as_dict(check: ScheduleCheck) -> dict[str, object]:
    """JSON form, for ``breakeven fit --json`` and the API."""
    return {
        "config": check.config,
        "target": check.target,
        "meets_target": check.meets_target,
        "worst_ratio": round(check.worst_ratio, 4),
        "levels": [
            {
                "concurrency": level.concurrency,
                "scheduled_tokens_per_s": round(level.scheduled_tokens_per_s, 3),
                "never_tokens_per_s": round(level.never_tokens_per_s, 3),
                "always_tokens_per_s": round(level.always_tokens_per_s, 3),
                "ratio_to_best": round(level.ratio_to_best, 4),
                "runs": level.runs,
            }
            for level in check.levels
        ],
    }
