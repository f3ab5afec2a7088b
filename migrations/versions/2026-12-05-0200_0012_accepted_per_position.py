"""per-request acceptance histogram on usage records

``usage_records.accepted_hist`` keeps vLLM's per-request ``acceptance_histogram`` (from
``metrics.speculative_decoding`` with ``--per-request-spec-decode-metrics``): a list of
``k + 1`` counts, entry ``j`` the verification steps that accepted exactly ``j`` drafted
tokens. Summed per deployment it gives the acceptance of each draft position
(``app.speculation.rules.positions``). NULL for records without it (no speculation, an
older server, ``n > 1``, records written before this revision).

Revision ID: 0012_accepted_per_position
Revises: 0011_slurm
Create Date: 2026-12-05 02:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0012_accepted_per_position"
down_revision: str | None = "0011_slurm"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(JSONB(), "postgresql")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    # A nullable column without a default: PostgreSQL adds it without rewriting the table.
    with op.batch_alter_table("usage_records") as batch:
        batch.add_column(sa.Column("accepted_hist", _JSON, nullable=True))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("usage_records") as batch:
        batch.drop_column("accepted_hist")
