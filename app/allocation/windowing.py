"""Allocating a window: read its inputs, run the allocation plan, return the entries."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from sqlalchemy.orm import Session

from app.allocation import repository
from app.allocation.engine import PlanEngine, PlanResult
from app.domain.periods import Month

ADHOC = "adhoc"
"""booked_month of entries from ad-hoc (non-month) windows: never closable."""


@dataclass(frozen=True, slots=True)
class Window:
    start: datetime
    end: datetime
    month: Month | None = None
    """Set for a calendar-month window, which follows the invoice (BillingPeriodStart)."""

    @classmethod
    def of_month(cls, month: Month) -> "Window":
        """The window of a calendar month: its bounds, booked as ``YYYY-MM``."""
        return cls(month.start, month.end, month)

    @property
    def booked_month(self) -> str:
        """The ledger's label for the window's entries: ``YYYY-MM``, or ``adhoc``."""
        return str(self.month) if self.month else ADHOC


@dataclass(frozen=True, slots=True)
class Computed:
    result: PlanResult
    rows: int
    """Billing rows in the window."""


def _input_scope(window: Window, tag_key: str) -> dict[str, Any]:
    """Which billing rows and registry a window's plan reads."""
    return {
        "start": window.start,
        "end": window.end,
        "by_billing_period": window.month is not None,
        "booked_month": window.booked_month,
        "tag_key": tag_key,
    }


def small_inputs(session: Session, window: Window, tag_key: str) -> dict[str, pa.Table]:
    """The window's billing rows and the registry: the plan's inputs but the usage."""
    return repository.plan_inputs_without_usage(session, **_input_scope(window, tag_key))


def compute_window(
    session: Session,
    window: Window,
    *,
    share_idle: bool,
    tag_key: str,
    engine: PlanEngine | None = None,
) -> Computed:
    """Allocate a window (nothing written)."""
    inputs = repository.plan_inputs(session, **_input_scope(window, tag_key))
    result = (engine or PlanEngine()).allocate(inputs, share_idle=share_idle)
    return Computed(result, inputs["rows"].num_rows)
