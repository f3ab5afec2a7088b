"""billing deliveries and rows

Revision ID: 0001_billing
Revises: 
Create Date: 2026-12-02 11:17:06.417353
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
import app.db

revision: str = '0001_billing'
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    
    op.create_table('billing_deliveries',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('source', sa.String(length=512), nullable=False),
    sa.Column('billing_period_start', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('billing_period_end', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('fingerprint', sa.String(length=64), nullable=False),
    sa.Column('files', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('focus_version', sa.String(length=8), nullable=False),
    sa.Column('row_count', sa.Integer(), nullable=False),
    sa.Column('delivered_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('ingested_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('superseded_at', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_billing_deliveries'))
    )
    with op.batch_alter_table('billing_deliveries', schema=None) as batch_op:
        batch_op.create_index('ix_billing_deliveries_source_period', ['source', 'billing_period_start'], unique=False)

    op.create_table('billing_rows',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('delivery_id', sa.BigInteger(), nullable=False),
    sa.Column('source_file', sa.String(length=1024), nullable=False),
    sa.Column('source_row', sa.Integer(), nullable=False),
    sa.Column('billing_period_start', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('billing_period_end', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('charge_period_start', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('charge_period_end', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('billed_cost_micros', sa.BigInteger(), nullable=True),
    sa.Column('effective_cost_micros', sa.BigInteger(), nullable=True),
    sa.Column('list_cost_micros', sa.BigInteger(), nullable=True),
    sa.Column('contracted_cost_micros', sa.BigInteger(), nullable=True),
    sa.Column('billing_currency', sa.String(length=8), nullable=True),
    sa.Column('charge_category', sa.String(length=32), nullable=True),
    sa.Column('charge_class', sa.String(length=32), nullable=True),
    sa.Column('charge_frequency', sa.String(length=32), nullable=True),
    sa.Column('charge_description', sa.Text(), nullable=True),
    sa.Column('pricing_category', sa.String(length=32), nullable=True),
    sa.Column('pricing_quantity', sa.String(length=64), nullable=True),
    sa.Column('pricing_unit', sa.String(length=128), nullable=True),
    sa.Column('consumed_quantity', sa.String(length=64), nullable=True),
    sa.Column('consumed_unit', sa.String(length=128), nullable=True),
    sa.Column('provider_name', sa.String(length=256), nullable=True),
    sa.Column('publisher_name', sa.String(length=256), nullable=True),
    sa.Column('invoice_issuer_name', sa.String(length=256), nullable=True),
    sa.Column('billing_account_id', sa.String(length=256), nullable=True),
    sa.Column('billing_account_name', sa.String(length=256), nullable=True),
    sa.Column('sub_account_id', sa.String(length=256), nullable=True),
    sa.Column('service_category', sa.String(length=64), nullable=True),
    sa.Column('service_name', sa.String(length=256), nullable=True),
    sa.Column('resource_id', sa.String(length=1024), nullable=True),
    sa.Column('resource_type', sa.String(length=256), nullable=True),
    sa.Column('region_id', sa.String(length=64), nullable=True),
    sa.Column('sku_id', sa.String(length=256), nullable=True),
    sa.Column('tags', sa.JSON(), nullable=True),
    sa.Column('focus_columns', sa.JSON(), nullable=False),
    sa.Column('provider_columns', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['delivery_id'], ['billing_deliveries.id'], name=op.f('fk_billing_rows_delivery_id_billing_deliveries'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_billing_rows'))
    )
    with op.batch_alter_table('billing_rows', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_billing_rows_delivery_id'), ['delivery_id'], unique=False)

    


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    
    with op.batch_alter_table('billing_rows', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_billing_rows_delivery_id'))

    op.drop_table('billing_rows')
    with op.batch_alter_table('billing_deliveries', schema=None) as batch_op:
        batch_op.drop_index('ix_billing_deliveries_source_period')

    op.drop_table('billing_deliveries')
    
