"""Monthly chargeback exports: CSV and Parquet lines per team and deployment, and a FOCUS 1.3
dataset in which every allocated share is a row carrying its source row's columns."""

import json
from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy import select
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


def focus_allocation_table(session: Session, month: Month, *, team: str | None = None) -> pa.Table:
    """FOCUS 1.3 rows, one per ledger entry of the month's run.

    Each row keeps its source row's FOCUS and ``x_`` columns; BilledCost and EffectiveCost
    are the entry's shares; ListCost and ContractedCost are split with the same weights by
    largest remainder, so each source row's shares sum back to it exactly. Adjustments for a
    closed month (they have no source row) become ``Correction`` rows of their own.
    """
    run_id = current_run_id(session, str(month))
    single = (
        select(LedgerEntry, BillingRow)
        .join(BillingRow, BillingRow.id == LedgerEntry.billing_row_id)
        .where(LedgerEntry.run_id == run_id)
        .order_by(LedgerEntry.billing_row_id, LedgerEntry.id)
    )
    pooled = (
        select(LedgerEntry, BillingRow)
        .join(
            LedgerPoolRow,
            (LedgerPoolRow.run_id == LedgerEntry.run_id)
            & (LedgerPoolRow.pool_id == LedgerEntry.pool_id),
        )
        .join(BillingRow, BillingRow.id == LedgerPoolRow.billing_row_id)
        .where(LedgerEntry.run_id == run_id, LedgerEntry.billing_row_id.is_(None))
        .order_by(BillingRow.id, LedgerEntry.id)
    )
    adjustments = session.scalars(
        select(LedgerEntry)
        .where(
            LedgerEntry.run_id == run_id,
            LedgerEntry.billing_row_id.is_(None),
            LedgerEntry.pool_id.is_(None),
        )
        .order_by(LedgerEntry.id)
    ).all()
    records: list[dict[str, Any]] = []
    payer: dict[str, Any] = {}
    for query, of_pool in ((single, False), (pooled, True)):
        by_row: dict[int, list[tuple[LedgerEntry, BillingRow]]] = {}
        for entry, row in session.execute(query):
            by_row.setdefault(row.id, []).append((entry, row))
        for shares in by_row.values():
            payer = payer or _payer_columns(shares[0][1])
            records += _focus_rows(shares, run_id or 0, of_pool=of_pool)
    records += [_adjustment_row(entry, month, payer, run_id or 0) for entry in adjustments]
    if team is not None:
        records = [r for r in records if json.loads(r["AllocatedTags"] or "{}").get("team") == team]
    return _focus_arrow(records)


def _focus_rows(
    shares: list[tuple[LedgerEntry, BillingRow]], run_id: int, *, of_pool: bool
) -> list[dict[str, Any]]:
    """A source row's FOCUS rows, one per share of it.

    A row split on its own has its entries as shares (List and Contracted cost split with
    the same weights). A row of a pool of several rows is split across the pool's entries
    in every basis by the entries' weights, so each source row's shares sum back to it.
    """
    row = shares[0][1]
    weights = {i: entry.gpu_ns for i, (entry, _) in enumerate(shares)}
    if not any(weights.values()):
        weights = dict.fromkeys(weights, 1)
    split_list = split_by_weight(row.list_cost_micros or 0, weights)
    split_contracted = split_by_weight(row.contracted_cost_micros or 0, weights)
    if of_pool:
        split_billed = split_by_weight(row.billed_cost_micros or 0, weights)
        split_effective = split_by_weight(row.effective_cost_micros or 0, weights)
    else:
        split_billed = {i: entry.billed_cost_micros for i, (entry, _) in enumerate(shares)}
        split_effective = {i: entry.effective_cost_micros for i, (entry, _) in enumerate(shares)}
    base = _source_columns(row)
    out = []
    for i, (entry, _) in enumerate(shares):
        record = dict(base)
        record.update(
            {
                "BilledCost": micros_to_decimal(split_billed.get(i, 0)),
                "EffectiveCost": micros_to_decimal(split_effective.get(i, 0)),
                "ListCost": micros_to_decimal(split_list.get(i, 0)),
                "ContractedCost": micros_to_decimal(split_contracted.get(i, 0)),
                "AllocatedMethodId": None
                if entry.kind is EntryKind.unallocated
                else f"specledger:{entry.method.replace('_', '-').replace(':', '/')}",
                "AllocatedMethodDetails": None
                if entry.kind is EntryKind.unallocated
                else json.dumps(
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
                ),
                "AllocatedResourceId": entry.event_id
                or (f"idle:{entry.deployment}" if entry.kind is EntryKind.idle else None),
                "AllocatedResourceName": entry.session_id,
                "AllocatedTags": _allocated_tags(entry),
                "x_SourceBillingRowId": row.id,
            }
        )
        out.append(record)
    return out


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


def _focus_arrow(records: list[dict[str, Any]]) -> pa.Table:
    names: list[str] = []
    for record in records:
        names += [n for n in record if n not in names]
    money = {"BilledCost", "EffectiveCost", "ListCost", "ContractedCost"}
    columns = {}
    for name in sorted(names, key=lambda n: (n.startswith("x_"), n)):
        values = [r.get(name) for r in records]
        if name in money:
            columns[name] = pa.array(values, MONEY)
        elif name == "x_SourceBillingRowId":
            columns[name] = pa.array(values, pa.int64())
        else:
            columns[name] = pa.array([None if v is None else str(v) for v in values], pa.string())
    return pa.table(columns)
