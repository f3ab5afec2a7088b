"""Reconciliation: per month, the bill equals allocated + idle + unallocated, exactly (to
the pico: micros and residual, ``app.domain.money``)."""

from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.ledger import CostLabel, EntryKind
from app.domain.money import exact_picos, format_picos
from app.domain.periods import Month
from app.ledger.deliveries import DuplicatedCharges, duplicated_charges
from app.models import BillingDelivery, BillingRow, LedgerPoolRow, LedgerRollup
from app.storage.run_repository import current_run_id
from app.usage.unpriced import UnpricedUsage, unpriced_usage


class Status(StrEnum):
    """A reconciliation's verdict, in the order it is decided."""

    no_bill = "NO BILL"  # nothing to reconcile: the month's bill is not loaded
    duplicated = "DUPLICATED CHARGES"  # the same charges in two current deliveries
    not_balanced = "NOT BALANCED"
    balanced = "BALANCED"


KINDS = (EntryKind.request, EntryKind.shared, EntryKind.idle, EntryKind.unallocated)
"""What a month's own run books, in report order (adjustments are kept apart)."""


@dataclass
class Line:
    """Effective and billed cost of one bucket, exact, in picos."""

    effective: int = 0
    billed: int = 0

    def add(self, effective: int, billed: int) -> None:
        self.effective += effective
        self.billed += billed

    def to_json(self) -> dict[str, str]:
        return {"effective": format_picos(self.effective), "billed": format_picos(self.billed)}


@dataclass
class Reconciliation:
    month: Month
    run_id: int | None
    bill: dict[str, Line] = field(default_factory=dict)
    """currency -> the month's bill (current deliveries)."""
    ledger: dict[tuple[str, str | None, EntryKind], Line] = field(default_factory=dict)
    """(currency, deployment, kind) -> entries of the month's run (adjustments excluded)."""
    adjustments: dict[tuple[str, str], Line] = field(default_factory=dict)
    """(currency, corrected month) -> adjustments booked in this month."""
    pending_rows: int = 0
    """Billing rows of the month with no entries (billing changed since the run)."""
    unallocated_rows: list[dict[str, Any]] = field(default_factory=list)
    duplicates: list[DuplicatedCharges] = field(default_factory=list)
    """Pairs of current deliveries of the month that hold the same charges."""
    unpriced: list[UnpricedUsage] = field(default_factory=list)
    """Requests of the month of deployments nobody registered: no bill prices them."""

    def by_currency(self) -> dict[str, dict[EntryKind, Line]]:
        result: dict[str, dict[EntryKind, Line]] = defaultdict(lambda: {k: Line() for k in KINDS})
        for (currency, _, kind), line in self.ledger.items():
            result[currency][kind].add(line.effective, line.billed)
        return dict(result)

    @property
    def status(self) -> Status:
        if not self.bill:
            return Status.no_bill
        if self.duplicates:
            return Status.duplicated
        return Status.balanced if self._sums_balance() else Status.not_balanced

    @property
    def balanced(self) -> bool:
        """The bill is loaded once and equals the ledger exactly in every currency."""
        return self.status is Status.balanced

    def _sums_balance(self) -> bool:
        sums = self.by_currency()
        for currency in set(self.bill) | set(sums):
            bill = self.bill.get(currency, Line())
            kinds = sums.get(currency, {})
            if (
                sum(v.effective for v in kinds.values()) != bill.effective
                or sum(v.billed for v in kinds.values()) != bill.billed
            ):
                return False
        return self.pending_rows == 0

    def to_json(self) -> dict[str, Any]:
        sums = self.by_currency()
        deployments: dict[str, dict[str, dict[str, dict[str, str]]]] = defaultdict(dict)
        for (currency, deployment, kind), line in sorted(
            self.ledger.items(), key=lambda kv: tuple(str(x) for x in kv[0])
        ):
            deployments[currency].setdefault(deployment or CostLabel.none, {})[kind] = (
                line.to_json()
            )
        return {
            "month": str(self.month),
            "run_id": self.run_id,
            "balanced": self.balanced,
            "pending_rows": self.pending_rows,
            "currencies": {
                currency: {
                    "bill": self.bill.get(currency, Line()).to_json(),
                    **{k: v.to_json() for k, v in sums.get(currency, {}).items()},
                }
                for currency in sorted(set(self.bill) | set(sums))
            },
            "deployments": deployments,
            "adjustments": [
                {"currency": c, "corrects_month": m, **line.to_json()}
                for (c, m), line in sorted(self.adjustments.items())
            ],
            "unallocated_rows": self.unallocated_rows,
            "unpriced_usage": [usage.to_json() for usage in self.unpriced],
        }


