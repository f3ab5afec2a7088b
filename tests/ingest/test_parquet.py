"""Parquet exports (typed timestamps, decimals, doubles and map-typed tags) ingest exactly."""

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import Engine, select

from app.models import BillingRow
from ingest.service import IngestOptions, ingest_billing
from tests.ingest.helpers import focus_row


def test_typed_parquet_ingests_like_csv(engine: Engine, tmp_path: Path) -> None:
    rows = [focus_row(hour=h) for h in range(3)]
    table = pa.table(
        {name: pa.array([r[name] or None for r in rows], pa.string()) for name in rows[0]}
    )
    hours = [datetime(2026, 10, 1, h, tzinfo=UTC) for h in range(4)]
    table = table.set_column(
        table.schema.get_field_index("ChargePeriodStart"),
        "ChargePeriodStart",
        pa.array(hours[:3], pa.timestamp("ms", tz="UTC")),
    )
    table = table.set_column(
        table.schema.get_field_index("ChargePeriodEnd"),
        "ChargePeriodEnd",
        pa.array(hours[1:], pa.timestamp("ms")),
    )
    table = table.set_column(
        table.schema.get_field_index("BilledCost"),
        "BilledCost",
        pa.array([Decimal("1.234567"), Decimal("-0.5"), Decimal("2")], pa.decimal128(20, 6)),
    )
    table = table.set_column(
        table.schema.get_field_index("EffectiveCost"),
        "EffectiveCost",
        pa.array([0.1, 0.2, 1e-7], pa.float64()),
    )
    table = table.set_column(
        table.schema.get_field_index("Tags"),
        "Tags",
        pa.array([[("user:team", "a")], [("team", "b")], None], pa.map_(pa.string(), pa.string())),
    )
    path = tmp_path / "export-00001.snappy.parquet"
    pq.write_table(table, path)

    report = ingest_billing(engine, str(path), IngestOptions())

    totals = report.totals_by_currency()["USD"]
    assert totals.billed_cost_picos == (1_234_567 - 500_000 + 2_000_000) * 10**6
    assert totals.effective_cost_picos == (100_000 + 200_000) * 10**6 + 100_000  # 1e-7: kept
    with engine.connect() as conn:
        stored = conn.execute(
            select(
                BillingRow.charge_period_start, BillingRow.charge_period_end, BillingRow.tags
            ).order_by(BillingRow.source_row)
        ).all()
    assert [s.charge_period_start for s in stored] == hours[:3]
    assert [s.charge_period_end for s in stored] == hours[1:]
    assert [s.tags for s in stored] == [{"team": "a"}, {"team": "b"}, None]
