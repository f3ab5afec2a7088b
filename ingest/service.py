"""Billing ingest, end to end: discover, read, normalise all files, then load per period.

Every file is read and validated before anything is written, so bad input writes nothing;
each billing period is then loaded in its own transaction.
"""

import hashlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Engine

from ingest.errors import IngestError, Problem
from ingest.load import LoadAction, PeriodDelivery, load_period
from ingest.normalize import NormalisedFile, NormaliseOptions, normalise_file
from ingest.readers import read_billing_file
from ingest.report import NO_CURRENCY, CostTotals, FileReport, IngestReport, PeriodReport
from ingest.sources.base import SourceBatch, SourceFile
from ingest.sources.files import discover_files
from ingest.sources.s3 import discover_s3

ProgressHook = Callable[[str, int, int], None]
"""Called as (description, steps done, steps in all)."""


@dataclass(frozen=True, slots=True)
class IngestOptions:
    normalise: NormaliseOptions = field(default_factory=NormaliseOptions)
    source: str | None = None
    force: bool = False
    """Replace a stored delivery even when the incoming one is older."""
    s3_endpoint_url: str | None = None


def ingest_billing(engine: Engine, location: str, options: IngestOptions,
                   progress: ProgressHook | None = None) -> IngestReport:
    """Ingest billing from a file, a folder or an ``s3://bucket/prefix``.

    Raises:
        IngestError: If any input cannot be used; then nothing was written.
    """
    with tempfile.TemporaryDirectory(prefix="specledger-s3-") as download_dir:
        if location.startswith("s3://"):
            batches = discover_s3(location, Path(download_dir),
                                  endpoint_url=options.s3_endpoint_url, source=options.source)
        else:
            batches = [discover_files(Path(location), source=options.source)]
        report = IngestReport()
        deliveries = _read_all(batches, options.normalise, report, progress)
    now = datetime.now(UTC)
    for index, delivery in enumerate(deliveries):
        if progress:
            progress(f"loading {delivery.billing_period_start:%Y-%m}", index, len(deliveries))
        with engine.begin() as conn:
            action = load_period(conn, delivery, now=now, force=options.force)
        report.periods.append(_period_report(delivery, action))
    if progress:
        progress("done", len(deliveries), len(deliveries))
    return report


def _read_all(batches: list[SourceBatch], options: NormaliseOptions, report: IngestReport,
              progress: ProgressHook | None) -> list[PeriodDelivery]:
    total = sum(len(b.files) for b in batches)
    problems: list[Problem] = []
    deliveries: list[PeriodDelivery] = []
    done = 0
    for batch in batches:
        normalised: list[tuple[SourceFile, NormalisedFile]] = []
        for file in batch.files:
            if progress:
                progress(f"reading {Path(file.name).name}", done, total)
            done += 1
            try:
                result = normalise_file(read_billing_file(file.path, display_name=file.name),
                                        options)
            except IngestError as exc:
                problems += exc.problems
                continue
            normalised.append((file, result))
            report.files.append(FileReport(file.name, result.focus_version,
                                           result.table.num_rows + len(
                                               {p.row for p in result.rejected}),
                                           result.table.num_rows))
            report.repairs.update(result.repairs)
            report.rejects += result.rejected
            report.warnings += result.warnings
        if not problems:
            deliveries += _split_by_period(batch, normalised, options)
    if problems:
        raise IngestError(problems)
    return deliveries


def _split_by_period(batch: SourceBatch, normalised: list[tuple[SourceFile, NormalisedFile]],
                     options: NormaliseOptions) -> list[PeriodDelivery]:
    tables, contributors = [], []
    for file, result in normalised:
        table = result.table.append_column(
            "source_file", pa.array([file.name] * result.table.num_rows, pa.string()))
        tables.append(table)
        contributors.append((file, result.focus_version))
    if not tables:
        return []
    rows = pa.concat_tables(tables)
    deliveries = []
    for start in pc.unique(rows["billing_period_start"]).to_pylist():
        period_rows = rows.filter(pc.equal(rows["billing_period_start"], start))
        names = set(pc.unique(period_rows["source_file"]).to_pylist())
        files = [(f, v) for f, v in contributors if f.name in names]
        ends = pc.drop_null(period_rows["billing_period_end"])
        end = pc.max(ends).as_py() if len(ends) else start
        deliveries.append(PeriodDelivery(
            source=batch.source,
            billing_period_start=start,
            billing_period_end=end,
            fingerprint=_fingerprint(batch.source, start, [f for f, _ in files], options),
            files=tuple(f.name for f, _ in files),
            focus_version=max(v for _, v in files),
            delivered_at=batch.delivered_at or max(f.modified_at for f, _ in files),
            rows=period_rows,
        ))
    return sorted(deliveries, key=lambda d: d.billing_period_start)


def _fingerprint(source: str, start: datetime, files: list[SourceFile],
                 options: NormaliseOptions) -> str:
    digest = hashlib.sha256(f"{source}|{start.isoformat()}|{options}".encode())
    for sha in sorted(f.sha256 for f in files):
        digest.update(sha.encode())
    return digest.hexdigest()


def _period_report(delivery: PeriodDelivery, action: LoadAction) -> PeriodReport:
    rows = delivery.rows
    providers = rows.group_by("provider_name").aggregate([("source_row", "count")])
    by_provider = {
        (name if name is not None else "(none)"): count
        for name, count in zip(providers["provider_name"].to_pylist(),
                               providers["source_row_count"].to_pylist(), strict=True)
    }
    sums = rows.group_by("billing_currency").aggregate(
        [("billed_cost_micros", "sum"), ("effective_cost_micros", "sum")])
    totals = {
        (currency or NO_CURRENCY): CostTotals(int(billed or 0), int(effective or 0))
        for currency, billed, effective in zip(
            sums["billing_currency"].to_pylist(), sums["billed_cost_micros_sum"].to_pylist(),
            sums["effective_cost_micros_sum"].to_pylist(), strict=True)
    }
    return PeriodReport(delivery.source, delivery.billing_period_start,
                        delivery.billing_period_end, rows.num_rows, str(action), by_provider,
                        totals)
