"""Monthly chargeback exports: CSV and Parquet lines per team and deployment, and a FOCUS 1.3
dataset in which every allocated share is a row carrying its source row's columns."""

import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy import Select, func, select
from sqlalchemy.orm import Session

from app.domain.allocation import split_by_weight
from app.domain.focus import TYPED_COLUMNS
from app.domain.ledger import EntryKind
from app.domain.money import micros_to_decimal
from app.domain.periods import Month
from app.ledger.costs import CostLine
from app.ledger.repository import current_run_id
from app.models import BillingRow, LedgerEntry, LedgerPoolRow

MONEY = pa.decimal128(38, 6)
FOCUS_OF_DB = {db: focus for focus, db in TYPED_COLUMNS.items()}


def chargeback_table(lines: Sequence[CostLine], by: Sequence[str], month: Month) -> pa.Table:
    """One row per line, money as exact decimals."""
    records = [line.to_json(by) for line in lines]
    columns: dict[str, list[Any]] = {"month": [str(month)] * len(records)}
    for name in records[0] if records else {"effective_cost": None}:
        columns[name] = [r.get(name) for r in records]
    table = pa.table({name: pa.array(values) for name, values in columns.items()})
    for name in table.column_names:
        if name in ("effective_cost", "billed_cost") or name.startswith("cost_per_"):
            index = table.schema.get_field_index(name)
            table = table.set_column(
                index,
                name,
                pa.array([None if v is None else Decimal(v) for v in columns[name]], MONEY),
            )
    return table


def write_table(table: pa.Table, out: Path, fmt: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(table, out)
    else:
        pacsv.write_csv(table, out)


FOCUS_BATCH_ROWS = 50_000
"""FOCUS rows per batch: what the export holds in memory at once (plus one pool's shares)."""


def focus_allocation_table(session: Session, month: Month, *, team: str | None = None) -> pa.Table:
    """The whole FOCUS 1.3 allocation of a month as one table (see :func:`focus_batches`);
    for tests and small months, the files stream (:func:`write_focus_allocation`)."""
    schema, batches = focus_batches(session, month, team=team)
    return pa.Table.from_batches(list(batches), schema=schema)


def write_focus_allocation(
    session: Session, month: Month, out: Path | pa.NativeFile, fmt: str, *, team: str | None
) -> int:
    """Stream the month's FOCUS 1.3 allocation to ``out`` as CSV or Parquet; the rows written.

    Memory stays at one batch whatever the size of the month."""
    schema, batches = focus_batches(session, month, team=team)
    sink = str(out) if isinstance(out, Path) else out
    written = 0
    with (
        pq.ParquetWriter(sink, schema)
        if fmt == "parquet"
        else pacsv.CSVWriter(sink, schema) as writer
    ):
        for batch in batches:
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def focus_batches(
    session: Session, month: Month, *, team: str | None = None
) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """FOCUS 1.3 rows, one per share of a source billing row in the month's run, in batches.

    Each row keeps its source row's FOCUS and ``x_`` columns and carries its share of
    BilledCost, EffectiveCost, ListCost and ContractedCost. A row split on its own has its
    entries' shares, as the plan computed them in every basis. A row of a pool of several
    rows is split across the pool's entries by their weights (largest remainder), so each
    source row's shares sum back to it exactly. Adjustments for a closed month (they have no
    source row) become ``Correction`` rows of their own. ``team`` keeps one team's shares.

    The schema comes first, from the source rows (thousands, not millions); the entries are
    read in batches, never all at once.
    """
    run_id = current_run_id(session, str(month)) or 0
    of_run = [LedgerEntry.run_id == run_id, *([LedgerEntry.team == team] if team else [])]
    single_ids = select(LedgerEntry.billing_row_id).where(
        LedgerEntry.run_id == run_id, LedgerEntry.billing_row_id.is_not(None)
    )
    pooled_ids = select(LedgerPoolRow.billing_row_id).where(LedgerPoolRow.run_id == run_id)
    sources = {
        row.id: row
        for row in session.scalars(
            select(BillingRow)
            .where(BillingRow.id.in_(single_ids.union(pooled_ids).scalar_subquery()))
            .order_by(BillingRow.id)
        )
    }
    bases = {row_id: _source_columns(row) for row_id, row in sources.items()}
    payer = _payer_of(session, run_id, sources)
    adjustments = session.scalars(
        select(LedgerEntry)
        .where(*of_run, LedgerEntry.billing_row_id.is_(None), LedgerEntry.pool_id.is_(None))
        .order_by(LedgerEntry.id)
    ).all()
    names: list[str] = []
    for base in bases.values():
        names += [n for n in base if n not in names]
    if bases:
        names += [n for n in _SHARE_COLUMNS if n not in names]
    for entry in adjustments[:1]:
        names += [n for n in _adjustment_row(entry, month, payer, run_id) if n not in names]
    schema = _focus_schema(names)

    def records() -> Iterator[dict[str, Any]]:
        single = select(LedgerEntry).where(*of_run, LedgerEntry.billing_row_id.is_not(None))
        for entry in _streamed(
            session, single.order_by(LedgerEntry.billing_row_id, LedgerEntry.id)
        ):
            row_id = entry.billing_row_id or 0
            yield _share(
                bases[row_id],
                entry,
                row_id,
                run_id,
                (
                    entry.billed_cost_micros,
                    entry.effective_cost_micros,
                    entry.list_cost_micros or 0,
                    entry.contracted_cost_micros or 0,
                ),
            )
        pooled = (
            select(LedgerEntry, LedgerPoolRow.billing_row_id)
            .join(
                LedgerPoolRow,
                (LedgerPoolRow.run_id == LedgerEntry.run_id)
                & (LedgerPoolRow.pool_id == LedgerEntry.pool_id),
            )
            .where(LedgerEntry.run_id == run_id, LedgerEntry.billing_row_id.is_(None))
            .order_by(LedgerPoolRow.billing_row_id, LedgerEntry.id)
        )
        for row_id, shares in _by_source_row(session, pooled):
            yield from _pool_shares(bases[row_id], sources[row_id], shares, run_id, team)
        for entry in adjustments:
            yield _adjustment_row(entry, month, payer, run_id)

    def batches() -> Iterator[pa.RecordBatch]:
        chunk: list[dict[str, Any]] = []
        for record in records():
            chunk.append(record)
            if len(chunk) == FOCUS_BATCH_ROWS:
                yield _focus_batch(chunk, schema)
                chunk = []
        if chunk:
            yield _focus_batch(chunk, schema)

    return schema, batches()


_SHARE_COLUMNS = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "AllocatedMethodId",
    "AllocatedMethodDetails",
    "AllocatedResourceId",
    "AllocatedResourceName",
    "AllocatedTags",
    "x_SourceBillingRowId",
)
"""The columns a share adds to its source row's."""


