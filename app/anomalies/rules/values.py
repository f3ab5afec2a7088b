"""The anomalies' vocabulary: a flagged bucket and its direction, the checked facts of one
bucket (cost, idle cost, tokens, GPU time, cost by categorical dimension), the factors of a
bucket's cost, one driver of a deviation, and :data:`NOT_COVERED`, the value that carries
what a categorical dimension does not cover. Money is integer micros.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from app.domain.errors import InvalidInput

NOT_COVERED = "(not covered)"
"""The value that carries the cost a categorical dimension does not cover."""


class Direction(StrEnum):
    spike = "spike"
    drop = "drop"


class Factor(StrEnum):
    """The multiplicative factors of a bucket's cost, in the order of the product."""

    volume = "volume"
    acceptance = "acceptance"
    gpu_time = "gpu_time"
    price = "price"
    idle_share = "idle_share"


@dataclass(frozen=True, slots=True, kw_only=True)
class Anomaly:
    """A bucket whose cost is far from what its history expects."""

    index: int
    """Position of the bucket in the series."""
    actual_micros: int
    expected_micros: int
    deviation_micros: int
    """``actual - expected``: positive for a spike, negative for a drop."""
    score: float
    """Log deviation over the noise of one bucket (a robust z-score)."""
    direction: Direction


@dataclass(frozen=True, slots=True, kw_only=True)
class BucketFacts:
    """What one deployment (or team) cost and served in one bucket.

    Build it from the ledger and the usage records of the bucket: ``cost_micros`` the
    allocated cost including the idle line, ``idle_cost_micros`` the idle line, the token
    and GPU-second sums of the bucket's requests, and for each categorical dimension the
    ledger cost grouped by its values (``{"team": {"search": 120_000_000, ...}}``).
    """

    cost_micros: int
    idle_cost_micros: int = 0
    by_dimension: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    output_tokens: int = 0
    request_gpu_seconds: float = 0.0
    idle_gpu_seconds: float = 0.0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    def __post_init__(self) -> None:
        for name in (
            "cost_micros",
            "idle_cost_micros",
            "output_tokens",
            "draft_tokens",
            "accepted_tokens",
        ):
            _non_negative_int(name, getattr(self, name))
        if self.idle_cost_micros > self.cost_micros:
            raise InvalidInput(
                f"idle cost ({self.idle_cost_micros}) exceeds the bucket's cost "
                f"({self.cost_micros}); cost_micros must include the idle line"
            )
        if self.accepted_tokens > self.draft_tokens:
            raise InvalidInput(
                f"accepted tokens ({self.accepted_tokens}) exceed drafted tokens "
                f"({self.draft_tokens})"
            )
        for name in ("request_gpu_seconds", "idle_gpu_seconds"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise InvalidInput(f"{name} must be finite and >= 0, got {value}")
        for dimension, values in self.by_dimension.items():
            if not dimension or dimension in Factor.__members__:
                raise InvalidInput(
                    f"dimension name {dimension!r} is empty or a factor's name "
                    f"({', '.join(Factor)})"
                )
            for value, micros in values.items():
                if value == NOT_COVERED:
                    raise InvalidInput(f"{NOT_COVERED!r} is reserved ({dimension})")
                if isinstance(micros, bool) or not isinstance(micros, int):
                    raise InvalidInput(
                        f"cost of {dimension}={value} must be integer micros, got {micros!r}"
                    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Driver:
    """One part of an anomaly's deviation, in money, with the measure that moved."""

    dimension: str
    """A :class:`Factor` or a categorical dimension (``team``, ``model``...)."""
    value: str | None
    """The categorical value, or None for a factor."""
    baseline: float | None
    """The measure in the baseline (the unit says which); None where it is undefined,
    e.g. the acceptance rate of a bucket that drafted nothing."""
    actual: float | None
    unit: str
    """``tokens``, ``rate`` (acceptance), ``gpu_s_per_token``, ``per_gpu_hour`` (micros per
    request GPU-hour), ``share`` (idle share of cost) or ``micros`` (a value's cost)."""
    effect_micros: int
    description: str


def _non_negative_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"{name} must be a non-negative integer, got {value!r}")


def verified_per_output_token(*, drafted: float, accepted: float, output: float) -> float:
    """GPU work per output token under speculation: ``1 + rejected drafts / output tokens``
    (with k drafted tokens per step and acceptance a, ``(k + 1) / (1 + k * a)``); 1 when
    nothing was output."""
    return 1 + (drafted - accepted) / output if output else 1.0
