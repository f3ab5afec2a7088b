"""indexes for team-scoped and per-request reads

A team's reads joined its usage records to their ledger entries by ``event_id``, which had no
index on ``ledger_entries``: SQLite ran the join as a loop over the team's requests, each
reading the whole month's entries (quadratic: 200 s for 40,000 requests). Entries get an index
on ``(event_id, run_id)`` and one on ``(team, run_id)`` for a team's entries of a run; the
index on ``run_id`` stays as it is, for the reads of a whole run (on SQLite an index of
``(run_id, team)`` in its place read a whole run in team order, about four times slower than
in the order it was written). Usage's index on ``team`` becomes ``(team, arrived_at)``, so a
team's window is a range. The entries have two indexes more than before: each slows the bulk
write of a run.

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
    op.create_index("ix_ledger_entries_team_run", "ledger_entries", ["team", "run_id"])
    op.create_index("ix_usage_records_team_arrived", "usage_records", ["team", "arrived_at"])
    op.drop_index("ix_usage_records_team", table_name="usage_records")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    op.create_index("ix_usage_records_team", "usage_records", ["team"])
    op.drop_index("ix_usage_records_team_arrived", table_name="usage_records")
    op.drop_index("ix_ledger_entries_team_run", table_name="ledger_entries")
    op.drop_index("ix_ledger_entries_event_id", table_name="ledger_entries")
