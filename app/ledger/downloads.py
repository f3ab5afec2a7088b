"""Chargeback files as bytes, for download: per team (or cost center) and deployment, or a
FOCUS 1.3 dataset of every allocated share."""

import re
from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy.orm import Session

from app.domain.ledger import Dimension
from app.domain.periods import Month
from app.ledger.costs import unit_costs
from app.ledger.export import chargeback_table
from app.ledger.focus_export import write_focus_allocation
from app.storage.run_repository import month_currency


class ChargebackFormat(StrEnum):
    csv = "csv"
    parquet = "parquet"
    focus_csv = "focus-csv"
    focus_parquet = "focus-parquet"


@dataclass(frozen=True, slots=True)
class Download:
    content: bytes
    filename: str
    media_type: str


def chargeback_file(
    session: Session,
    *,
    month: Month,
    fmt: ChargebackFormat,
    team: str | None,
    by_cost_center: bool = False,
    s3_endpoint_url: str | None = None,
) -> Download:
    """The month's chargeback in ``fmt``; ``team`` keeps only that team's lines."""
    stem = "focus-allocation" if fmt.startswith("focus") else "chargeback"
    stem += f"-{month}" + ("" if team is None else "-" + re.sub(r"[^A-Za-z0-9_.-]", "_", team)[:64])
    as_csv = fmt in (ChargebackFormat.csv, ChargebackFormat.focus_csv)
    if fmt in (ChargebackFormat.focus_csv, ChargebackFormat.focus_parquet):
        sink = pa.BufferOutputStream()
        write_focus_allocation(
            session,
            month,
            sink,
            "csv" if as_csv else "parquet",
            team=team,
            s3_endpoint_url=s3_endpoint_url,
        )
        content = sink.getvalue().to_pybytes()
    else:
        by = [Dimension.cost_center if by_cost_center else Dimension.team, Dimension.deployment]
        lines = unit_costs(session, month=month, by=by, team=team, s3_endpoint_url=s3_endpoint_url)
        table = chargeback_table(lines, by, month, month_currency(session, month))
        content = _csv_bytes(table) if as_csv else _parquet_bytes(table)
    if as_csv:
        return Download(content, f"{stem}.csv", "text/csv")
    return Download(content, f"{stem}.parquet", "application/vnd.apache.parquet")


def _csv_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink)
    return bytes(sink.getvalue().to_pybytes())


def _parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())
