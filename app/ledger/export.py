"""Monthly chargeback exports: CSV and Parquet lines per team and deployment (the FOCUS 1.3
allocation export is app/ledger/focus_export.py)."""

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from app.domain.ledger import CostLabel
from app.domain.money import format_micros, split_picos
from app.domain.periods import Month
from app.ledger.costs import CostLine
from app.ledger.focus_export import FOCUS_MONEY as EXACT_MONEY
from app.ledger.focus_export import MONEY


def chargeback_table(
    lines: Sequence[CostLine], by: Sequence[str], month: Month, currency: str | None
) -> pa.Table:
    """One row per line, money as exact decimals: ``effective_cost`` and ``billed_cost`` to
    the micro, ``*_exact`` at the bill's precision, and a last ``(rounding)`` line where the
    amounts to the micro do not add up to the exact total rounded once. ``currency`` (the
    month's bill's, every amount's) is a column of its own on every row: a file passed on
    without it would leave the reader to guess."""
    records = [line.to_json(by) for line in lines]
    rounding = rounding_line(lines, by)
    if rounding is not None:
        records.append(rounding)
    columns: dict[str, list[Any]] = {
        "month": [str(month)] * len(records),
        "currency": [currency] * len(records),
    }
    for name in records[0] if records else {"effective_cost": None}:
        columns[name] = [r.get(name) for r in records]
    table = pa.table(
        {
            name: pa.array(values, pa.string() if name == "currency" else None)
            for name, values in columns.items()
        }
    )
    for name in table.column_names:
        money = _money_type(name)
        if money is not None:
            index = table.schema.get_field_index(name)
            table = table.set_column(
                index,
                name,
                pa.array([None if v is None else Decimal(v) for v in columns[name]], money),
            )
    return table


def rounding_line(lines: Sequence[CostLine], by: Sequence[str]) -> dict[str, Any] | None:
    """The line that makes the lines' amounts to the micro add up to their exact total
    rounded once (half to even), in each basis; None when they already do."""
    effective = sum(line.effective_picos for line in lines)
    billed = sum(line.billed_picos for line in lines)
    short_effective = split_picos(effective)[0] - sum(line.effective_micros for line in lines)
    short_billed = split_picos(billed)[0] - sum(line.billed_micros for line in lines)
    if short_effective == 0 and short_billed == 0:
        return None
    return {
        **dict.fromkeys(by, CostLabel.rounding.value),
        "requests": 0,
        "effective_cost": format_micros(short_effective),
        "billed_cost": format_micros(short_billed),
        "effective_cost_exact": format_micros(0),
        "billed_cost_exact": format_micros(0),
    }


def _money_type(column: str) -> pa.DataType | None:
    if column in ("effective_cost_exact", "billed_cost_exact"):
        return EXACT_MONEY
    if column in ("effective_cost", "billed_cost") or column.startswith("cost_per_"):
        return MONEY
    return None


def write_table(table: pa.Table, out: Path, fmt: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        pq.write_table(table, out)
    else:
        pacsv.write_csv(table, out)
