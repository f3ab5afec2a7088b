"""Draft-model memory per deployment

``engine_memory`` keeps each measurement of a deployment's drafter memory, read from two vLLM
start-up logs (without and with the drafter); the newest one prices the draft's memory.

Revision ID: 0014_engine_memory
Revises: 0013_probe_runs
Create Date: 2026-12-05 02:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

import app.db

revision: str = "0014_engine_memory"
down_revision: str | None = "0013_probe_runs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TIME = app.db.UTCDateTime(timezone=True)
_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_table(
        "engine_memory",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("deployment_id", _ID, nullable=False),
        sa.Column("measured_at", _TIME, nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("method", sa.String(64), nullable=False),
        sa.Column("draft_model", sa.String(1024), nullable=True),
        sa.Column("kv_tokens_without", sa.BigInteger(), nullable=False),
        sa.Column("kv_tokens_with", sa.BigInteger(), nullable=False),
        sa.Column("kv_bytes_without", sa.BigInteger(), nullable=False),
        sa.Column("kv_bytes_with", sa.BigInteger(), nullable=False),
        sa.Column("draft_bytes", sa.BigInteger(), nullable=False),
        sa.Column("pool_bytes", sa.BigInteger(), nullable=False),
        sa.Column("pool_basis", sa.String(16), nullable=False),
        sa.Column("draft_weights_bytes", sa.BigInteger(), nullable=True),
        sa.Column("target_weights_bytes", sa.BigInteger(), nullable=True),
        sa.Column("max_model_len", sa.Integer(), nullable=False),
        sa.Column("figures", _JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["deployment_id"],
            ["deployments.id"],
            name=op.f("fk_engine_memory_deployment_id_deployments"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_engine_memory")),
    )
    op.create_index(
        op.f("ix_engine_memory_deployment_id"), "engine_memory", ["deployment_id"], unique=False
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.drop_index(op.f("ix_engine_memory_deployment_id"), table_name="engine_memory")
    op.drop_table("engine_memory")
