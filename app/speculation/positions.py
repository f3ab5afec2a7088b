"""Acceptance per draft position per deployment over a window, and the advice it gives.

The usage records' acceptance histograms (``usage_records.accepted_hist``, vLLM's
per-request ``acceptance_histogram``) are summed per deployment and draft length, and turned
into per-position counts and the positions that pay (:mod:`app.speculation.rules.positions`).
JSON arrays are read differently by SQLite, PostgreSQL and DuckDB, so the histograms are not
summed in SQL: the records are streamed in Arrow batches and summed with numpy, per
deployment and histogram length, so memory holds one batch and a few sums whatever the
window's size. Each part of the window is read where its ledger is kept (the database, or a
month's Parquet store: :func:`app.storage.entry_reader.window_readers`), as waste findings are.

A position's cost comes from the deployment's newest stored breakeven fit when the fit
measured the method the deployment runs (its step-time model and drafter cost at the
requests' mean concurrency), else from the floor of the low-acceptance rule.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import ColumnElement, func, select
from sqlalchemy.orm import Session

from app.breakeven.rules.model import StepTimeModel
from app.breakeven.service import BreakevenError, list_sweeps, read_stored_fit
from app.domain.findings import Finding, FindingInputs, FindingKind
from app.domain.windows import TimeWindow
from app.models import LedgerEntry, UsageRecord
from app.speculation.rules.positions import (
    MAX_HISTOGRAM,
    PositionAdvice,
    PositionCounts,
    advise,
    modelled_step_s,
    unpaid_positions_finding,
)
from app.storage.entry_reader import (
    EntryReader,
    LedgerReaders,
    WindowPart,
    places,
    window_readers,
)
from app.storage.run_repository import current_run_ids

__all__ = [
    "DeploymentPositions",
    "DrafterFit",
    "PositionsReport",
    "UnpaidPositionsSource",
    "deployment_fits",
    "positions_report",
    "read_positions",
    "unpaid_position_findings",
]

_BATCH_ROWS = 50_000
_WIDTH = MAX_HISTOGRAM + 1
_TYPES = {"deployment": pa.string(), "accepted_hist": pa.list_(pa.int64())}


@dataclass(frozen=True, slots=True, kw_only=True)
class DrafterFit:
    """What a deployment's stored breakeven fit says a drafted position costs."""

    sweep_id: int
    method: str
    step: StepTimeModel
    drafter_overhead_s: float = 0.0
    draft_cost_ratio: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DeploymentPositions:
    """A deployment's speculative requests with a histogram in the window."""

    deployment: str
    method: str
    """Speculation method; ``mixed`` when the requests used several."""
    requests: int
    concurrency_sum: int
    """Sum of the requests' concurrency (their mean is the load the advice prices)."""
    draft_tokens: int
    """Draft tokens the records report (below ``counts.draft_tokens``: short drafts)."""
    scheduled_tokens: int
    """Prompt + completion + rejected draft tokens: the meter's GPU-time basis."""
    counts: PositionCounts
    advice: PositionAdvice | None = None
    fit: DrafterFit | None = None
    """The fit that priced the positions; None: the floor did."""

    @property
    def mean_concurrency(self) -> float:
        return self.concurrency_sum / self.requests if self.requests else 0.0

    @property
    def short_drafts(self) -> bool:
        """Some steps drafted fewer than their ``k``: the rates are lower bounds."""
        return self.counts.short_drafts(self.draft_tokens)

    def __add__(self, other: "DeploymentPositions") -> "DeploymentPositions":
        return replace(
            self,
            method=self.method if self.method == other.method else "mixed",
            requests=self.requests + other.requests,
            concurrency_sum=self.concurrency_sum + other.concurrency_sum,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            scheduled_tokens=self.scheduled_tokens + other.scheduled_tokens,
            counts=self.counts + other.counts,
        )


@dataclass(frozen=True, slots=True)
class PositionsReport:
    window: TimeWindow
    team: str | None
    deployments: list[DeploymentPositions]
    """Advised, by deployment name."""


def _conditions(
    start: datetime, end: datetime, team: str | None, deployment: str | None
) -> list[ColumnElement[bool]]:
    conditions = [
        UsageRecord.arrived_at >= start,
        UsageRecord.arrived_at < end,
        UsageRecord.accepted_hist.is_not(None),
        UsageRecord.num_drafts > 0,
    ]
    if team is not None:
        conditions.append(UsageRecord.team == team)
    if deployment is not None:
        conditions.append(UsageRecord.deployment == deployment)
    return conditions


