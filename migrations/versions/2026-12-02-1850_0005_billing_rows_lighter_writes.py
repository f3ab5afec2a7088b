"""billing_rows: no foreign key to billing_deliveries; a BRIN delivery index on PostgreSQL

A million-row load paid one referential-integrity lookup per row (about a third of the
PostgreSQL COPY time) and a B-tree insert per row. Rows are only ever written by the loader,
in the transaction that creates their delivery, and deliveries are never deleted (they are
superseded), so the key guarded nothing the loader does not already guarantee. Rows arrive
grouped by delivery, which is the case BRIN indexes serve at almost no write cost.

Revision ID: 0005_billing_rows_lighter_writes
Revises: 0004_api_keys
Create Date: 2026-12-02 18:50:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005_billing_rows_lighter_writes"
down_revision: str | None = "0004_api_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FK = "fk_billing_rows_delivery_id_billing_deliveries"
_INDEX = "ix_billing_rows_delivery_id"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("billing_rows", schema=None) as batch_op:
        batch_op.drop_constraint(_FK, type_="foreignkey")
        batch_op.drop_index(_INDEX)
        batch_op.create_index(_INDEX, ["delivery_id"], unique=False, postgresql_using="brin")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("billing_rows", schema=None) as batch_op:
        batch_op.drop_index(_INDEX)
        batch_op.create_index(_INDEX, ["delivery_id"], unique=False)
        batch_op.create_foreign_key(_FK, "billing_deliveries", ["delivery_id"], ["id"],
                                    ondelete="CASCADE")
