"""Waste findings over a window: every registered source (:data:`app.waste.sources.SOURCES`)
reads the window where its ledger is kept (the database, or a month's Parquet store) and
judges what it finds with its feature's rules.

A team's view is built from its own requests only (its deployments, its team, its sessions;
speculation above breakeven in its traffic). Idle GPU time belongs to no team, so idle
findings are for admin views only.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.findings import (
    Finding,
    FindingInputs,
    FindingKind,
    FindingSource,
    Scope,
    Thresholds,
)
from app.domain.windows import TimeWindow
from app.models import LedgerRollup
from app.storage.entry_reader import LedgerReaders, window_readers
from app.storage.run_repository import current_run_ids
from app.waste.exposures import acceptance_groups, idle_by_deployment
from app.waste.sources import SOURCES


@dataclass(slots=True)
class WasteReport:
    window: TimeWindow
    observed_seconds: float
    """The part of the window that has passed: the basis of the monthly estimates."""
    currency: str
    findings: list[Finding]


def find_waste(
    session: Session,
    *,
    window: TimeWindow,
    team: str | None,
    thresholds: Thresholds,
    now: datetime,
    default_currency: str,
    s3_endpoint_url: str | None = None,
    sources: Sequence[FindingSource[LedgerReaders]] = SOURCES,
) -> WasteReport:
    """Every finding of ``sources`` in the window, largest estimated monthly cost first.
    Each part of the window is read where its ledger is kept (the database or a month's
    Parquet store) and the exposures are summed over the parts before they are judged."""
    observed = (min(window.end, max(now, window.start)) - window.start).total_seconds()
    observed = observed if observed > 0 else window.seconds
    with window_readers(
        session, window.start, window.end, s3_endpoint_url=s3_endpoint_url
    ) as parts:
        inputs = FindingInputs(
            window=window,
            team=team,
            thresholds=thresholds,
            observed_seconds=observed,
            acceptance=acceptance_groups(parts, window, team),
            idle=idle_by_deployment(session, parts) if team is None else {},
        )
        readers = LedgerReaders(session, parts)
        findings = [found for source in sources for found in source.find(inputs, readers)]
        currency = next(
            (found for p in parts if (found := _currency(session, p.start, p.end))), None
        )
    findings = _without_double_counting(findings)
    findings.sort(key=lambda f: (-f.monthly_cost_micros, f.kind, f.scope, f.key))
    return WasteReport(window, observed, currency or default_currency, findings)


def _without_double_counting(findings: list[Finding]) -> list[Finding]:
    """A deployment flagged for low acceptance keeps that finding alone: its cost already
    holds every rejected draft token, those at unpaid positions included."""
    flagged = {
        f.key
        for f in findings
        if f.kind is FindingKind.low_acceptance and f.scope is Scope.deployment
    }
    return [
        f
        for f in findings
        if not (f.kind is FindingKind.unpaid_draft_positions and f.key in flagged)
    ]


def _currency(session: Session, start: datetime, end: datetime) -> str | None:
    """A currency of the ledger of record charged in ``[start, end)``: from the current
    runs' rollups (in the database wherever the entries are kept)."""
    return session.scalar(
        select(LedgerRollup.currency)
        .where(
            LedgerRollup.run_id.in_(current_run_ids()),
            LedgerRollup.charge_period_start >= start,
            LedgerRollup.charge_period_start < end,
        )
        .limit(1)
    )
