"""Allocating a window in memory: load its billing, match rows to deployments, split."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
from sqlalchemy.orm import Session

from app.allocation import repository
from app.allocation.compute import BillingRows, allocate
from app.allocation.repository import Registry, RowRecord, UsageTable
from app.domain.periods import Month


@dataclass(frozen=True, slots=True)
class Window:
    start: datetime
    end: datetime
    month: str | None = None
    """Set for a calendar-month window, which follows the invoice (BillingPeriodStart)."""

    @classmethod
    def of_month(cls, month: Month) -> "Window":
        """The window of a calendar month: its bounds, booked as ``YYYY-MM``."""
        return cls(month.start, month.end, str(month))


@dataclass(frozen=True, slots=True)
class Computed:
    rows: list[RowRecord]
    matched: list[tuple[str | None, str | None]]
    usage: UsageTable
    arrays: dict[str, np.ndarray]


def compute_window(session: Session, window: Window, *, share_idle: bool, tag_key: str) -> Computed:
    """Allocate a window in memory (nothing written)."""
    rows, registry = _load(session, window)
    matched = _match(rows, registry, tag_key)
    usage = _usage_for(session, rows, matched, registry)
    arrays = allocate(
        _billing_rows(rows, matched), usage.usage, registry.policies, share_idle=share_idle
    )
    return Computed(rows, matched, usage, arrays)


def _load(session: Session, window: Window) -> tuple[list[RowRecord], Registry]:
    rows = repository.billing_rows(
        session, start=window.start, end=window.end, by_billing_period=window.month is not None
    )
    return rows, repository.registry(session)


def _match(
    rows: Sequence[RowRecord], registry: Registry, tag_key: str
) -> list[tuple[str | None, str | None]]:
    """Each row's (deployment, replica): a registered ResourceId wins over the tag."""
    matched: list[tuple[str | None, str | None]] = []
    for row in rows:
        if row.resource_id and row.resource_id in registry.by_resource_id:
            matched.append(registry.by_resource_id[row.resource_id])
            continue
        value = (row.tags or {}).get(tag_key)
        matched.append((registry.by_tag_value.get(str(value)) if value is not None else None, None))
    return matched


def _usage_for(
    session: Session,
    rows: Sequence[RowRecord],
    matched: Sequence[tuple[str | None, str | None]],
    registry: Registry,
) -> UsageTable:
    names = sorted({d for d, _ in matched if d})
    if not names:
        return repository.usage_between(session, [], datetime.now(UTC), datetime.now(UTC))
    starts = [r.charge_period_start for r, (d, _) in zip(rows, matched, strict=True) if d]
    ends = [r.charge_period_end for r, (d, _) in zip(rows, matched, strict=True) if d]
    return repository.usage_between(session, names, min(starts), max(ends))


def _billing_rows(
    rows: Sequence[RowRecord], matched: Sequence[tuple[str | None, str | None]]
) -> BillingRows:
    return BillingRows(
        row_id=np.array([r.id for r in rows], np.int64),
        start_ns=repository.to_ns([r.charge_period_start for r in rows]),
        end_ns=repository.to_ns([r.charge_period_end for r in rows]),
        effective_micros=np.array([r.effective_cost_micros for r in rows], np.int64),
        billed_micros=np.array([r.billed_cost_micros for r in rows], np.int64),
        deployment=[d for d, _ in matched],
        replica=[p for _, p in matched],
        is_compute=np.array(
            [
                r.service_category == "Compute" or p is not None
                for r, (_, p) in zip(rows, matched, strict=True)
            ],
            bool,
        ),
    )
