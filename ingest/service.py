"""Billing ingest, end to end: read every file and check its header, plan the billing periods,
then normalise the rows in chunks while the previous chunk is being written.

Everything is written in one transaction, rolled back when any input turns out to be bad, so
bad input writes nothing. Overlapping normalisation with the database's work keeps both of a
small machine's cores busy.
"""

import hashlib
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, Engine

from app.domain import focus
from app.domain.money import exact_picos, residual_column, split_picos
from app.ledger.deliveries import charge_keys_of, current_deliveries, shared_charges
from ingest.charge_identity import TYPED_IDENTITY, attribute_digests, charge_keys
from ingest.columns import normalise_column
from ingest.errors import IngestError, Problem
from ingest.load import (
    Decision,
    PeriodDelivery,
    close_delivery,
    decide,
    insert_rows,
    open_delivery,
    supersede,
)
from ingest.normalize import NormalisedFile, NormaliseOptions, normalise_file
from ingest.readers import RawFile, read_billing_file
from ingest.report import NO_CURRENCY, CostTotals, FileReport, IngestReport, PeriodReport
from ingest.sources.base import SourceBatch, SourceFile
from ingest.sources.files import discover_files, discover_local_export
from ingest.sources.s3 import discover_s3

ProgressHook = Callable[[str, int, int], None]
"""Called as (description, steps done, steps in all)."""

KEEP_READ_BYTES = 2 << 30
"""Files read to plan the billing periods stay in memory for the load up to this many bytes
(Arrow's size); beyond it, a file is dropped after planning and read again when its rows are
loaded, so a multi-gigabyte export is never in memory whole."""

IDENTITY_ATTRIBUTES = [*TYPED_IDENTITY, "focus_columns", "provider_columns"]
"""The attribute columns a charge key is computed from."""

CHUNK_ROWS = 250_000
"""Rows normalised (and then written) at a time; the first chunk of a file is a fifth of
that, so that the database starts writing sooner."""


@dataclass(frozen=True, slots=True)
class IngestOptions:
    normalise: NormaliseOptions = field(default_factory=NormaliseOptions)
    source: str | None = None
    force: bool = False
    """Replace a stored delivery even when the incoming one is older."""
    replace: bool = False
    """Replace the deliveries of other sources that already hold the incoming charges
    (by charge identity), instead of refusing the input."""
    s3_endpoint_url: str | None = None


@dataclass(slots=True)
class _ReadFile:
    batch: SourceBatch
    file: SourceFile
    focus_version: str
    rows: int
    period_starts: list[datetime]
    kept: RawFile | None
    """The file's rows, when they stayed in memory after planning."""

    def raw(self) -> RawFile:
        if self.kept is not None:
            return self.kept
        return read_billing_file(self.file.path, display_name=self.file.name)


@dataclass
class _Period:
    """One billing period of one source: what to do with it, and what its rows added up to."""

    delivery: PeriodDelivery
    decision: Decision
    delivery_id: int | None = None
    rows: int = 0
    end: datetime | None = None
    by_provider: Counter[str] = field(default_factory=Counter)
    totals: dict[str, CostTotals] = field(default_factory=dict)
    keys: list[np.ndarray] = field(default_factory=list)
    """The charge keys of the rows written, chunk by chunk."""
    accounts: set[str] = field(default_factory=set)

    def report(self) -> PeriodReport:
        return PeriodReport(
            self.delivery.source,
            self.delivery.billing_period_start,
            self.end or self.delivery.billing_period_start,
            self.rows,
            str(self.decision.action),
            dict(self.by_provider),
            self.totals,
        )