def read_positions(
    reader: EntryReader,
    *,
    start: datetime,
    end: datetime,
    team: str | None = None,
    deployment: str | None = None,
) -> dict[str, DeploymentPositions]:
    """Per deployment, the requests arriving in ``[start, end)`` that carry a histogram
    (of ``team`` and ``deployment`` when given), read from one place; not yet advised."""
    conditions = _conditions(start, end, team, deployment)
    rejected = UsageRecord.draft_tokens - UsageRecord.accepted_tokens
    totals = reader.rows(
        select(
            UsageRecord.deployment,
            func.count(),
            func.sum(UsageRecord.concurrency),
            func.sum(UsageRecord.draft_tokens),
            func.sum(UsageRecord.prompt_tokens + UsageRecord.completion_tokens + rejected),
            func.min(UsageRecord.spec_method),
            func.max(UsageRecord.spec_method),
        )
        .where(*conditions)
        .group_by(UsageRecord.deployment)
    )
    if not totals:
        return {}
    sums: dict[tuple[str, int], np.ndarray] = {}
    query = select(UsageRecord.deployment, UsageRecord.accepted_hist).where(*conditions)
    for batch in reader.batches(query, _BATCH_ROWS, _TYPES):
        _add_histograms(batch, sums)
    counts: dict[str, PositionCounts] = {}
    for (name, _), histogram in sorted(sums.items()):
        counts[name] = counts.get(name, PositionCounts()) + PositionCounts.of_histogram(
            [int(n) for n in histogram]
        )
    return {
        str(name): DeploymentPositions(
            deployment=str(name),
            method=str(low) if low == high else "mixed",
            requests=int(n),
            concurrency_sum=int(concurrency or 0),
            draft_tokens=int(drafted or 0),
            scheduled_tokens=int(scheduled or 0),
            counts=counts.get(str(name), PositionCounts()),
        )
        for name, n, concurrency, drafted, scheduled, low, high in totals
    }


def _add_histograms(batch: pa.Table, sums: dict[tuple[str, int], np.ndarray]) -> None:
    """Add a batch's histograms to ``sums``, keyed by deployment and histogram length
    (histograms of one length add entry by entry; of different lengths they must not)."""
    hists = batch.column("accepted_hist").combine_chunks()
    lengths = pc.list_value_length(hists)
    usable = pc.fill_null(
        pc.and_(pc.greater(lengths, 0), pc.less_equal(lengths, MAX_HISTOGRAM)), False
    )
    batch = batch.filter(usable)
    if batch.num_rows == 0:
        return
    hists = batch.column("accepted_hist").combine_chunks()
    sizes = pc.list_value_length(hists).to_numpy().astype(np.int64)
    values = pc.fill_null(pc.list_flatten(hists), 0).to_numpy().astype(np.int64)
    names = batch.column("deployment").combine_chunks().dictionary_encode()
    codes = names.indices.to_numpy().astype(np.int64)
    starts = np.cumsum(sizes) - sizes
    positions = np.arange(values.size, dtype=np.int64) - np.repeat(starts, sizes)
    keys = np.repeat(codes * _WIDTH + sizes, sizes) * _WIDTH + positions
    unique, inverse = np.unique(keys, return_inverse=True)
    totals = np.zeros(unique.size, dtype=np.int64)
    np.add.at(totals, inverse, values)
    labels = names.dictionary.to_pylist()
    for key, value in zip(unique.tolist(), totals.tolist(), strict=True):
        row, position = divmod(key, _WIDTH)
        code, size = divmod(row, _WIDTH)
        histogram = sums.setdefault((labels[code], size), np.zeros(size, dtype=np.int64))
        histogram[position] += value


def _merge(into: dict[str, DeploymentPositions], found: Mapping[str, DeploymentPositions]) -> None:
    for name, part in found.items():
        into[name] = into[name] + part if name in into else part


def deployment_fits(session: Session) -> dict[str, DrafterFit]:
    """Per deployment, the step-time model and drafter cost of its newest stored fit that
    has a step-time model (fits are stored by ``breakeven fit``; none is computed here)."""
    fits: dict[str, DrafterFit] = {}
    for summary in list_sweeps(session):  # newest first
        sweep = summary.sweep
        if sweep.deployment is None or sweep.deployment in fits or sweep.fit is None:
            continue
        try:
            fit = read_stored_fit(sweep.fit, f"sweep {sweep.id}")
        except BreakevenError:
            continue
        if fit.step_model is None:
            continue
        fits[sweep.deployment] = DrafterFit(
            sweep_id=sweep.id,
            method=fit.primary.method,
            step=fit.step_model.model(),
            drafter_overhead_s=fit.parameter(f"{fit.config}.drafter_overhead_s"),
            draft_cost_ratio=fit.parameter(f"{fit.config}.draft_cost_ratio"),
        )
    return fits


