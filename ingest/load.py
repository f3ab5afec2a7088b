"""Idempotent load of one source's billing period: replace it as a whole, in the caller's
transaction.

A period is first judged (unchanged, stale, new or a replacement) from its fingerprint alone,
then opened when its first rows arrive, filled chunk by chunk, and closed with its row count.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

import numpy as np
import pyarrow as pa
from sqlalchemy import Connection, delete, insert, select, update

from app.domain.focus import ATTRIBUTE_COLUMNS, VALUE_COLUMNS
from app.kit.bulk import bulk_insert, reserve_ids
from app.models import BillingDelivery
from app.models.billing import billing_row_attributes, billing_row_values

STORED_ATTRIBUTES = ("source_file", *ATTRIBUTE_COLUMNS)


class LoadAction(StrEnum):
    inserted = "inserted"  # first delivery of this source and period
    replaced = "replaced"  # a newer delivery replaced the previous one
    unchanged = "unchanged"  # the same delivery again: nothing written
    stale = "stale"  # older than the stored delivery: skipped

    @property
    def writes(self) -> bool:
        return self in (LoadAction.inserted, LoadAction.replaced)


@dataclass(frozen=True, slots=True)
class PeriodDelivery:
    """What one source delivered for one billing period, apart from the rows themselves."""

    source: str
    billing_period_start: datetime
    fingerprint: str
    files: tuple[str, ...]
    focus_version: str
    delivered_at: datetime
    manifest: str | None = None
    """The AWS Data Exports manifest that listed the files."""


@dataclass(frozen=True, slots=True)
class Decision:
    action: LoadAction
    current_id: int | None
    """The stored delivery a replacement supersedes."""


def decide(conn: Connection, delivery: PeriodDelivery, *, force: bool = False) -> Decision:
    """Keep the current delivery of the same source and period when it has the same
    fingerprint (unchanged) or is newer (stale input, unless ``force``); else write."""
    current = conn.execute(
        select(BillingDelivery.id, BillingDelivery.fingerprint, BillingDelivery.delivered_at).where(
            BillingDelivery.source == delivery.source,
            BillingDelivery.billing_period_start == delivery.billing_period_start,
            BillingDelivery.superseded_at.is_(None),
        )
    ).one_or_none()
    if current is None:
        return Decision(LoadAction.inserted, None)
    if current.fingerprint == delivery.fingerprint:
        return Decision(LoadAction.unchanged, current.id)
    if current.delivered_at > delivery.delivered_at and not force:
        return Decision(LoadAction.stale, current.id)
    return Decision(LoadAction.replaced, current.id)


def open_delivery(
    conn: Connection, delivery: PeriodDelivery, decision: Decision, *, now: datetime
) -> int:
    """Supersede the current delivery (deleting its rows) and insert the new one; its id."""
    new_id = int(
        conn.execute(
            insert(BillingDelivery)
            .values(
                source=delivery.source,
                billing_period_start=delivery.billing_period_start,
                billing_period_end=delivery.billing_period_start,  # set by close_delivery
                fingerprint=delivery.fingerprint,
                files=list(delivery.files),
                focus_version=delivery.focus_version,
                row_count=0,
                delivered_at=delivery.delivered_at,
                ingested_at=now,
                manifest=delivery.manifest,
            )
            .returning(BillingDelivery.id)
        ).scalar_one()
    )
    if decision.action is LoadAction.replaced and decision.current_id is not None:
        supersede(conn, decision.current_id, by=new_id, now=now)
    return new_id


def supersede(conn: Connection, delivery_id: int, *, by: int, now: datetime) -> None:
    """Mark a delivery replaced by delivery ``by`` and delete its rows."""
    for table in (billing_row_values, billing_row_attributes):
        conn.execute(delete(table).where(table.c.delivery_id == delivery_id))
    conn.execute(
        update(BillingDelivery)
        .where(BillingDelivery.id == delivery_id)
        .values(superseded_at=now, superseded_by=by)
    )


def insert_rows(conn: Connection, delivery_id: int, values: pa.Table, attributes: pa.Table) -> None:
    """Normalised rows: their values (``VALUE_COLUMNS`` and ``attributes_index``, a row of
    ``attributes``, which has ``STORED_ATTRIBUTES``), and the attribute combinations they
    use. A combination is stored once per call (per chunk of a file): looking for it among
    the delivery's earlier chunks would cost more than the few thousand rows it saves."""
    used = np.unique(values["attributes_index"].to_numpy())
    ids = reserve_ids(conn, "billing_row_attributes", len(used))
    bulk_insert(
        conn,
        "billing_row_attributes",
        attributes.select(STORED_ATTRIBUTES)
        .take(pa.array(used))
        .append_column("id", pa.array(ids))
        .append_column("delivery_id", _repeat(delivery_id, len(used))),
    )
    attribute_id = np.zeros(attributes.num_rows, np.int64)
    attribute_id[used] = ids
    bulk_insert(
        conn,
        "billing_rows",
        values.select([*VALUE_COLUMNS, "charge_key"])
        .append_column("delivery_id", _repeat(delivery_id, values.num_rows))
        .append_column(
            "attributes_id", pa.array(attribute_id[values["attributes_index"].to_numpy()])
        ),
    )


def _repeat(value: int, count: int) -> pa.Array:
    return pa.array(np.full(count, value, np.int64))


def close_delivery(
    conn: Connection,
    delivery_id: int,
    *,
    row_count: int,
    billing_period_end: datetime,
    billing_accounts: list[str],
    totals: dict[str, dict[str, int]],
) -> None:
    conn.execute(
        update(BillingDelivery)
        .where(BillingDelivery.id == delivery_id)
        .values(
            row_count=row_count,
            billing_period_end=billing_period_end,
            billing_accounts=billing_accounts,
            totals=totals,
        )
    )
