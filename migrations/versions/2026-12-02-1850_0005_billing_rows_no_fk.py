"""billing_rows without the foreign key to billing_deliveries

A million-row load paid one referential-integrity lookup per row (about a third of the
PostgreSQL COPY time). Rows are only ever written by the loader, in the transaction that
creates their delivery, and deliveries are never deleted (they are superseded), so the key
guarded nothing the loader does not already guarantee.

Revision ID: 0005_billing_rows_no_fk
Revises: 0004_api_keys
Create Date: 2026-12-02 18:50:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005_billing_rows_no_fk"
down_revision: str | None = "0004_api_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_FK = "fk_billing_rows_delivery_id_billing_deliveries"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("billing_rows", schema=None) as batch_op:
        batch_op.drop_constraint(_FK, type_="foreignkey")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("billing_rows", schema=None) as batch_op:
        batch_op.create_foreign_key(_FK, "billing_deliveries", ["delivery_id"], ["id"],
                                    ondelete="CASCADE")
