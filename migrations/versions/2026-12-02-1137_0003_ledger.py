"""ledger

Revision ID: 0003_ledger
Revises: 0002_usage
Create Date: 2026-12-02 11:37:33.787735
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
import app.db

revision: str = '0003_ledger'
down_revision: str | None = '0002_usage'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    
    op.create_table('allocation_runs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('month', sa.String(length=7), nullable=True),
    sa.Column('window_start', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('window_end', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('share_idle', sa.Boolean(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('created_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('replaced_at', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('entry_count', sa.Integer(), nullable=False),
    sa.Column('summary', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_allocation_runs'))
    )
    with op.batch_alter_table('allocation_runs', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_allocation_runs_month'), ['month'], unique=False)

    op.create_table('ledger_closures',
    sa.Column('month', sa.String(length=7), nullable=False),
    sa.Column('closed_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('run_id', sa.BigInteger(), nullable=False),
    sa.Column('billing_fingerprint', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['run_id'], ['allocation_runs.id'], name=op.f('fk_ledger_closures_run_id_allocation_runs')),
    sa.PrimaryKeyConstraint('month', name=op.f('pk_ledger_closures'))
    )
    op.create_table('ledger_entries',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('run_id', sa.BigInteger(), nullable=False),
    sa.Column('booked_month', sa.String(length=7), nullable=False),
    sa.Column('corrects_month', sa.String(length=7), nullable=True),
    sa.Column('kind', sa.String(length=16), nullable=False),
    sa.Column('method', sa.String(length=32), nullable=False),
    sa.Column('billing_row_id', sa.BigInteger(), nullable=True),
    sa.Column('charge_period_start', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('charge_period_end', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('deployment', sa.String(length=128), nullable=True),
    sa.Column('replica', sa.String(length=128), nullable=True),
    sa.Column('event_id', sa.String(length=64), nullable=True),
    sa.Column('session_id', sa.String(length=128), nullable=True),
    sa.Column('team', sa.String(length=128), nullable=True),
    sa.Column('gpu_ns', sa.BigInteger(), nullable=False),
    sa.Column('effective_cost_micros', sa.BigInteger(), nullable=False),
    sa.Column('billed_cost_micros', sa.BigInteger(), nullable=False),
    sa.Column('currency', sa.String(length=8), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ledger_entries'))
    )
    with op.batch_alter_table('ledger_entries', schema=None) as batch_op:
        batch_op.create_index('ix_ledger_entries_month_kind', ['booked_month', 'kind'], unique=False)
        batch_op.create_index(batch_op.f('ix_ledger_entries_run_id'), ['run_id'], unique=False)
    _create_triggers()



# A closed month is immutable, enforced by the database itself so that no code path (or a
# hand-written SQL statement) can change it: UPDATE and DELETE of its entries are refused.
# Inserts are not checked row by row (a per-row trigger made bulk writes 5x slower); the
# allocation refuses closed months, and the closure row itself cannot be removed.
_SQLITE_TRIGGERS = [
    """CREATE TRIGGER ledger_entries_closed_no_update BEFORE UPDATE ON ledger_entries
       WHEN EXISTS (SELECT 1 FROM ledger_closures WHERE month = OLD.booked_month)
       BEGIN SELECT RAISE(ABORT, 'ledger month is closed'); END""",
    """CREATE TRIGGER ledger_entries_closed_no_delete BEFORE DELETE ON ledger_entries
       WHEN EXISTS (SELECT 1 FROM ledger_closures WHERE month = OLD.booked_month)
       BEGIN SELECT RAISE(ABORT, 'ledger month is closed'); END""",
    """CREATE TRIGGER ledger_closures_no_delete BEFORE DELETE ON ledger_closures
       BEGIN SELECT RAISE(ABORT, 'ledger month is closed'); END""",
    """CREATE TRIGGER ledger_closures_no_update BEFORE UPDATE ON ledger_closures
       BEGIN SELECT RAISE(ABORT, 'ledger month is closed'); END""",
]
_POSTGRES_TRIGGERS = [
    """CREATE FUNCTION ledger_refuse_closed() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN
         IF TG_OP = 'TRUNCATE' THEN
           IF EXISTS (SELECT 1 FROM ledger_closures) THEN
             RAISE EXCEPTION 'ledger has closed months';
           END IF;
           RETURN NULL;
         END IF;
         IF TG_TABLE_NAME = 'ledger_closures' THEN
           RAISE EXCEPTION 'ledger month % is closed', OLD.month;
         END IF;
         IF TG_OP IN ('UPDATE', 'DELETE') AND EXISTS (
             SELECT 1 FROM ledger_closures WHERE month = OLD.booked_month) THEN
           RAISE EXCEPTION 'ledger month % is closed', OLD.booked_month;
         END IF;
         IF TG_OP = 'UPDATE' AND EXISTS (
             SELECT 1 FROM ledger_closures WHERE month = NEW.booked_month) THEN
           RAISE EXCEPTION 'ledger month % is closed', NEW.booked_month;
         END IF;
         RETURN CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
       END $$""",
    """CREATE TRIGGER ledger_entries_closed BEFORE UPDATE OR DELETE ON ledger_entries
       FOR EACH ROW EXECUTE FUNCTION ledger_refuse_closed()""",
    """CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
       FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_closed()""",
    """CREATE TRIGGER ledger_closures_frozen BEFORE UPDATE OR DELETE ON ledger_closures
       FOR EACH ROW EXECUTE FUNCTION ledger_refuse_closed()""",
]


def _create_triggers() -> None:
    dialect = op.get_bind().dialect.name
    for statement in _POSTGRES_TRIGGERS if dialect == "postgresql" else _SQLITE_TRIGGERS:
        op.execute(statement)


def _drop_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS ledger_entries_closed ON ledger_entries")
        op.execute("DROP TRIGGER IF EXISTS ledger_entries_no_truncate ON ledger_entries")
        op.execute("DROP TRIGGER IF EXISTS ledger_closures_frozen ON ledger_closures")
        op.execute("DROP FUNCTION IF EXISTS ledger_refuse_closed()")
    else:
        for name in ("ledger_entries_closed_no_update", "ledger_entries_closed_no_delete",
                     "ledger_closures_no_delete",
                     "ledger_closures_no_update"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    _drop_triggers()
    
    with op.batch_alter_table('ledger_entries', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_ledger_entries_run_id'))
        batch_op.drop_index('ix_ledger_entries_month_kind')

    op.drop_table('ledger_entries')
    op.drop_table('ledger_closures')
    with op.batch_alter_table('allocation_runs', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_allocation_runs_month'))

    op.drop_table('allocation_runs')
    
