"""Brownout steps on budgets: what the proxy does to a scope as spend nears its hard limit

A JSON list on ``budgets`` (``[{"at_percent": 75, "action": "warn", "route_to": null}, ...]``),
empty for every budget made before this revision: they act as before.

Revision ID: 0019_budget_steps
Revises: 0018_exact_money
Create Date: 2026-12-07 16:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019_budget_steps"
down_revision: str | None = "0018_exact_money"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "budgets", sa.Column("steps", sa.JSON(), nullable=False, server_default=sa.text("'[]'"))
    )


def downgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.drop_column("steps")
