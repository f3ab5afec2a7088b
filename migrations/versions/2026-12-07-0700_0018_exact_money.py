"""Money exact to the pico: a residual column beside every cost column of the bill and ledger

Each cost in ``billing_rows``, ``ledger_entries`` and ``ledger_rollups`` keeps its micros
(rounded half to even, what is shown and split on) and gains ``<basis>_residual_picos``: what
the exact amount is beyond the micros (``exact picos = micros * 10**6 + residual``). Rows
loaded before this revision were stored in micros only; their residual is 0, which is what
they hold.

Plain ``ADD COLUMN`` with a constant default on both databases: no table copy (SQLite's
batch mode would recreate ``ledger_entries`` and drop its closed-month triggers), and
PostgreSQL fills the default without rewriting the table.

Revision ID: 0018_exact_money
Revises: 0017_slurm_accrual
Create Date: 2026-12-07 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0018_exact_money"
down_revision: str | None = "0017_slurm_accrual"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("billing_rows", "ledger_entries", "ledger_rollups")
RESIDUALS = (
    "effective_cost_residual_picos",
    "billed_cost_residual_picos",
    "list_cost_residual_picos",
    "contracted_cost_residual_picos",
)


def upgrade() -> None:
    for table in TABLES:
        for column in RESIDUALS:
            op.add_column(
                table, sa.Column(column, sa.BigInteger(), nullable=False, server_default="0")
            )


def downgrade() -> None:
    for table in TABLES:
        for column in RESIDUALS:
            op.drop_column(table, column)