_ROLLUP_SUMS = (
    func.sum(LedgerRollup.effective_cost_micros),
    func.sum(LedgerRollup.billed_cost_micros),
    func.sum(LedgerRollup.effective_cost_residual_picos),
    func.sum(LedgerRollup.billed_cost_residual_picos),
)


def _exact_line(amounts: list[Any]) -> Line:
    """A :class:`Line` from summed (effective micros, billed micros, effective residual,
    billed residual)."""
    eff, billed, eff_rest, billed_rest = (int(a or 0) for a in amounts)
    return Line(exact_picos(eff, eff_rest), exact_picos(billed, billed_rest))


def reconcile(session: Session, month: Month) -> Reconciliation:
    """Compare a month's bill with its ledger, per currency and deployment."""
    start = month.start
    run_id = current_run_id(session, month)
    result = Reconciliation(month, run_id)
    current_rows = (
        select(
            BillingRow.id,
            BillingRow.billing_currency,
            BillingRow.effective_cost_micros,
            BillingRow.billed_cost_micros,
            BillingRow.effective_cost_residual_picos,
            BillingRow.billed_cost_residual_picos,
        )
        .join(BillingDelivery, BillingDelivery.id == BillingRow.delivery_id)
        .where(BillingDelivery.superseded_at.is_(None), BillingRow.billing_period_start == start)
    ).subquery()
    for currency, *amounts in session.execute(
        select(
            current_rows.c.billing_currency,
            func.sum(func.coalesce(current_rows.c.effective_cost_micros, 0)),
            func.sum(func.coalesce(current_rows.c.billed_cost_micros, 0)),
            func.sum(current_rows.c.effective_cost_residual_picos),
            func.sum(current_rows.c.billed_cost_residual_picos),
        ).group_by(current_rows.c.billing_currency)
    ):
        result.bill[currency or ""] = _exact_line(amounts)
    result.duplicates = duplicated_charges(session.connection(), start)
    result.unpriced = unpriced_usage(session, start, month.end)
    if run_id is None:
        result.pending_rows = session.scalar(select(func.count()).select_from(current_rows)) or 0
        return result
    for currency, deployment, kind, *amounts in session.execute(
        select(
            LedgerRollup.currency,
            LedgerRollup.deployment,
            LedgerRollup.kind,
            *_ROLLUP_SUMS,
        )
        .where(LedgerRollup.run_id == run_id, LedgerRollup.kind != EntryKind.adjustment)
        .group_by(LedgerRollup.currency, LedgerRollup.deployment, LedgerRollup.kind)
    ):
        result.ledger[(currency, deployment, kind)] = _exact_line(amounts)
    for currency, corrects, *amounts in session.execute(
        select(LedgerRollup.currency, LedgerRollup.corrects_month, *_ROLLUP_SUMS)
        .where(LedgerRollup.run_id == run_id, LedgerRollup.kind == EntryKind.adjustment)
        .group_by(LedgerRollup.currency, LedgerRollup.corrects_month)
    ):
        result.adjustments[(currency, corrects or "")] = _exact_line(amounts)
    allocated_ids = (
        select(LedgerRollup.billing_row_id)
        .where(LedgerRollup.run_id == run_id, LedgerRollup.billing_row_id.is_not(None))
        .union(select(LedgerPoolRow.billing_row_id).where(LedgerPoolRow.run_id == run_id))
    )
    result.pending_rows = (
        session.scalar(
            select(func.count())
            .select_from(current_rows)
            .where(current_rows.c.id.not_in(allocated_ids))
        )
        or 0
    )
    result.unallocated_rows = [
        {
            "billing_row_id": r.id,
            "charge_period_start": f"{r.charge_period_start:%Y-%m-%dT%H:%M:%SZ}"
            if r.charge_period_start
            else None,
            "charge_category": r.charge_category,
            "service_name": r.service_name,
            "resource_id": r.resource_id,
            "tags": r.tags,
            "description": r.charge_description,
            "currency": r.billing_currency,
            "effective": format_picos(
                exact_picos(r.effective_cost_micros or 0, r.effective_cost_residual_picos)
            ),
            "billed": format_picos(
                exact_picos(r.billed_cost_micros or 0, r.billed_cost_residual_picos)
            ),
        }
        for r in session.execute(
            select(BillingRow)
            .where(
                BillingRow.id.in_(
                    select(LedgerRollup.billing_row_id).where(
                        LedgerRollup.run_id == run_id, LedgerRollup.kind == EntryKind.unallocated
                    )
                )
            )
            .order_by(BillingRow.id)
        ).scalars()
    ]
    return result


