"""acceptance probe runs

``probe_runs`` holds one row per run of a fixed, versioned probe set through a deployment
(``specledger probe run``): the set's version and SHA-256, the run's requests, output, draft
and accepted tokens, the acceptance rate and its value per draft position, tokens/s and
TPOT percentiles. Drift of a deployment's probe acceptance is judged on these rows.

Revision ID: 0013_probe_runs
Revises: 0012_accepted_per_position
Create Date: 2026-12-05 02:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

import app.db

revision: str = "0013_probe_runs"
down_revision: str | None = "0012_accepted_per_position"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TIME = app.db.UTCDateTime(timezone=True)
_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_table(
        "probe_runs",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("deployment", sa.String(128), nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("proxy_url", sa.String(2048), nullable=False),
        sa.Column("team", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("probe_set_version", sa.String(64), nullable=False),
        sa.Column("probe_set_sha256", sa.String(64), nullable=False),
        sa.Column("concurrency", sa.Integer(), nullable=False),
        sa.Column("started_at", _TIME, nullable=False),
        sa.Column("finished_at", _TIME, nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("ok", sa.Integer(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("num_drafts", sa.BigInteger(), nullable=False),
        sa.Column("draft_tokens", sa.BigInteger(), nullable=False),
        sa.Column("accepted_tokens", sa.BigInteger(), nullable=False),
        sa.Column("acceptance_rate", sa.Float(), nullable=True),
        sa.Column("acceptance_histogram", _JSON, nullable=False),
        sa.Column("acceptance_per_position", _JSON, nullable=False),
        sa.Column("tokens_per_s", sa.Float(), nullable=True),
        sa.Column("tpot_p50_ms", sa.Float(), nullable=True),
        sa.Column("tpot_p90_ms", sa.Float(), nullable=True),
        sa.Column("ttft_p50_ms", sa.Float(), nullable=True),
        sa.Column("error", sa.String(512), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_runs")),
    )
    op.create_index(
        "ix_probe_runs_deployment_started_at", "probe_runs", ["deployment", "started_at"]
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.drop_index("ix_probe_runs_deployment_started_at", table_name="probe_runs")
    op.drop_table("probe_runs")