def ingest_billing(
    bind: Engine | Connection,
    location: str,
    options: IngestOptions,
    progress: ProgressHook | None = None,
) -> IngestReport:
    """Ingest billing from a file, a folder or an ``s3://bucket/prefix``.

    Args:
        bind: An engine (the ingest is its own transaction) or the caller's connection (the
            ingest is a savepoint in the caller's transaction, which the caller commits).
        location: The file, folder or S3 prefix.
        options: How to read and replace.
        progress: Called as files are read and rows written.

    Raises:
        IngestError: If any input cannot be used; then nothing was written.
    """
    report = IngestReport()
    # Downloads stay until the load is done: a file beyond KEEP_READ_BYTES is read twice.
    with tempfile.TemporaryDirectory(prefix="specledger-s3-") as download_dir:
        if location.startswith("s3://"):
            batches = discover_s3(
                location,
                Path(download_dir),
                endpoint_url=options.s3_endpoint_url,
                source=options.source,
            )
        else:
            batches = _local_batches(Path(location), options.source, report)
        files, problems = _read_files(batches, options.normalise, report, progress)
        now = datetime.now(UTC)
        with _transaction(bind) as conn:
            periods = {
                key: _Period(delivery, decide(conn, delivery, force=options.force))
                for key, delivery in _plan_periods(files, options.normalise).items()
            }
            problems += _load_rows(
                conn,
                files,
                periods,
                options.normalise,
                report,
                now=now,
                write=not problems,
                progress=progress,
            )
            if not problems:
                problems = _settle_duplicates(
                    conn, periods, report, replace=options.replace, now=now
                )
            if problems:
                raise IngestError(problems)  # rolls the transaction back
            for period in periods.values():
                if period.delivery_id is not None:
                    close_delivery(
                        conn,
                        period.delivery_id,
                        row_count=period.rows,
                        billing_period_end=period.end or period.delivery.billing_period_start,
                        billing_accounts=sorted(period.accounts),
                        totals={
                            currency: {
                                "billed_cost_micros": split_picos(t.billed_cost_picos)[0],
                                "effective_cost_micros": split_picos(t.effective_cost_picos)[0],
                                "billed_cost_picos": t.billed_cost_picos,
                                "effective_cost_picos": t.effective_cost_picos,
                            }
                            for currency, t in period.totals.items()
                        },
                    )
    report.periods = [p.report() for p in periods.values() if p.rows]
    if progress:
        progress("done", 1, 1)
    return report


def _local_batches(path: Path, source: str | None, report: IngestReport) -> list[SourceBatch]:
    """A file or folder; a copy of an AWS Data Export by its newest manifests."""
    export = discover_local_export(path, source=source)
    if export is None:
        return [discover_files(path, source=source)]
    if export.skipped:
        report.warnings.append(
            f"{path}: {len(export.skipped)} billing file(s) that no newest AWS Data Exports "
            f"manifest lists were skipped (older refreshes or strays), e.g. {export.skipped[0]}"
        )
    return export.batches


@contextmanager
def _transaction(bind: Engine | Connection) -> Iterator[Connection]:
    if isinstance(bind, Engine):
        with bind.begin() as conn:
            yield conn
    else:
        with bind.begin_nested():
            yield bind


def _read_files(
    batches: list[SourceBatch],
    options: NormaliseOptions,
    report: IngestReport,
    progress: ProgressHook | None,
) -> tuple[list[_ReadFile], list[Problem]]:
    """Read every file and check its header (normalising none of its rows yet)."""
    total = sum(len(b.files) for b in batches)
    files: list[_ReadFile] = []
    problems: list[Problem] = []
    kept_bytes = 0
    for batch in batches:
        for file in batch.files:
            if progress:
                progress(f"reading {Path(file.name).name}", len(files) + len(problems), total)
            try:
                raw = read_billing_file(file.path, display_name=file.name)
                header = normalise_file(_slice(raw, 0, 0), options)
            except IngestError as exc:
                problems += exc.problems
                continue
            kept_bytes += raw.table.nbytes
            files.append(
                _ReadFile(
                    batch,
                    file,
                    header.focus_version,
                    raw.table.num_rows,
                    _period_starts(raw),
                    raw if kept_bytes <= KEEP_READ_BYTES else None,
                )
            )
            report.repairs.update(header.repairs)
            report.warnings += header.warnings
    return files, problems


def _plan_periods(
    files: list[_ReadFile], options: NormaliseOptions
) -> dict[tuple[str, datetime], PeriodDelivery]:
    """Which billing periods each source delivers, from the distinct BillingPeriodStart
    values of its files; rows whose value is bad are reported later, with the rest."""
    contributors: dict[tuple[str, datetime], list[_ReadFile]] = {}
    for read in files:
        for start in read.period_starts:
            contributors.setdefault((read.batch.source, start), []).append(read)
    return {
        (source, start): PeriodDelivery(
            source=source,
            billing_period_start=start,
            fingerprint=_fingerprint(source, start, [r.file for r in reads], options),
            files=tuple(r.file.name for r in reads),
            focus_version=max(r.focus_version for r in reads),
            delivered_at=reads[0].batch.delivered_at or max(r.file.modified_at for r in reads),
            manifest=reads[0].batch.manifest,
        )
        for (source, start), reads in sorted(contributors.items(), key=lambda kv: kv[0][1])
    }


