"""Billing deliveries as objects: list and show them, find the charges two of them both hold,
and remove one (in a closed month only as a restatement)."""

from dataclasses import dataclass
from datetime import datetime
from itertools import combinations

import numpy as np
from sqlalchemy import Connection, delete, select, update
from sqlalchemy.orm import Session

from app.domain.errors import Conflict, MonthClosed, NotFound
from app.domain.periods import Month
from app.models import BillingDelivery, LedgerClosure
from app.models.billing import billing_row_attributes, billing_row_values


class GoneDelivery(Conflict):
    """The delivery exists but was already removed or replaced."""

    code = "delivery_gone"


@dataclass(frozen=True, slots=True)
class DuplicatedCharges:
    """Charges (by charge identity) held by two current deliveries of one billing period."""

    delivery_id: int
    source: str
    other_id: int
    other_source: str
    charges: int
    """Distinct charge keys the two share."""


@dataclass(frozen=True, slots=True)
class Removal:
    delivery: BillingDelivery
    month: Month
    restated: bool
    """The month was closed: its difference is booked as adjustments in ``booked_in``."""
    booked_in: Month | None


def current_deliveries(conn: Connection, period_start: datetime) -> list[tuple[int, str]]:
    """(id, source) of the current deliveries of a billing period, by id."""
    return [
        (int(i), s)
        for i, s in conn.execute(
            select(BillingDelivery.id, BillingDelivery.source)
            .where(
                BillingDelivery.billing_period_start == period_start,
                BillingDelivery.superseded_at.is_(None),
            )
            .order_by(BillingDelivery.id)
        )
    ]


def charge_keys_of(conn: Connection, delivery_id: int) -> np.ndarray:
    """The distinct charge keys of a delivery's rows, sorted (rows without one are left out)."""
    keys = conn.scalars(
        select(billing_row_values.c.charge_key).where(
            billing_row_values.c.delivery_id == delivery_id,
            billing_row_values.c.charge_key.is_not(None),
        )
    ).all()
    return np.unique(np.array(keys, dtype=np.int64))


def shared_charges(keys: np.ndarray, other: np.ndarray) -> int:
    """How many of the distinct ``keys`` are among ``other`` (both distinct and sorted)."""
    return int(np.intersect1d(keys, other, assume_unique=True).size)


def duplicated_charges(conn: Connection, period_start: datetime) -> list[DuplicatedCharges]:
    """Every pair of current deliveries of a billing period that hold the same charges."""
    current = current_deliveries(conn, period_start)
    if len(current) < 2:
        return []
    keys = {delivery_id: charge_keys_of(conn, delivery_id) for delivery_id, _ in current}
    found = []
    for (first, first_source), (second, second_source) in combinations(current, 2):
        shared = shared_charges(keys[first], keys[second])
        if shared:
            found.append(DuplicatedCharges(second, second_source, first, first_source, shared))
    return found


def list_deliveries(
    session: Session, *, month: Month | None = None, include_gone: bool = False
) -> list[BillingDelivery]:
    """Deliveries by billing period and id; only current ones unless ``include_gone``."""
    query = select(BillingDelivery).order_by(
        BillingDelivery.billing_period_start, BillingDelivery.id
    )
    if month is not None:
        query = query.where(BillingDelivery.billing_period_start == month.start)
    if not include_gone:
        query = query.where(BillingDelivery.superseded_at.is_(None))
    return list(session.scalars(query))


def get_delivery(session: Session, delivery_id: int) -> BillingDelivery:
    delivery = session.get(BillingDelivery, delivery_id)
    if delivery is None:
        known = session.scalars(
            select(BillingDelivery.id)
            .where(BillingDelivery.superseded_at.is_(None))
            .order_by(BillingDelivery.id)
        ).all()
        listed = ", ".join(f"#{i}" for i in known[:20]) or "none"
        raise NotFound(
            f"no billing delivery #{delivery_id}; current deliveries: {listed} "
            "(`specledger billing deliveries list`)"
        )
    return delivery


def remove_delivery(session: Session, delivery_id: int, *, restate: bool, now: datetime) -> Removal:
    """Delete a current delivery's rows and mark it removed. In a closed month only with
    ``restate``: the month's bill then changes like a restated bill's, and the difference is
    booked as adjustments when the first open month after it is allocated.

    Raises:
        NotFound: No such delivery.
        Conflict: It was already removed or replaced.
        MonthClosed: Its month is closed and ``restate`` is not set.
    """
    delivery = get_delivery(session, delivery_id)
    month = Month.of(delivery.billing_period_start)
    if delivery.superseded_at is not None:
        how = (
            "removed"
            if delivery.removed_at is not None
            else f"replaced by delivery #{delivery.superseded_by}"
            if delivery.superseded_by
            else "replaced"
        )
        raise GoneDelivery(f"billing delivery #{delivery_id} was already {how}; nothing to remove")
    closed = set(session.scalars(select(LedgerClosure.month)))
    booked_in = None
    if str(month) in closed:
        booked_in = month.next()
        while str(booked_in) in closed:
            booked_in = booked_in.next()
        if not restate:
            raise MonthClosed(
                f"billing delivery #{delivery_id} belongs to {month}, which is closed: removing "
                f"it changes a closed month's bill. Pass --restate (API: restate=true) to remove "
                f"it as a restatement: the difference is booked as adjustments in {booked_in} "
                f"when `specledger allocate --month {booked_in}` runs"
            )
    conn = session.connection()
    for table in (billing_row_values, billing_row_attributes):
        conn.execute(delete(table).where(table.c.delivery_id == delivery_id))
    conn.execute(
        update(BillingDelivery)
        .where(BillingDelivery.id == delivery_id)
        .values(superseded_at=now, removed_at=now)
    )
    session.expire(delivery)
    return Removal(get_delivery(session, delivery_id), month, booked_in is not None, booked_in)
