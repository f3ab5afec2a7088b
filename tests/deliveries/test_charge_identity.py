"""Charge identity (ingest.charge_identity), pure: the same charges have the same keys in any
order and under any file or source name; a changed amount, period or account is another
charge; columns outside the identity do not matter."""

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from ingest.charge_identity import attribute_digest, attribute_digests, charge_keys

START = datetime(2026, 10, 1, tzinfo=UTC)

charges = st.fixed_dictionaries(
    {
        "billing_account_id": st.sampled_from(["111", "222"]),
        "resource_id": st.one_of(st.none(), st.sampled_from(["i-1", "i-2", "vol-9"])),
        "charge_category": st.sampled_from(["Usage", "Credit", "Tax"]),
        "sku_price": st.one_of(st.none(), st.sampled_from(["p1", "p2"])),
        "hour": st.integers(0, 23),
        "billed": st.integers(-(10**12), 10**12),
        "effective": st.integers(-(10**12), 10**12),
    }
)


def _attributes(charge: dict[str, Any], **extra: Any) -> dict[str, Any]:
    focus = {"SkuPriceId": charge["sku_price"]} if charge["sku_price"] else {}
    return {
        "billing_account_id": charge["billing_account_id"],
        "resource_id": charge["resource_id"],
        "charge_category": charge["charge_category"],
        "billing_period_start": START,
        "billing_currency": "USD",
        "focus_columns": json.dumps(focus),
        "provider_columns": "{}",
        **extra,
    }


def _keys(rows: list[dict[str, Any]], **extra: Any) -> list[int]:
    digests = attribute_digests([_attributes(r, **extra) for r in rows])
    values = pa.table(
        {
            "charge_period_start": pa.array(
                [START + timedelta(hours=r["hour"]) for r in rows], pa.timestamp("us", tz="UTC")
            ),
            "charge_period_end": pa.array(
                [START + timedelta(hours=r["hour"] + 1) for r in rows],
                pa.timestamp("us", tz="UTC"),
            ),
            "billed_cost_micros": pa.array([r["billed"] for r in rows], pa.int64()),
            "effective_cost_micros": pa.array([r["effective"] for r in rows], pa.int64()),
        }
    )
    keys = charge_keys(digests, values)
    assert keys.dtype == np.int64
    return [int(k) for k in keys]


@given(st.lists(charges, min_size=1, max_size=30), st.randoms(use_true_random=False))
def test_the_same_charges_in_any_order_or_file_have_the_same_keys(
    rows: list[dict[str, Any]], rnd: Any
) -> None:
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    first = _keys(rows, source_file="bill.csv")
    again = _keys(shuffled, source_file="copy-under-another-name.csv", tags={"team": "x"})
    assert sorted(first) == sorted(again)


@given(charges, st.sampled_from(["billed", "effective", "hour", "billing_account_id"]))
def test_a_changed_amount_period_or_account_is_another_charge(
    charge: dict[str, Any], field: str
) -> None:
    changed = dict(charge)
    if field == "billing_account_id":
        changed[field] = "999"
    else:
        changed[field] = charge[field] + 1 if field != "hour" else (charge["hour"] + 1) % 24
    assert _keys([charge]) != _keys([changed])


@given(st.lists(charges, min_size=2, max_size=40, unique_by=lambda c: tuple(c.values())))
def test_distinct_charges_have_distinct_keys(rows: list[dict[str, Any]]) -> None:
    assert len(set(_keys(rows))) == len(rows)


def test_names_tags_and_invoice_are_outside_the_identity() -> None:
    charge = {"billing_account_id": "111", "resource_id": "i-1", "sku_price": "p1"}
    plain = attribute_digest(_attributes({**charge, "charge_category": "Usage"}))
    renamed = attribute_digest(
        _attributes(
            {**charge, "charge_category": "Usage"},
            billing_account_name="renamed",
            tags={"team": "fixed later"},
            focus_columns=json.dumps({"SkuPriceId": "p1", "InvoiceId": "INV-7"}),
            provider_columns=json.dumps({"x_Operation": "RunInstances"}),
        )
    )
    assert plain == renamed


def test_an_allocated_share_is_not_its_origin_charge() -> None:
    """SpecLedger's own FOCUS export carries the source row it split: never a duplicate of it."""
    charge = {"billing_account_id": "111", "resource_id": "i-1", "sku_price": None}
    origin = attribute_digest(_attributes({**charge, "charge_category": "Usage"}))
    share = attribute_digest(
        _attributes(
            {**charge, "charge_category": "Usage"},
            provider_columns=json.dumps({"x_SourceBillingRowId": "17"}),
        )
    )
    assert origin != share


def test_stored_and_read_forms_give_the_same_digest() -> None:
    """The migration reads JSON objects and naive-free datetimes; ingest reads JSON text."""
    text_form = _attributes(
        {
            "billing_account_id": "1",
            "resource_id": None,
            "charge_category": "Usage",
            "sku_price": "p",
        }
    )
    stored_form = {
        **text_form,
        "focus_columns": {"SkuPriceId": "p"},
        "provider_columns": {},
        "billing_period_start": START.astimezone(UTC),
    }
    assert attribute_digest(text_form) == attribute_digest(stored_form)