def _period_starts(raw: RawFile) -> list[datetime]:
    name = next((n for n in raw.table.column_names if n.lower() == "billingperiodstart"), None)
    if name is None:
        return []
    starts = normalise_column(
        focus.BY_NAME["BillingPeriodStart"], raw.table.column(name).combine_chunks()
    ).values
    return sorted(pc.unique(pc.drop_null(starts)).to_pylist())


def _load_rows(
    conn: Connection,
    files: list[_ReadFile],
    periods: dict[tuple[str, datetime], _Period],
    options: NormaliseOptions,
    report: IngestReport,
    *,
    now: datetime,
    write: bool,
    progress: ProgressHook | None,
) -> list[Problem]:
    """Normalise every file chunk by chunk (in a worker thread, one chunk ahead) and write
    the rows of the periods that change. After the first problem, only validate."""
    chunks = [(read, first, count) for read in files for first, count in _chunks(read.rows)]
    problems: list[Problem] = []
    current: list[tuple[_ReadFile, RawFile]] = []  # the worker's file: read once per file

    def normalise(chunk: tuple[_ReadFile, int, int]) -> NormalisedFile | IngestError:
        read, first, count = chunk
        try:
            if not current or current[0][0] is not read:
                current[:] = [(read, read.raw())]
            return normalise_file(
                _slice(current[0][1], first, count),
                options,
                first_row=first + 1,
                count_header=False,
            )
        except IngestError as exc:
            return exc

    rows_read: Counter[str] = Counter()
    rows_kept: Counter[str] = Counter()
    for index, ((read, _, count), result) in enumerate(_ahead(normalise, chunks)):
        if progress:
            progress(f"loading {Path(read.file.name).name}", index, len(chunks))
        rows_read[read.file.name] += count
        if isinstance(result, IngestError):
            problems += result.problems
            continue
        rows_kept[read.file.name] += result.values.num_rows
        report.repairs.update(result.repairs)
        report.rejects += result.rejected
        report.add_conformance(result.conformance)
        attributes = result.attributes.append_column(
            "source_file", pa.array([read.file.name] * result.attributes.num_rows, pa.string())
        )
        result.values = _with_charge_keys(result.values, attributes)
        for start, values in _split_by_period(result):
            period = periods[(read.batch.source, start)]
            _add_stats(period, values, attributes)
            if write and not problems and period.decision.action.writes:
                if period.delivery_id is None:
                    period.delivery_id = open_delivery(
                        conn, period.delivery, period.decision, now=now
                    )
                insert_rows(conn, period.delivery_id, values, attributes)
                period.keys.append(values["charge_key"].to_numpy())
    current.clear()
    report.files += [
        FileReport(r.file.name, r.focus_version, rows_read[r.file.name], rows_kept[r.file.name])
        for r in files
    ]
    return problems


def _with_charge_keys(values: pa.Table, attributes: pa.Table) -> pa.Table:
    """The chunk's values with each row's charge key (``ingest.charge_identity``)."""
    digests = attribute_digests(attributes.select(IDENTITY_ATTRIBUTES).to_pylist())
    keys = charge_keys(digests[values["attributes_index"].to_numpy()], values)
    return values.append_column("charge_key", pa.array(keys, pa.int64()))


def _settle_duplicates(
    conn: Connection,
    periods: dict[tuple[str, datetime], _Period],
    report: IngestReport,
    *,
    replace: bool,
    now: datetime,
) -> list[Problem]:
    """Refuse (or, with ``replace``, replace) the current deliveries of other sources that
    hold charges a delivery just written holds too."""
    written = {p.delivery_id for p in periods.values() if p.delivery_id is not None}
    problems: list[Problem] = []
    for period in periods.values():
        if period.delivery_id is None:
            continue
        keys = np.unique(np.concatenate(period.keys)) if period.keys else np.array([], np.int64)
        start = period.delivery.billing_period_start
        for other_id, other_source in current_deliveries(conn, start):
            if other_id == period.delivery_id:
                continue
            shared = shared_charges(keys, charge_keys_of(conn, other_id))
            if not shared:
                continue
            held = (
                f"{shared} of its {keys.size} charges for billing period {start:%Y-%m} are "
                f"already loaded as delivery #{other_id} (source {other_source})"
            )
            if replace and other_id not in written:
                supersede(conn, other_id, by=period.delivery_id, now=now)
                report.warnings.append(
                    f"{period.delivery.source}: {held}; --replace replaced that delivery"
                )
                continue
            fix = (
                "both are in this input (the same charges under two sources): load one"
                if other_id in written
                else f"to replace it, load again with --replace; or remove it first "
                f"(`specledger billing deliveries remove {other_id}`)"
            )
            problems.append(Problem(", ".join(period.delivery.files), f"{held}: {fix}"))
    return problems


