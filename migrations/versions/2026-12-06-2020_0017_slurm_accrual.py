"""slurm_jobs.accrued_until: a running job's GPU-seconds accrue up to the end of each read

A job still running when a cluster is read is metered up to the end of the window read
(``accrued_until``); when it has ended it is trued up to GPUs x ElapsedRaw, and a month closed
in between gets adjusting entries as for a restated bill. None for a job not accrued.

Revision ID: 0017_slurm_accrual
Revises: 0016_deliveries_details
Create Date: 2026-12-06 20:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0017_slurm_accrual"
down_revision: str | None = "0016_deliveries_details"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("slurm_jobs") as batch:
        batch.add_column(
            sa.Column("accrued_until", app.db.UTCDateTime(timezone=True), nullable=True)
        )


def downgrade() -> None:
    with op.batch_alter_table("slurm_jobs") as batch:
        batch.drop_column("accrued_until")
