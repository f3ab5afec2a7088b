"""ledger rollups, and runs whose entries live in a Parquet store

Reports read ``ledger_rollups`` (a run's entries summed per pool, charge period, deployment,
team, kind, method, currency and corrected month) instead of the entries. A run allocated
with a store (a folder or ``s3://`` prefix of hive-partitioned Parquet) keeps its entries
there: ``allocation_runs.store_uri`` names it and ``store_files`` lists the run's files with
their SHA-256; a closure copies that list, so a closed month's files can be re-hashed and
shown unchanged. Existing runs get their rollups computed from their entries.

Revision ID: 0008_ledger_store_rollups
Revises: 0007_ledger_pools
Create Date: 2026-12-04 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_ledger_store_rollups"
down_revision: str | None = "0007_ledger_pools"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_JSON = sa.JSON()  # read back whole, never queried inside
_TIME = sa.DateTime(timezone=True)
_KEYS = (
    "pool_id",
    "billing_row_id",
    "charge_period_start",
    "charge_period_end",
    "deployment",
    "team",
    "kind",
    "method",
    "currency",
    "corrects_month",
)
_COSTS = (
    "effective_cost_micros",
    "billed_cost_micros",
    "list_cost_micros",
    "contracted_cost_micros",
)

_SET_COSTS = ("effective_cost_micros", "billed_cost_micros")
"""Every entry has these; list and contracted cost are null in entries older than 0007."""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.add_column("allocation_runs", sa.Column("store_uri", sa.Text(), nullable=True))
    op.add_column("allocation_runs", sa.Column("store_files", _JSON, nullable=True))
    op.add_column("ledger_closures", sa.Column("store_files", _JSON, nullable=True))
    op.create_table(
        "ledger_rollups",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.BigInteger(), nullable=False),
        sa.Column("booked_month", sa.String(7), nullable=False),
        sa.Column("pool_id", sa.BigInteger(), nullable=True),
        sa.Column("billing_row_id", sa.BigInteger(), nullable=True),
        sa.Column("charge_period_start", _TIME, nullable=True),
        sa.Column("charge_period_end", _TIME, nullable=True),
        sa.Column("deployment", sa.String(128), nullable=True),
        sa.Column("team", sa.String(128), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("method", sa.String(32), nullable=False),
        sa.Column("currency", sa.String(8), nullable=False),
        sa.Column("corrects_month", sa.String(7), nullable=True),
        sa.Column("entries", sa.BigInteger(), nullable=False),
        sa.Column("gpu_ns", sa.BigInteger(), nullable=False),
        *(sa.Column(c, sa.BigInteger(), nullable=c not in _SET_COSTS) for c in _COSTS),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_rollups")),
    )
    op.create_index("ix_ledger_rollups_run", "ledger_rollups", ["run_id"])
    keys = ", ".join(_KEYS)
    op.execute(
        f"INSERT INTO ledger_rollups (run_id, booked_month, {keys}, entries, gpu_ns, "
        f"{', '.join(_COSTS)}) "
        f"SELECT run_id, booked_month, {keys}, count(*), sum(gpu_ns), "
        f"{', '.join(f'sum({c})' for c in _COSTS)} "
        f"FROM ledger_entries GROUP BY run_id, booked_month, {keys}"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.drop_index("ix_ledger_rollups_run", table_name="ledger_rollups")
    op.drop_table("ledger_rollups")
    op.drop_column("ledger_closures", "store_files")
    op.drop_column("allocation_runs", "store_files")
    op.drop_column("allocation_runs", "store_uri")
