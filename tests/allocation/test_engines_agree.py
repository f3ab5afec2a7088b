"""One plan, three ways in: DuckDB reading SQLite, DuckDB reading PostgreSQL, and Apache Spark
(real PySpark in local mode) give identical entries for generated months.

Each example writes a generated month into the database (FOCUS file ingested, registry,
usage), reads the plan's inputs back, and checks that DuckDB allocates them exactly as it
allocates the generated month itself, so the runs from SQLite and from PostgreSQL are the
same run; Spark must then agree with DuckDB entry for entry."""

import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session

from app.allocation.engine import EngineName, PlanEngine, conform
from app.allocation.plan import ENTRY_COLUMNS, INPUT_SCHEMAS
from app.allocation.repository import plan_inputs
from tests.allocation.scenarios import MONTH_START, TAG, Month, months, store
from tests.prereq import require

SPARK = PlanEngine(EngineName.spark, spark_partitions=1)
DUCKDB = PlanEngine()


def _renumbered(inputs: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """Database ids as 1..n in their order (the generated month numbers its rows so)."""
    rows = inputs["rows"].sort_by("row_id")
    usage = inputs["usage"].sort_by("usage_ord")
    return {
        **inputs,
        "rows": rows.set_column(0, "row_id", pa.array(range(1, rows.num_rows + 1), pa.int64())),
        "usage": usage.set_column(
            0, "usage_ord", pa.array(range(1, usage.num_rows + 1), pa.int64())
        ),
    }


def _sorted(table: pa.Table, keys: list[str]) -> list[dict[str, object]]:
    records: list[dict[str, object]] = table.sort_by([(k, "ascending") for k in keys]).to_pylist()
    return records


@pytest.mark.spark
# No shrinking: an example costs Spark about twenty seconds; the failing month is printed.
@settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(month=months(max_scenarios=8), share_idle=st.booleans())
def test_duckdb_from_the_database_and_spark_agree(
    session: Session, tmp_path: Path, month: Month, share_idle: bool
) -> None:
    require(shutil.which("java") is not None, "Java 17 for Spark (make java)")
    with session.begin_nested() as savepoint:
        store(session, month, tmp_path)
        loaded = plan_inputs(
            session,
            start=MONTH_START,
            end=MONTH_START.replace(month=11),
            by_billing_period=True,
            booked_month="2026-10",
            tag_key=TAG,
        )
        savepoint.rollback()
    loaded = _renumbered(loaded)
    generated = month.inputs()
    for name, keys in (
        ("rows", ["row_id"]),
        ("deployments", ["deployment"]),
        ("replicas", ["deployment", "replica"]),
    ):
        assert _sorted(conform(name, loaded[name]), keys) == _sorted(
            conform(name, generated[name]), keys
        ), name
    assert set(loaded) == set(INPUT_SCHEMAS)

    # The loader reads only the usage overlapping the rows, so compare what it allocates.
    duck = DUCKDB.allocate(loaded, share_idle=share_idle)
    truth = DUCKDB.allocate(generated, share_idle=share_idle)
    spark = SPARK.allocate(loaded, share_idle=share_idle)

    keys = list(ENTRY_COLUMNS)
    assert duck.entries.num_rows > 0
    assert _sorted(duck.entries, keys) == _sorted(truth.entries, keys)
    assert _sorted(spark.entries, keys) == _sorted(duck.entries, keys)
    member_keys = ["pool_id", "billing_row_id"]
    assert _sorted(spark.pool_rows, member_keys) == _sorted(duck.pool_rows, member_keys)
