"""deployments usage sweeps

Revision ID: 0002_usage
Revises: 0001_billing
Create Date: 2026-12-02 11:35:08.114022
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
import app.db

revision: str = '0002_usage'
down_revision: str | None = '0001_billing'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    
    op.create_table('deployments',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('tag_value', sa.String(length=256), nullable=False),
    sa.Column('tier', sa.String(length=32), nullable=True),
    sa.Column('shared_cost_policy', sa.String(length=16), nullable=False),
    sa.Column('shared_cost_team', sa.String(length=128), nullable=True),
    sa.Column('engine_config', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.Column('created_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_deployments')),
    sa.UniqueConstraint('name', name=op.f('uq_deployments_name'))
    )
    op.create_table('replica_idle',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('deployment', sa.String(length=128), nullable=False),
    sa.Column('replica', sa.String(length=128), nullable=False),
    sa.Column('start_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('end_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('gpu_ns', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_replica_idle'))
    )
    with op.batch_alter_table('replica_idle', schema=None) as batch_op:
        batch_op.create_index('ix_replica_idle_replica_start', ['deployment', 'replica', 'start_at'], unique=False)

    op.create_table('sweeps',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('name', sa.String(length=256), nullable=False),
    sa.Column('deployment', sa.String(length=128), nullable=True),
    sa.Column('created_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('settings', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('fit', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sweeps'))
    )
    op.create_table('usage_records',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('event_id', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('team', sa.String(length=128), nullable=True),
    sa.Column('cost_center', sa.String(length=128), nullable=True),
    sa.Column('tags', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.Column('deployment', sa.String(length=128), nullable=False),
    sa.Column('replica', sa.String(length=128), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('endpoint', sa.String(length=32), nullable=False),
    sa.Column('streamed', sa.Boolean(), nullable=False),
    sa.Column('spec_method', sa.String(length=32), nullable=False),
    sa.Column('spec_k', sa.Integer(), nullable=True),
    sa.Column('arrived_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('first_token_at', app.db.UTCDateTime(timezone=True), nullable=True),
    sa.Column('finished_at', app.db.UTCDateTime(timezone=True), nullable=False),
    sa.Column('prompt_tokens', sa.Integer(), nullable=False),
    sa.Column('cached_tokens', sa.Integer(), nullable=False),
    sa.Column('completion_tokens', sa.Integer(), nullable=False),
    sa.Column('num_drafts', sa.Integer(), nullable=False),
    sa.Column('draft_tokens', sa.Integer(), nullable=False),
    sa.Column('accepted_tokens', sa.Integer(), nullable=False),
    sa.Column('gpu_ns', sa.BigInteger(), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('http_status', sa.Integer(), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_usage_records')),
    sa.UniqueConstraint('event_id', name=op.f('uq_usage_records_event_id'))
    )
    with op.batch_alter_table('usage_records', schema=None) as batch_op:
        batch_op.create_index('ix_usage_records_deployment_finished', ['deployment', 'finished_at'], unique=False)
        batch_op.create_index('ix_usage_records_session', ['session_id'], unique=False)
        batch_op.create_index('ix_usage_records_team', ['team'], unique=False)

    op.create_table('replicas',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('deployment_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('name', sa.String(length=128), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('resource_id', sa.String(length=1024), nullable=True),
    sa.Column('base_url', sa.String(length=512), nullable=True),
    sa.ForeignKeyConstraint(['deployment_id'], ['deployments.id'], name=op.f('fk_replicas_deployment_id_deployments'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_replicas')),
    sa.UniqueConstraint('deployment_id', 'name', name=op.f('uq_replicas_deployment_id_name')),
    sa.UniqueConstraint('resource_id', name=op.f('uq_replicas_resource_id'))
    )
    op.create_table('sweep_points',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), autoincrement=True, nullable=False),
    sa.Column('sweep_id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('config', sa.String(length=128), nullable=False),
    sa.Column('method', sa.String(length=32), nullable=False),
    sa.Column('k', sa.Integer(), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('output_tokens_per_s', sa.Float(), nullable=False),
    sa.Column('requests_per_s', sa.Float(), nullable=True),
    sa.Column('tpot_p50_s', sa.Float(), nullable=True),
    sa.Column('metrics', sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), 'postgresql'), nullable=False),
    sa.ForeignKeyConstraint(['sweep_id'], ['sweeps.id'], name=op.f('fk_sweep_points_sweep_id_sweeps'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_sweep_points'))
    )
    with op.batch_alter_table('sweep_points', schema=None) as batch_op:
        batch_op.create_index(batch_op.f('ix_sweep_points_sweep_id'), ['sweep_id'], unique=False)

    


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    
    with op.batch_alter_table('sweep_points', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_sweep_points_sweep_id'))

    op.drop_table('sweep_points')
    op.drop_table('replicas')
    with op.batch_alter_table('usage_records', schema=None) as batch_op:
        batch_op.drop_index('ix_usage_records_team')
        batch_op.drop_index('ix_usage_records_session')
        batch_op.drop_index('ix_usage_records_deployment_finished')

    op.drop_table('usage_records')
    op.drop_table('sweeps')
    with op.batch_alter_table('replica_idle', schema=None) as batch_op:
        batch_op.drop_index('ix_replica_idle_replica_start')

    op.drop_table('replica_idle')
    op.drop_table('deployments')
    