def _streamed(session: Session, query: Select[Any]) -> Iterator[LedgerEntry]:
    for partition in session.scalars(
        query.execution_options(yield_per=FOCUS_BATCH_ROWS)
    ).partitions():
        yield from partition


def _by_source_row(
    session: Session, query: Select[LedgerEntry, int]
) -> Iterator[tuple[int, list[LedgerEntry]]]:
    """Consecutive entries of one source row (the query is ordered by it), row by row."""
    current: int | None = None
    shares: list[LedgerEntry] = []
    for entry, row_id in session.execute(query.execution_options(yield_per=FOCUS_BATCH_ROWS)):
        if row_id != current and shares:
            yield current or 0, shares
            shares = []
        current = row_id
        shares.append(entry)
    if shares:
        yield current or 0, shares


def _payer_of(session: Session, run_id: int, sources: dict[int, BillingRow]) -> dict[str, Any]:
    """The payer columns for adjustment rows: those of the first source row split alone, else
    of the first pooled one."""
    first_single = session.scalar(
        select(func.min(LedgerEntry.billing_row_id)).where(LedgerEntry.run_id == run_id)
    )
    row = sources.get(first_single or 0) or next(iter(sources.values()), None)
    return _payer_columns(row) if row is not None else {}


def _pool_shares(
    base: dict[str, Any],
    row: BillingRow,
    shares: list[LedgerEntry],
    run_id: int,
    team: str | None,
) -> Iterator[dict[str, Any]]:
    """A pooled source row split across its pool's entries in every basis, by the entries'
    weights, so its shares sum back to it (then ``team`` keeps that team's)."""
    weights = {i: entry.gpu_ns for i, entry in enumerate(shares)}
    if not any(weights.values()):
        weights = dict.fromkeys(weights, 1)
    splits = [
        split_by_weight(amount or 0, weights)
        for amount in (
            row.billed_cost_micros,
            row.effective_cost_micros,
            row.list_cost_micros,
            row.contracted_cost_micros,
        )
    ]
    for i, entry in enumerate(shares):
        if team is None or entry.team == team:
            amounts = (
                splits[0].get(i, 0),
                splits[1].get(i, 0),
                splits[2].get(i, 0),
                splits[3].get(i, 0),
            )
            yield _share(base, entry, row.id, run_id, amounts)