def _chunks(rows: int) -> Iterator[tuple[int, int]]:
    """(first row, row count) of each chunk of a file of ``rows`` rows."""
    first, size = 0, max(CHUNK_ROWS // 5, 1)
    while first < rows:
        yield first, min(size, rows - first)
        first, size = first + size, CHUNK_ROWS


def _slice(raw: RawFile, first: int, count: int) -> RawFile:
    return RawFile(raw.name, raw.table.slice(first, count), raw.had_bom)


_T = TypeVar("_T")
_R = TypeVar("_R")


def _ahead(fn: Callable[[_T], _R], items: Iterable[_T]) -> Iterator[tuple[_T, _R]]:
    """``(item, fn(item))`` in order, computing the next result in a thread meanwhile."""
    with ThreadPoolExecutor(max_workers=1) as worker:
        pending: tuple[_T, Future[_R]] | None = None
        for item in items:
            submitted = (item, worker.submit(fn, item))
            if pending is not None:
                yield pending[0], pending[1].result()
            pending = submitted
        if pending is not None:
            yield pending[0], pending[1].result()


def _split_by_period(chunk: NormalisedFile) -> Iterator[tuple[datetime, pa.Table]]:
    """The chunk's values, by billing period."""
    starts = chunk.attributes["billing_period_start"].take(chunk.values["attributes_index"])
    distinct = pc.unique(starts).to_pylist()
    if len(distinct) == 1:
        yield distinct[0], chunk.values
        return
    for start in distinct:
        yield start, chunk.values.filter(pc.equal(starts, start))


def _add_stats(period: _Period, values: pa.Table, attributes: pa.Table) -> None:
    """Count the rows and add up their costs, per provider and currency, from the totals of
    each attribute combination the rows use."""
    period.rows += values.num_rows
    money = [
        "billed_cost_micros",
        "effective_cost_micros",
        residual_column("billed_cost_micros"),
        residual_column("effective_cost_micros"),
    ]
    per_combination = values.group_by("attributes_index").aggregate(
        [("source_row", "count"), *((name, "sum") for name in money)]
    )
    used = attributes.take(per_combination["attributes_index"])
    period.accounts.update(
        a for a in pc.unique(used["billing_account_id"]).to_pylist() if a is not None
    )
    ends = pc.drop_null(used["billing_period_end"])
    if len(ends):
        end = pc.max(ends).as_py()
        period.end = end if period.end is None else max(period.end, end)
    totals = pa.table(
        {
            "provider": used["provider_name"],
            "currency": used["billing_currency"],
            "rows": per_combination["source_row_count"],
            **{name: per_combination[f"{name}_sum"] for name in money},
        }
    )
    providers = totals.group_by("provider").aggregate([("rows", "sum")])
    for name, count in zip(
        providers["provider"].to_pylist(), providers["rows_sum"].to_pylist(), strict=True
    ):
        period.by_provider[name if name is not None else "(none)"] += count
    sums = totals.group_by("currency").aggregate([(name, "sum") for name in money])
    billed, effective, billed_rest, effective_rest = (
        [int(v or 0) for v in sums[f"{name}_sum"].to_pylist()] for name in money
    )
    for i, currency in enumerate(sums["currency"].to_pylist()):
        period.totals.setdefault(currency or NO_CURRENCY, CostTotals()).add(
            CostTotals(
                exact_picos(billed[i], billed_rest[i]), exact_picos(effective[i], effective_rest[i])
            )
        )


def _fingerprint(
    source: str, start: datetime, files: list[SourceFile], options: NormaliseOptions
) -> str:
    digest = hashlib.sha256(f"{source}|{start.isoformat()}|{options}".encode())
    for sha in sorted(f.sha256 for f in files):
        digest.update(sha.encode())
    return digest.hexdigest()