def reconciliation_text(result: Reconciliation) -> str:
    lines = [f"Reconciliation {result.month} (run {result.run_id or 'none'}): {result.status}"]
    if result.status is Status.no_bill:
        lines.append(
            f"  no billing is loaded for {result.month}: load it with "
            "`specledger ingest billing PATH`, then `specledger allocate "
            f"--month {result.month}`"
        )
    for duplicate in result.duplicates:
        lines.append(
            f"  delivery #{duplicate.delivery_id} ({duplicate.source}) holds "
            f"{duplicate.charges} charge(s) that delivery #{duplicate.other_id} "
            f"({duplicate.other_source}) holds too: remove one "
            f"(`specledger billing deliveries remove ID`) and allocate again"
        )
    for currency, kinds in sorted(result.by_currency().items()):
        bill = result.bill.get(currency, Line())
        allocated = kinds[EntryKind.request].effective + kinds[EntryKind.shared].effective
        lines.append(
            f"  {currency} bill {format_picos(bill.effective)} = allocated "
            f"{format_picos(allocated)} + idle {format_picos(kinds[EntryKind.idle].effective)}"
            f" + unallocated {format_picos(kinds[EntryKind.unallocated].effective)}  "
            f"(EffectiveCost; BilledCost bill {format_picos(bill.billed)})"
        )
    for (currency, deployment, kind), line in sorted(
        result.ledger.items(), key=lambda kv: tuple(str(x) for x in kv[0])
    ):
        lines.append(
            f"    {deployment or '(no deployment)':<24} {kind:<12} {currency} "
            f"{format_picos(line.effective)}"
        )
    for (currency, corrects), line in sorted(result.adjustments.items()):
        lines.append(
            f"  adjustments correcting {corrects}: {currency} {format_picos(line.effective)}"
        )
    if result.pending_rows:
        lines.append(
            f"  {result.pending_rows} billing row(s) have no entries: billing changed "
            f"since the run; run `specledger allocate --month {result.month}`"
        )
    for usage in result.unpriced:
        lines.append(
            f"  {usage.requests} request(s) of deployment {usage.deployment!r} "
            f"({usage.gpu_ns / 1e9:,.1f} GPU-s) are not priced: it is not registered; "
            f"register it (`specledger deployments add {usage.deployment}`) and allocate again"
        )
    if result.unallocated_rows:
        lines.append("  Unallocated rows (no deployment matched):")
        for row in result.unallocated_rows[:50]:
            lines.append(
                f"    #{row['billing_row_id']} {row['charge_category']} "
                f"{row['service_name']} {row['resource_id'] or ''} "
                f"{row['currency']} {row['effective']}  {row['description'] or ''}"
            )
    return "\n".join(lines)
