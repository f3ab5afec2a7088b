"""Idempotent load of one source's billing period: replace it as a whole, in one transaction."""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import pyarrow as pa
from sqlalchemy import Connection, delete, insert, select, update

from app.bulk import bulk_insert
from app.models import BillingDelivery, BillingRow
from ingest.normalize import OUTPUT_COLUMNS


class LoadAction(StrEnum):
    inserted = "inserted"        # first delivery of this source and period
    replaced = "replaced"        # a newer delivery replaced the previous one
    unchanged = "unchanged"      # the same delivery again: nothing written
    stale = "stale"              # older than the stored delivery: skipped


@dataclass(frozen=True, slots=True)
class PeriodDelivery:
    """Everything one source delivered for one billing period."""

    source: str
    billing_period_start: datetime
    billing_period_end: datetime
    fingerprint: str
    files: tuple[str, ...]
    focus_version: str
    delivered_at: datetime
    rows: pa.Table
    """Normalised rows (see ``ingest.normalize.OUTPUT_COLUMNS``) plus ``source_file``."""


def load_period(conn: Connection, delivery: PeriodDelivery, *, now: datetime,
                force: bool = False) -> LoadAction:
    """Write one period's delivery inside the caller's transaction.

    The current delivery of the same source and period is kept when it has the same
    fingerprint (unchanged) or is newer (stale input, unless ``force``); otherwise it is
    marked superseded and its rows are deleted before the new rows go in.
    """
    current = conn.execute(
        select(BillingDelivery.id, BillingDelivery.fingerprint, BillingDelivery.delivered_at)
        .where(BillingDelivery.source == delivery.source,
               BillingDelivery.billing_period_start == delivery.billing_period_start,
               BillingDelivery.superseded_at.is_(None))
    ).one_or_none()
    if current is not None:
        if current.fingerprint == delivery.fingerprint:
            return LoadAction.unchanged
        if current.delivered_at > delivery.delivered_at and not force:
            return LoadAction.stale
        conn.execute(delete(BillingRow).where(BillingRow.delivery_id == current.id))
        conn.execute(update(BillingDelivery).where(BillingDelivery.id == current.id)
                     .values(superseded_at=now))
    delivery_id = conn.execute(
        insert(BillingDelivery).values(
            source=delivery.source,
            billing_period_start=delivery.billing_period_start,
            billing_period_end=delivery.billing_period_end,
            fingerprint=delivery.fingerprint,
            files=list(delivery.files),
            focus_version=delivery.focus_version,
            row_count=delivery.rows.num_rows,
            delivered_at=delivery.delivered_at,
            ingested_at=now,
        ).returning(BillingDelivery.id)
    ).scalar_one()
    rows = delivery.rows.append_column(
        "delivery_id", pa.array([delivery_id] * delivery.rows.num_rows, pa.int64())
    )
    _bulk_insert(conn, rows)
    return LoadAction.inserted if current is None else LoadAction.replaced


def _bulk_insert(conn: Connection, rows: pa.Table) -> None:
    bulk_insert(conn, "billing_rows", rows.select(["delivery_id", "source_file", *OUTPUT_COLUMNS]))
