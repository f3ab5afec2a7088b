"""Slurm job accounting

``slurm_jobs`` holds what ``sacct`` reported per job allocation and step, one row per run
(a requeued job runs more than once); ``slurm_ingests`` logs each read of a cluster. A
replica may name the Slurm job it runs in (``replicas.slurm_job``): the job's share of its
nodes is then split again to the replica's metered requests.

Revision ID: 0011_slurm
Revises: 0010_proxy_keys_budgets
Create Date: 2026-12-05 01:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

import app.db

revision: str = "0011_slurm"
down_revision: str | None = "0010_proxy_keys_budgets"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
_TIME = app.db.UTCDateTime(timezone=True)
_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_table(
        "slurm_jobs",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("job", sa.String(64), nullable=False),
        sa.Column("step", sa.String(64), nullable=False),
        sa.Column("job_id_raw", sa.String(64), nullable=False),
        sa.Column("array_job_id", sa.String(64), nullable=True),
        sa.Column("array_task_id", sa.String(64), nullable=True),
        sa.Column("het_job_id", sa.String(64), nullable=True),
        sa.Column("het_offset", sa.Integer(), nullable=True),
        sa.Column("name", sa.String(256), nullable=False),
        sa.Column("account", sa.String(128), nullable=True),
        sa.Column("user_name", sa.String(128), nullable=True),
        sa.Column("partition", sa.String(128), nullable=True),
        sa.Column("qos", sa.String(128), nullable=True),
        sa.Column("state", sa.String(32), nullable=False),
        sa.Column("state_reason", sa.String(128), nullable=True),
        sa.Column("submit_at", _TIME, nullable=True),
        sa.Column("start_at", _TIME, nullable=False),
        sa.Column("end_at", _TIME, nullable=True),
        sa.Column("elapsed_s", sa.BigInteger(), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("gpu_seconds", sa.BigInteger(), nullable=False),
        sa.Column("nodes", _JSON, nullable=False),
        sa.Column("alloc_tres", _JSON, nullable=False),
        sa.Column("usage_in_tot", _JSON, nullable=False),
        sa.Column("metered", sa.Boolean(), nullable=False),
        sa.Column("updated_at", _TIME, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slurm_jobs")),
        sa.UniqueConstraint(
            "cluster", "job", "step", "start_at", name=op.f("uq_slurm_jobs_cluster_job_step_start_at")
        ),
    )
    op.create_table(
        "slurm_ingests",
        sa.Column("id", _ID, autoincrement=True, nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("window_start", _TIME, nullable=False),
        sa.Column("window_end", _TIME, nullable=False),
        sa.Column("ran_at", _TIME, nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("jobs_new", sa.Integer(), nullable=False),
        sa.Column("jobs_updated", sa.Integer(), nullable=False),
        sa.Column("usage_records", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_slurm_ingests")),
    )
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.add_column(sa.Column("slurm_job", sa.String(200), nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("replicas", schema=None) as batch_op:
        batch_op.drop_column("slurm_job")
    op.drop_table("slurm_ingests")
    op.drop_table("slurm_jobs")
