"""proxy keys (who a metered request is for) and budgets

``api_keys`` gains a purpose: ``api`` keys read the REST API as before; ``proxy`` keys are
presented to the metering proxy and decide the team and cost center a request is billed to,
with optional fixed tags, allowed deployments, and a trusted-gateway flag (a gateway may pass
its end user's team on). ``budgets`` hold a limit per team, cost center, deployment or tag for
a month or a custom period, with alert thresholds and an optional hard limit.

Revision ID: 0010_proxy_keys_budgets
Revises: 0009_alerts
Create Date: 2026-12-04 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0010_proxy_keys_budgets"
down_revision: str | None = "0009_alerts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TIME = app.db.UTCDateTime(timezone=True)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("purpose", sa.String(16), nullable=False, server_default="api")
        )
        batch_op.add_column(sa.Column("cost_center", sa.String(128), nullable=True))
        batch_op.add_column(sa.Column("tags", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("deployments", sa.JSON(), nullable=True))
        batch_op.add_column(
            sa.Column("is_gateway", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.create_check_constraint(
            op.f("ck_api_keys_purpose_known"), "purpose IN ('api', 'proxy')"
        )
        batch_op.create_check_constraint(
            op.f("ck_api_keys_proxy_fields_only_on_proxy_keys"),
            "purpose = 'proxy' OR (cost_center IS NULL AND tags IS NULL "
            "AND deployments IS NULL AND NOT is_gateway)",
        )
    op.create_table(
        "budgets",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("scope_kind", sa.String(16), nullable=False),
        sa.Column("scope_value", sa.String(300), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("period_start", _TIME, nullable=True),
        sa.Column("period_end", _TIME, nullable=True),
        sa.Column("amount_micros", sa.BigInteger(), nullable=False),
        sa.Column("currency", sa.String(8), nullable=False),
        sa.Column("thresholds", sa.JSON(), nullable=False),
        sa.Column("hard_limit_micros", sa.BigInteger(), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("archived_at", _TIME, nullable=True),
        sa.CheckConstraint(
            "scope_kind IN ('team', 'cost_center', 'deployment', 'tag')",
            name=op.f("ck_budgets_scope_kind_known"),
        ),
        sa.CheckConstraint(
            "(period = 'month' AND period_start IS NULL AND period_end IS NULL) OR "
            "(period = 'custom' AND period_start IS NOT NULL AND period_end > period_start)",
            name=op.f("ck_budgets_period_bounds"),
        ),
        sa.CheckConstraint("amount_micros > 0", name=op.f("ck_budgets_amount_positive")),
        sa.CheckConstraint(
            "hard_limit_micros IS NULL OR hard_limit_micros > 0",
            name=op.f("ck_budgets_hard_limit_positive"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
        sa.UniqueConstraint("name", name=op.f("uq_budgets_name")),
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.drop_table("budgets")
    with op.batch_alter_table("api_keys", schema=None) as batch_op:
        batch_op.drop_constraint(op.f("ck_api_keys_proxy_fields_only_on_proxy_keys"), type_="check")
        batch_op.drop_constraint(op.f("ck_api_keys_purpose_known"), type_="check")
        for column in ("is_gateway", "deployments", "tags", "cost_center", "purpose"):
            batch_op.drop_column(column)
