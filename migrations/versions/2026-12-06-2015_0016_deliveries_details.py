"""billing deliveries in detail: charge keys, replacement, removal, manifest, accounts, totals

Every billing row gains ``charge_key``, its charge identity (``ingest.charge_identity``), so
that the same charges loaded twice under two names are recognised. A delivery gains the
delivery that replaced it (``superseded_by``), when a user removed it (``removed_at``), the
AWS Data Exports manifest that listed its files, its billing accounts and its totals per
currency. The rows and deliveries already stored are filled in from their stored columns.

Revision ID: 0016_deliveries_details
Revises: 0015_read_indexes
Create Date: 2026-12-06 20:15:00
"""

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db
from ingest.charge_identity import (
    TYPED_IDENTITY,
    VALUE_IDENTITY,
    attribute_digest,
    charge_keys,
)

revision: str = "0016_deliveries_details"
down_revision: str | None = "0015_read_indexes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
_BATCH = 20_000


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("billing_rows") as batch:
        batch.add_column(sa.Column("charge_key", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("billing_deliveries") as batch:
        batch.add_column(sa.Column("superseded_by", sa.BigInteger(), nullable=True))
        batch.add_column(
            sa.Column("removed_at", app.db.UTCDateTime(timezone=True), nullable=True)
        )
        batch.add_column(sa.Column("manifest", sa.String(length=1024), nullable=True))
        batch.add_column(sa.Column("billing_accounts", _JSON, nullable=True))
        batch.add_column(sa.Column("totals", _JSON, nullable=True))
    _fill_in(op.get_bind())


def _fill_in(conn: sa.Connection) -> None:
    """Charge keys, accounts and totals of the rows already stored, delivery by delivery."""
    attributes = sa.table(
        "billing_row_attributes",
        sa.column("id"),
        sa.column("delivery_id"),
        *(sa.column(name) for name in TYPED_IDENTITY if name != "billing_period_start"),
        sa.column("billing_period_start", app.db.UTCDateTime()),
        sa.column("focus_columns", sa.JSON()),
        sa.column("provider_columns", sa.JSON()),
    )
    rows = sa.table(
        "billing_rows",
        sa.column("id"),
        sa.column("delivery_id"),
        sa.column("attributes_id"),
        sa.column("charge_period_start", app.db.UTCDateTime()),
        sa.column("charge_period_end", app.db.UTCDateTime()),
        sa.column("billed_cost_micros"),
        sa.column("effective_cost_micros"),
        sa.column("charge_key"),
    )
    deliveries = sa.table(
        "billing_deliveries",
        sa.column("id"),
        sa.column("billing_accounts", sa.JSON()),
        sa.column("totals", sa.JSON()),
    )
    ids = conn.scalars(sa.select(deliveries.c.id).order_by(deliveries.c.id)).all()
    for delivery_id in ids:
        digests: dict[int, int] = {}
        accounts: set[str] = set()
        currency_of: dict[int, str] = {}
        for combination in conn.execute(
            sa.select(attributes).where(attributes.c.delivery_id == delivery_id)
        ).mappings():
            digests[combination["id"]] = attribute_digest(combination)
            if combination["billing_account_id"] is not None:
                accounts.add(combination["billing_account_id"])
            currency_of[combination["id"]] = combination["billing_currency"] or ""
        totals: dict[str, dict[str, int]] = defaultdict(
            lambda: {"billed_cost_micros": 0, "effective_cost_micros": 0}
        )
        stored = conn.execute(
            sa.select(rows.c.id, rows.c.attributes_id, *(rows.c[n] for n in VALUE_IDENTITY))
            .where(rows.c.delivery_id == delivery_id)
            .order_by(rows.c.id)
        ).all()
        for first in range(0, len(stored), _BATCH):
            batch = stored[first : first + _BATCH]
            keys = _keys(batch, digests)
            conn.execute(
                rows.update().where(rows.c.id == sa.bindparam("row_id")),
                [
                    {"row_id": row[0], "charge_key": int(key)}
                    for row, key in zip(batch, keys, strict=True)
                ],
            )
            for row in batch:
                line = totals[currency_of.get(row[1], "")]
                line["billed_cost_micros"] += int(row[4] or 0)
                line["effective_cost_micros"] += int(row[5] or 0)
        conn.execute(
            deliveries.update()
            .where(deliveries.c.id == delivery_id)
            .values(billing_accounts=sorted(accounts), totals=dict(totals))
        )


def _keys(batch: Sequence[Any], digests: dict[int, int]) -> Any:
    values = pa.table(
        {
            "charge_period_start": pa.array([r[2] for r in batch], pa.timestamp("us", tz="UTC")),
            "charge_period_end": pa.array([r[3] for r in batch], pa.timestamp("us", tz="UTC")),
            "billed_cost_micros": pa.array([r[4] for r in batch], pa.int64()),
            "effective_cost_micros": pa.array([r[5] for r in batch], pa.int64()),
        }
    )
    return charge_keys(np.array([digests[r[1]] for r in batch], dtype=np.uint64), values)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("SET LOCAL lock_timeout = '5s'")
    with op.batch_alter_table("billing_deliveries") as batch:
        for name in ("totals", "billing_accounts", "manifest", "removed_at", "superseded_by"):
            batch.drop_column(name)
    with op.batch_alter_table("billing_rows") as batch:
        batch.drop_column("charge_key")
