"""ledger entries of pooled billing rows, and the full set of FOCUS cost bases

The allocation pools a deployment's rows of one charge period before splitting them, so a
request gets one entry per pool instead of one per instance row. An entry names its pool
(``pool_id``, the pool's first billing row); ``billing_row_id`` stays set where the pool is a
single row, and ``ledger_pool_rows`` lists the rows of the larger pools once per run. Entries
also carry their shares of ListCost and ContractedCost, split with the same rule.

Revision ID: 0007_ledger_pools
Revises: 0006_billing_row_attributes
Create Date: 2026-12-03 16:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_ledger_pools"
down_revision: str | None = "0006_billing_row_attributes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_NEW_ENTRY_COLUMNS = ("pool_id", "list_cost_micros", "contracted_cost_micros")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    # Plain ADD COLUMN (no batch copy on SQLite): the closed-month triggers stay in place.
    for name in _NEW_ENTRY_COLUMNS:
        op.add_column("ledger_entries", sa.Column(name, sa.BigInteger(), nullable=True))
    op.create_table(
        "ledger_pool_rows",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.BigInteger(), nullable=False),
        sa.Column("pool_id", sa.BigInteger(), nullable=False),
        sa.Column("billing_row_id", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_pool_rows")),
    )
    op.create_index("ix_ledger_pool_rows_run_pool", "ledger_pool_rows", ["run_id", "pool_id"])


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.drop_index("ix_ledger_pool_rows_run_pool", table_name="ledger_pool_rows")
    op.drop_table("ledger_pool_rows")
    for name in reversed(_NEW_ENTRY_COLUMNS):
        op.drop_column("ledger_entries", name)
