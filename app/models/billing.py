"""FOCUS billing as loaded: deliveries (one per source and billing period) and their rows."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Column, Index, Integer, String, Table, Text, join
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, column_property, mapped_column

from app.db import Base, BigIntId, UTCDateTime

JsonType = JSON().with_variant(JSONB(), "postgresql")
# The wide per-row blobs are read back whole, never queried inside: plain JSON (kept as text)
# loads much faster than JSONB on PostgreSQL.
JsonText = JSON()


class BillingDelivery(Base):
    """One delivery of one source's billing period; the newest one per pair is current."""

    __tablename__ = "billing_deliveries"
    __table_args__ = (
        Index("ix_billing_deliveries_source_period", "source", "billing_period_start"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    source: Mapped[str] = mapped_column(String(512))
    """Where the billing came from: ``file:/abs/path``, ``s3://bucket/prefix/export`` or a name."""
    billing_period_start: Mapped[datetime] = mapped_column(UTCDateTime())
    """Inclusive start of the billing period, UTC (FOCUS BillingPeriodStart)."""
    billing_period_end: Mapped[datetime] = mapped_column(UTCDateTime())
    """Exclusive end of the billing period, UTC (FOCUS BillingPeriodEnd)."""
    fingerprint: Mapped[str] = mapped_column(String(64))
    """SHA-256 over the period's normalised rows: equal fingerprints mean nothing changed."""
    files: Mapped[list[str]] = mapped_column(JsonType)
    focus_version: Mapped[str] = mapped_column(String(8))
    row_count: Mapped[int] = mapped_column(Integer)
    delivered_at: Mapped[datetime] = mapped_column(UTCDateTime())
    """When the provider produced the delivery (manifest or file modification time)."""
    ingested_at: Mapped[datetime] = mapped_column(UTCDateTime())
    superseded_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """Set when a newer delivery replaced this one, or it was removed; its rows are then gone."""
    superseded_by: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """The delivery that replaced this one (of the same source, or holding its charges)."""
    removed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """Set when a user removed the delivery (``specledger billing deliveries remove``)."""
    manifest: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    """The AWS Data Exports manifest that listed the files (``s3://...-Manifest.json``)."""
    billing_accounts: Mapped[list[str] | None] = mapped_column(JsonType, nullable=True)
    """The distinct BillingAccountId values of its rows, sorted."""
    totals: Mapped[dict[str, dict[str, int]] | None] = mapped_column(JsonType, nullable=True)
    """currency -> ``billed_cost_micros`` and ``effective_cost_micros`` of its rows."""


# A billing row is stored in two parts: its own values (``billing_rows``: periods, money and
# quantities, which change from row to row) and a reference to what it shares with many other
# rows of its delivery (``billing_row_attributes``: the account, service, SKU, resource, tags
# and every other column, stored once per distinct combination). A typical export has a few
# thousand combinations per million rows, so a load writes a quarter of the bytes.
#
# Neither table has a foreign key, and the rows' delivery index is BRIN on PostgreSQL (rows
# arrive grouped by delivery): a million-row load pays for every index entry and key lookup.
# Only the loader writes both, for one delivery, in one transaction; deliveries are never
# deleted, and every query goes through the (current) deliveries of a billing period first.
billing_row_values = Table(
    "billing_rows",
    Base.metadata,
    Column("id", BigIntId, primary_key=True, autoincrement=True),
    Column("delivery_id", BigInteger, nullable=False),
    Column("attributes_id", BigInteger, nullable=False),
    Column("source_row", Integer, nullable=False),
    Column("charge_period_start", UTCDateTime(), nullable=True),
    Column("charge_period_end", UTCDateTime(), nullable=True),
    Column("billed_cost_micros", BigInteger, nullable=True),
    Column("effective_cost_micros", BigInteger, nullable=True),
    Column("list_cost_micros", BigInteger, nullable=True),
    Column("contracted_cost_micros", BigInteger, nullable=True),
    # What each exact amount is beyond its micros, in picos (app.domain.money).
    Column("effective_cost_residual_picos", BigInteger, nullable=False, server_default="0"),
    Column("billed_cost_residual_picos", BigInteger, nullable=False, server_default="0"),
    Column("list_cost_residual_picos", BigInteger, nullable=False, server_default="0"),
    Column("contracted_cost_residual_picos", BigInteger, nullable=False, server_default="0"),
    Column("pricing_quantity", String(64), nullable=True),
    Column("consumed_quantity", String(64), nullable=True),
    Column("charge_key", BigInteger, nullable=True),
    Index("ix_billing_rows_delivery_id", "delivery_id", postgresql_using="brin"),
)

billing_row_attributes = Table(
    "billing_row_attributes",
    Base.metadata,
    Column("id", BigIntId, primary_key=True, autoincrement=True),
    Column("delivery_id", BigInteger, nullable=False),
    Column("source_file", String(1024), nullable=False),
    Column("billing_period_start", UTCDateTime(), nullable=False),
    Column("billing_period_end", UTCDateTime(), nullable=True),
    Column("billing_currency", String(8), nullable=True),
    Column("charge_category", String(32), nullable=True),
    Column("charge_class", String(32), nullable=True),
    Column("charge_frequency", String(32), nullable=True),
    Column("charge_description", Text, nullable=True),
    Column("pricing_category", String(32), nullable=True),
    Column("pricing_unit", String(128), nullable=True),
    Column("consumed_unit", String(128), nullable=True),
    Column("provider_name", String(256), nullable=True),
    Column("publisher_name", String(256), nullable=True),
    Column("invoice_issuer_name", String(256), nullable=True),
    Column("billing_account_id", String(256), nullable=True),
    Column("billing_account_name", String(256), nullable=True),
    Column("sub_account_id", String(256), nullable=True),
    Column("service_category", String(64), nullable=True),
    Column("service_name", String(256), nullable=True),
    Column("resource_id", String(1024), nullable=True),
    Column("resource_type", String(256), nullable=True),
    Column("region_id", String(64), nullable=True),
    Column("sku_id", String(256), nullable=True),
    Column("tags", JsonText, nullable=True),
    Column("focus_columns", JsonText, nullable=False),
    Column("provider_columns", JsonText, nullable=False),
    Index("ix_billing_row_attributes_delivery_id", "delivery_id"),
)


class BillingRow(Base):
    """One FOCUS cost-and-usage row, normalised, as read (the join of its two parts; the
    loader writes the parts). Money in integer micros of billing_currency."""

    __table__ = join(
        billing_row_values,
        billing_row_attributes,
        billing_row_values.c.attributes_id == billing_row_attributes.c.id,
    )
    __mapper_args__ = {"primary_key": [billing_row_values.c.id]}  # noqa: RUF012

    id: Mapped[int] = column_property(billing_row_values.c.id)
    delivery_id: Mapped[int] = column_property(
        billing_row_values.c.delivery_id, billing_row_attributes.c.delivery_id
    )
    attributes_id: Mapped[int] = column_property(
        billing_row_values.c.attributes_id, billing_row_attributes.c.id
    )
    source_file: Mapped[str]
    source_row: Mapped[int]
    """1-based data row number in ``source_file`` (the header is not counted)."""

    billing_period_start: Mapped[datetime]
    billing_period_end: Mapped[datetime | None]
    charge_period_start: Mapped[datetime | None]
    """Inclusive start of the charge period, UTC (FOCUS ChargePeriodStart)."""
    charge_period_end: Mapped[datetime | None]
    """Exclusive end of the charge period, UTC (FOCUS ChargePeriodEnd)."""

    billed_cost_micros: Mapped[int | None]
    """Invoiced amount (FOCUS BilledCost) in millionths of billing_currency; negative for credits."""
    effective_cost_micros: Mapped[int | None]
    """Amortised amount (FOCUS EffectiveCost) in millionths of billing_currency."""
    list_cost_micros: Mapped[int | None]
    contracted_cost_micros: Mapped[int | None]
    effective_cost_residual_picos: Mapped[int]
    """What the exact EffectiveCost is beyond its micros, in picos (``app.domain.money``)."""
    billed_cost_residual_picos: Mapped[int]
    list_cost_residual_picos: Mapped[int]
    contracted_cost_residual_picos: Mapped[int]
    billing_currency: Mapped[str | None]

    charge_category: Mapped[str | None]
    charge_class: Mapped[str | None]
    charge_frequency: Mapped[str | None]
    charge_description: Mapped[str | None]
    pricing_category: Mapped[str | None]
    pricing_quantity: Mapped[str | None]
    """Decimal text, kept exact (FOCUS PricingQuantity)."""
    pricing_unit: Mapped[str | None]
    consumed_quantity: Mapped[str | None]
    """Decimal text, kept exact (FOCUS ConsumedQuantity)."""
    charge_key: Mapped[int | None]
    """The row's charge identity (``ingest.charge_identity``): equal in two deliveries, the
    same charge is loaded twice."""
    consumed_unit: Mapped[str | None]

    provider_name: Mapped[str | None]
    publisher_name: Mapped[str | None]
    invoice_issuer_name: Mapped[str | None]
    billing_account_id: Mapped[str | None]
    billing_account_name: Mapped[str | None]
    sub_account_id: Mapped[str | None]
    service_category: Mapped[str | None]
    service_name: Mapped[str | None]
    resource_id: Mapped[str | None]
    resource_type: Mapped[str | None]
    region_id: Mapped[str | None]
    sku_id: Mapped[str | None]

    tags: Mapped[dict[str, Any] | None]
    """Finalised tags as a flat object; ``user:`` prefixes removed."""
    focus_columns: Mapped[dict[str, Any]]
    """Every other FOCUS column of the row, by its FOCUS name, as text."""
    provider_columns: Mapped[dict[str, Any]]
    """The provider's ``x_`` columns, by name."""
