"""Monthly chargeback exports: CSV and Parquet lines per team and deployment (the FOCUS 1.3
allocation export is app/ledger/focus_export.py)."""

from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from app.domain.periods import Month
from app.ledger.costs import CostLine
from app.ledger.focus_export import MONEY


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
