"""FOCUS billing as loaded: deliveries (one per source and billing period) and their rows."""

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Text
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

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
    """Set when a newer delivery replaced this one; its rows are then gone."""


class BillingRow(Base):
    """One FOCUS cost-and-usage row, normalised. Money in integer micros of billing_currency."""

    __tablename__ = "billing_rows"
    # Only the delivery index (BRIN on PostgreSQL: rows arrive grouped by delivery) and no
    # foreign key: a million-row load pays for every index entry and key lookup, and every
    # query goes through the (current) deliveries of a billing period first. Only the loader
    # writes rows, with their delivery, in one transaction; deliveries are never deleted.
    __table_args__ = (
        Index("ix_billing_rows_delivery_id", "delivery_id", postgresql_using="brin"),
    )

    id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=True)
    delivery_id: Mapped[int] = mapped_column(BigInteger)
    source_file: Mapped[str] = mapped_column(String(1024))
    source_row: Mapped[int] = mapped_column(Integer)
    """1-based data row number in ``source_file`` (the header is not counted)."""

    billing_period_start: Mapped[datetime] = mapped_column(UTCDateTime())
    billing_period_end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    charge_period_start: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """Inclusive start of the charge period, UTC (FOCUS ChargePeriodStart)."""
    charge_period_end: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    """Exclusive end of the charge period, UTC (FOCUS ChargePeriodEnd)."""

    billed_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """Invoiced amount (FOCUS BilledCost) in millionths of billing_currency; negative for credits."""
    effective_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    """Amortised amount (FOCUS EffectiveCost) in millionths of billing_currency."""
    list_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    contracted_cost_micros: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    billing_currency: Mapped[str | None] = mapped_column(String(8), nullable=True)

    charge_category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    charge_class: Mapped[str | None] = mapped_column(String(32), nullable=True)
    charge_frequency: Mapped[str | None] = mapped_column(String(32), nullable=True)
    charge_description: Mapped[str | None] = mapped_column(Text, nullable=True)
    pricing_category: Mapped[str | None] = mapped_column(String(32), nullable=True)
    pricing_quantity: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Decimal text, kept exact (FOCUS PricingQuantity)."""
    pricing_unit: Mapped[str | None] = mapped_column(String(128), nullable=True)
    consumed_quantity: Mapped[str | None] = mapped_column(String(64), nullable=True)
    """Decimal text, kept exact (FOCUS ConsumedQuantity)."""
    consumed_unit: Mapped[str | None] = mapped_column(String(128), nullable=True)

    provider_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    publisher_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    invoice_issuer_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    billing_account_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    billing_account_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    sub_account_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    service_category: Mapped[str | None] = mapped_column(String(64), nullable=True)
    service_name: Mapped[str | None] = mapped_column(String(256), nullable=True)
    resource_id: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    resource_type: Mapped[str | None] = mapped_column(String(256), nullable=True)
    region_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    sku_id: Mapped[str | None] = mapped_column(String(256), nullable=True)

    tags: Mapped[dict[str, Any] | None] = mapped_column(JsonText, nullable=True)
    """Finalised tags as a flat object; ``user:`` prefixes removed."""
    focus_columns: Mapped[dict[str, Any]] = mapped_column(JsonText)
    """Every other FOCUS column of the row, by its FOCUS name, as text."""
    provider_columns: Mapped[dict[str, Any]] = mapped_column(JsonText)
    """The provider's ``x_`` columns, by name."""