def advised(found: DeploymentPositions, fit: DrafterFit | None) -> DeploymentPositions:
    """The deployment with its advice: priced by ``fit`` when it measured the deployment's
    method and the requests have a concurrency, else by the floor."""
    counts = found.counts
    usable = fit is not None and fit.method == found.method and found.mean_concurrency > 0
    if fit is None or not usable:
        return replace(found, advice=advise(counts), fit=None)
    step_s = modelled_step_s(
        fit.step,
        k=counts.k,
        concurrency=found.mean_concurrency,
        drafter_overhead_s=fit.drafter_overhead_s,
        draft_cost_ratio=fit.draft_cost_ratio,
    )
    return replace(found, advice=advise(counts, step_s=step_s), fit=fit)


def gather(
    parts: Sequence[WindowPart], *, team: str | None, deployment: str | None = None
) -> dict[str, DeploymentPositions]:
    """Per deployment, its requests with a histogram, summed over the window's parts."""
    found: dict[str, DeploymentPositions] = {}
    for part in parts:
        _merge(
            found,
            read_positions(
                part.reader, start=part.start, end=part.end, team=team, deployment=deployment
            ),
        )
    return found


def positions_report(
    session: Session,
    *,
    window: TimeWindow,
    team: str | None = None,
    deployment: str | None = None,
    s3_endpoint_url: str | None = None,
) -> PositionsReport:
    """Acceptance per draft position per deployment over the window (the requests of
    ``team`` and ``deployment`` when given), each with the positions that pay."""
    with window_readers(
        session, window.start, window.end, s3_endpoint_url=s3_endpoint_url
    ) as parts:
        found = gather(parts, team=team, deployment=deployment)
    fits = deployment_fits(session) if found else {}
    return PositionsReport(
        window=window,
        team=team,
        deployments=[advised(found[name], fits.get(name)) for name in sorted(found)],
    )


class UnpaidPositionsSource:
    """The waste report's source of ``unpaid_draft_positions`` findings."""

    name = "unpaid draft positions"
    kinds = frozenset({FindingKind.unpaid_draft_positions})

    def find(self, inputs: FindingInputs, readers: LedgerReaders) -> list[Finding]:
        return unpaid_position_findings(
            readers.session,
            readers.parts,
            window=inputs.window,
            team=inputs.team,
            min_requests=inputs.thresholds.min_requests,
            window_seconds=inputs.observed_seconds,
        )


def unpaid_position_findings(
    session: Session,
    parts: Sequence[WindowPart],
    *,
    window: TimeWindow,
    team: str | None,
    min_requests: int,
    window_seconds: float,
) -> list[Finding]:
    """Waste findings for deployments drafting positions that do not pay
    (:func:`app.speculation.rules.positions.unpaid_positions_finding`), priced per place as
    the other waste findings are. A deployment also flagged for low acceptance should keep
    only that finding: its cost holds every rejected draft token, these included."""
    found = gather(parts, team=team)
    if not found:
        return []
    costs = dict.fromkeys(found, 0)
    conditions = _conditions(window.start, window.end, team, None)
    for reader in places(parts):
        for name, cost in reader.rows(
            select(UsageRecord.deployment, func.sum(LedgerEntry.effective_cost_micros))
            .join(LedgerEntry, LedgerEntry.event_id == UsageRecord.event_id)
            .where(*conditions, LedgerEntry.run_id.in_(current_run_ids()))
            .group_by(UsageRecord.deployment)
        ):
            if name in costs:
                costs[name] += int(cost or 0)
    fits = deployment_fits(session)
    findings: list[Finding] = []
    for name in sorted(found):
        usage = advised(found[name], fits.get(name))
        assert usage.advice is not None
        finding = unpaid_positions_finding(
            name,
            counts=usage.counts,
            advice=usage.advice,
            requests=usage.requests,
            min_requests=min_requests,
            cost_micros=costs[name],
            scheduled_tokens=usage.scheduled_tokens,
            window_seconds=window_seconds,
            concurrency=usage.mean_concurrency if usage.fit is not None else None,
        )
        if finding is not None:
            findings.append(finding)
    return findings
