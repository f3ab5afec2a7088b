"""Wire schemas of the allocation API."""

from datetime import datetime
from typing import Self

from pydantic import AwareDatetime, Field, model_validator

from app.allocation.query import AllocationLine, CostMetric, IdlePolicy
from app.domain import measures
from app.domain.windows import Step
from app.kit.schemas import (
    FIRST_MONTH,
    LAST_MONTH,
    Amount,
    PageMeta,
    Schema,
    WindowRead,
    in_calendar,
    money,
)


class AllocationItem(Schema):
    start: datetime
    end: datetime
    properties: dict[str, str]
    """The line's value on each aggregate dimension; ``(idle)``, ``(shared)``,
    ``(unallocated)``, ``(adjustment)``, ``(none)`` or ``(untagged)`` where it has none."""
    currency: str
    cost: Amount
    """Cost in the chosen cost metric."""
    idle_cost: Amount
    """Idle cost inside ``cost`` (shared in with idle=share; all of it on an idle line)."""
    gpu_seconds: float

    @classmethod
    def of(cls, line: AllocationLine) -> Self:
        return cls(
            start=line.start,
            end=line.end,
            properties=line.properties,
            currency=line.currency,
            cost=money(line.cost_micros),
            idle_cost=money(line.idle_micros),
            gpu_seconds=measures.seconds(line.gpu_ns),
        )


class AllocationPage(PageMeta):
    window: WindowRead
    aggregate: list[str]
    step: Step | None
    cost_metric: CostMetric
    idle: IdlePolicy
    totals: dict[str, Amount]
    """Cost per currency over every item (all pages)."""
    items: list[AllocationItem]


class AllocationRunCreate(Schema):
    month: str | None = Field(None, pattern=r"^\d{4}-(0[1-9]|1[0-2])$", examples=["2026-11"])
    """A calendar month (follows the invoice: rows by BillingPeriodStart); closable."""
    start: AwareDatetime | None = None
    """Start of an ad-hoc window instead of a month."""
    end: AwareDatetime | None = None
    share_idle: bool = False
    """Share idle GPU cost back to requests instead of keeping an idle line."""

    @model_validator(mode="after")
    def _month_or_window(self) -> Self:
        if self.month is not None and (self.start or self.end):
            raise ValueError("give month, or start and end, not both")
        if self.month is None and not (self.start and self.end):
            raise ValueError("give month, or start and end")
        if self.start and self.end and self.end <= self.start:
            raise ValueError("end must be after start (windows are half-open)")
        if self.start and self.end and not in_calendar(self.start, self.end):
            raise ValueError(f"start and end must lie within {FIRST_MONTH} to {LAST_MONTH}")
        return self


class AllocationRunRead(Schema):
    run_id: int
    month: str | None
    window: WindowRead
    share_idle: bool
    billing_rows: int
    entries: int
    replaced_run_id: int | None
    adjusted_months: list[str]
    effective_cost_by_kind: dict[str, dict[str, Amount]]
    """currency -> kind (request, idle, shared, unallocated, adjustment) -> cost."""
