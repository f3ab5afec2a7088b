"""indexes for team-scoped and per-request reads

A team's reads joined its usage records to their ledger entries by ``event_id``, which had no
index on ``ledger_entries``: SQLite ran the join as a loop over the team's requests, each
reading the whole month's entries (quadratic: 200 s for 40,000 requests). Entries get an index
on ``(event_id, run_id)``; the one on ``run_id`` becomes ``(run_id, team)``, which serves the
run's reads as before and a team's entries of a run directly; usage's index on ``team``
becomes ``(team, arrived_at)``, so a team's window is a range. The entries keep two indexes
besides the month's, one more than before (each slows the run's bulk write).

Revision ID: 0015_read_indexes
Revises: 0014_engine_memory
Create Date: 2026-12-06 02:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0015_read_indexes"
down_revision: str | None = "0014_engine_memory"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_index("ix_ledger_entries_event_id", "ledger_entries", ["event_id", "run_id"])
    op.create_index("ix_ledger_entries_run_team", "ledger_entries", ["run_id", "team"])
    op.drop_index("ix_ledger_entries_run_id", table_name="ledger_entries")
    op.create_index("ix_usage_records_team_arrived", "usage_records", ["team", "arrived_at"])
    op.drop_index("ix_usage_records_team", table_name="usage_records")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_index("ix_usage_records_team", "usage_records", ["team"])
    op.drop_index("ix_usage_records_team_arrived", table_name="usage_records")
    op.create_index("ix_ledger_entries_run_id", "ledger_entries", ["run_id"])
    op.drop_index("ix_ledger_entries_run_team", table_name="ledger_entries")
    op.drop_index("ix_ledger_entries_event_id", table_name="ledger_entries")