def _share(
    base: dict[str, Any],
    entry: LedgerEntry,
    row_id: int,
    run_id: int,
    amounts: tuple[int, int, int, int],
) -> dict[str, Any]:
    """One FOCUS row: the source row's columns and a share of it (billed, effective, list,
    contracted micros)."""
    billed, effective, list_cost, contracted = amounts
    allocated = entry.kind is not EntryKind.unallocated
    record = dict(base)
    record.update(
        {
            "BilledCost": micros_to_decimal(billed),
            "EffectiveCost": micros_to_decimal(effective),
            "ListCost": micros_to_decimal(list_cost),
            "ContractedCost": micros_to_decimal(contracted),
            "AllocatedMethodId": f"specledger:{entry.method.replace('_', '-').replace(':', '/')}"
            if allocated
            else None,
            "AllocatedMethodDetails": json.dumps(
                {
                    "x_Kind": entry.kind,
                    "x_BasisGpuNanoseconds": entry.gpu_ns,
                    "x_AllocationRunId": run_id,
                    "x_PoolId": entry.pool_id,
                    **(
                        {"x_Levels": ["charge hour x team", "request"]}
                        if entry.method.endswith(":hour,team")
                        else {}
                    ),
                }
            )
            if allocated
            else None,
            "AllocatedResourceId": entry.event_id
            or (f"idle:{entry.deployment}" if entry.kind is EntryKind.idle else None),
            "AllocatedResourceName": entry.session_id,
            "AllocatedTags": _allocated_tags(entry),
            "x_SourceBillingRowId": row_id,
        }
    )
    return record


def _focus_time(value: datetime) -> str:
    return f"{value:%Y-%m-%dT%H:%M:%SZ}"


def _allocated_tags(entry: LedgerEntry) -> str:
    return json.dumps(
        {
            k: v
            for k, v in {
                "team": entry.team,
                "session": entry.session_id,
                "deployment": entry.deployment,
            }.items()
            if v is not None
        }
    )


_PAYER_COLUMNS = (
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "InvoiceIssuerName",
    "ProviderName",
    "PublisherName",
    "ServiceProviderName",
    "HostProviderName",
)


def _payer_columns(row: BillingRow) -> dict[str, Any]:
    source = _source_columns(row)
    return {name: source.get(name) for name in _PAYER_COLUMNS if source.get(name) is not None}


def _adjustment_row(
    entry: LedgerEntry, month: Month, payer: dict[str, Any], run_id: int
) -> dict[str, Any]:
    """A restatement booked in ``month``: the change to a closed month's allocation after
    its billing was re-delivered. List and contracted cost are not restated (zero)."""
    start, end = month.start, month.end
    adjusted_kind = entry.method.restated_kind
    return {
        **payer,
        "BillingPeriodStart": _focus_time(start),
        "BillingPeriodEnd": _focus_time(end),
        "ChargePeriodStart": _focus_time(entry.charge_period_start)
        if entry.charge_period_start
        else None,
        "ChargePeriodEnd": _focus_time(entry.charge_period_end)
        if entry.charge_period_end
        else None,
        "ChargeCategory": "Adjustment",
        "ChargeClass": "Correction",
        "ChargeDescription": f"SpecLedger restatement of {entry.corrects_month} "
        f"({adjusted_kind} share) after its billing was re-delivered",
        "BillingCurrency": entry.currency,
        "BilledCost": micros_to_decimal(entry.billed_cost_micros),
        "EffectiveCost": micros_to_decimal(entry.effective_cost_micros),
        "ListCost": Decimal(0),
        "ContractedCost": Decimal(0),
        "AllocatedMethodId": "specledger:restatement",
        "AllocatedMethodDetails": json.dumps(
            {
                "x_Kind": adjusted_kind,
                "x_CorrectsMonth": entry.corrects_month,
                "x_AllocationRunId": run_id,
            }
        ),
        "AllocatedResourceId": f"idle:{entry.deployment}"
        if adjusted_kind is EntryKind.idle
        else None,
        "AllocatedResourceName": entry.session_id,
        "AllocatedTags": _allocated_tags(entry),
        "x_CorrectsMonth": entry.corrects_month,
    }


def _source_columns(row: BillingRow) -> dict[str, Any]:
    record: dict[str, Any] = {}
    for db_name, focus_name in FOCUS_OF_DB.items():
        value = getattr(row, db_name)
        if isinstance(value, datetime):
            value = _focus_time(value)
        elif focus_name == "Tags":
            value = json.dumps(value) if value is not None else None
        record[focus_name] = value
    for name, value in {**row.focus_columns, **row.provider_columns}.items():
        record[name] = value if isinstance(value, str) or value is None else json.dumps(value)
    provider = record.get("ProviderName")
    record.setdefault("ServiceProviderName", provider)
    record.setdefault("HostProviderName", provider)
    return record


def _focus_schema(names: list[str]) -> pa.Schema:
    """FOCUS columns first, then ``x_`` ones, each by name; money as exact decimals."""
    money = {"BilledCost", "EffectiveCost", "ListCost", "ContractedCost"}

    def type_of(name: str) -> pa.DataType:
        if name in money:
            return MONEY
        return pa.int64() if name == "x_SourceBillingRowId" else pa.string()

    ordered = sorted(names, key=lambda n: (n.startswith("x_"), n))
    return pa.schema([(name, type_of(name)) for name in ordered])


def _focus_batch(records: list[dict[str, Any]], schema: pa.Schema) -> pa.RecordBatch:
    columns = []
    for field in schema:
        values = [r.get(field.name) for r in records]
        if pa.types.is_string(field.type):
            values = [None if v is None else str(v) for v in values]
        columns.append(pa.array(values, field.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
