"""Budgets on the wire."""

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated

from pydantic import Field

from app.budgets.rules.budget import DEFAULT_THRESHOLDS, PeriodKind
from app.budgets.rules.steps import StepAction
from app.kit.schemas import NAME_MAX, STORABLE, Amount, Schema

PositiveAmount = Annotated[Decimal, Field(gt=0, max_digits=18, decimal_places=6)]
"""Money that fits a BIGINT in micros."""


class StepCreate(Schema):
    """A brownout step: from ``at_percent`` of the hard limit on, the proxy warns the scope's
    callers (``warn``) or sends its requests to ``route_to`` (``route``)."""

    at_percent: int = Field(ge=1, le=99)
    action: StepAction
    route_to: str | None = Field(None, min_length=1, max_length=128, pattern=STORABLE)
    """The cheaper deployment a ``route`` step sends requests to."""


class StepRead(StepCreate):
    taken_since: datetime | None
    """The start of the hour in which spend reached the step this period; null if not yet."""


class BudgetCreate(Schema):
    name: str = Field(min_length=1, max_length=NAME_MAX, pattern=STORABLE)
    scope: str = Field(
        min_length=3,
        max_length=300,
        pattern=STORABLE,
        examples=["team=search", "cost_center=cc-7", "deployment=smol", "tag:app=rag"],
    )
    amount: PositiveAmount
    currency: str | None = Field(None, min_length=3, max_length=8, pattern=r"^[A-Z]{3,8}$")
    """Default: the ledger's currency (SPECLEDGER_DEFAULT_CURRENCY)."""
    period: PeriodKind = PeriodKind.month
    start: datetime | None = None
    """A custom period's first instant (midnight UTC)."""
    end: datetime | None = None
    """A custom period's end (exclusive, midnight UTC)."""
    thresholds: list[Annotated[int, Field(ge=1, le=1000)]] = Field(
        default_factory=lambda: list(DEFAULT_THRESHOLDS), max_length=20
    )
    """Percentages of the amount that raise an alert."""
    hard_limit: PositiveAmount | None = None
    """Spend at which the proxy answers 429 to new requests in the scope."""
    steps: list[StepCreate] = Field(default_factory=list, max_length=10)
    """Brownout steps before the hard limit (they need one)."""


class DaySpendRead(Schema):
    day: date
    spent: Amount
    """Ledger plus metered estimate."""
    metered: Amount
    """The part not allocated by the ledger yet (GPU-seconds at the latest unit cost)."""


class ForecastDayRead(Schema):
    day: date
    expected: Amount
    lower: Amount
    upper: Amount


class ForecastRead(Schema):
    model: str
    level: float
    as_of: date
    expected_total: Amount
    lower_total: Amount
    upper_total: Amount
    crossing_day: date | None
    """The day cumulative spend is expected to reach the amount; null if not this period."""
    earliest_crossing_day: date | None
    days: list[ForecastDayRead]


class BudgetRead(Schema):
    id: int
    name: str
    scope: str
    period: PeriodKind
    period_start: datetime
    period_end: datetime
    amount: Amount
    currency: str
    thresholds: list[int]
    hard_limit: Amount | None
    spent: Amount
    ledger: Amount
    metered: Amount
    percent: float
    reached: list[int]
    over_hard_limit: bool
    steps: list[StepRead]
    """Its brownout steps, in the order they act, and when each was taken this period."""
    unpriced_deployments: list[str]
    """Deployments with usage but no unit cost yet (no allocation): not counted."""
    daily: list[DaySpendRead]
    """The period's days so far, for a burn-down line."""
    forecast: ForecastRead | None
