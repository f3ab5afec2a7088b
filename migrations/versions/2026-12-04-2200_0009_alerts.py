"""alert webhooks and their delivery log

``alert_webhooks`` are where alerts go (URL, signing secret, JSON or Slack format, the kinds
they receive); ``alert_deliveries`` hold one row per alert and webhook, with its attempts.
UNIQUE (webhook_id, dedup_key) makes one event alert once per webhook, however often it is
raised. New tables only: nothing existing changes.

Revision ID: 0009_alerts
Revises: 0008_ledger_store_rollups
Create Date: 2026-12-04 22:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0009_alerts"
down_revision: str | None = "0008_ledger_store_rollups"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TIME = app.db.UTCDateTime(timezone=True)
_JSON = sa.JSON()  # read back whole, never queried inside


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_table(
        "alert_webhooks",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("secret", sa.String(128), nullable=False),
        sa.Column("format", sa.String(16), nullable=False),
        sa.Column("kinds", _JSON, nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.Column("disabled_at", _TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_webhooks")),
        sa.UniqueConstraint("name", name=op.f("uq_alert_webhooks_name")),
    )
    op.create_table(
        "alert_deliveries",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("webhook_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("dedup_key", sa.String(256), nullable=False),
        sa.Column("payload", _JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _TIME, nullable=True),
        sa.Column("last_attempt_at", _TIME, nullable=True),
        sa.Column("delivered_at", _TIME, nullable=True),
        sa.Column("last_error", sa.String(256), nullable=True),
        sa.Column("created_at", _TIME, nullable=False),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["alert_webhooks.id"],
            name=op.f("fk_alert_deliveries_webhook_id_alert_webhooks"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_deliveries")),
        sa.UniqueConstraint(
            "webhook_id", "dedup_key", name=op.f("uq_alert_deliveries_webhook_id_dedup_key")
        ),
    )
    op.create_index(
        "ix_alert_deliveries_status_next", "alert_deliveries", ["status", "next_attempt_at"]
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.drop_index("ix_alert_deliveries_status_next", table_name="alert_deliveries")
    op.drop_table("alert_deliveries")
    op.drop_table("alert_webhooks")
