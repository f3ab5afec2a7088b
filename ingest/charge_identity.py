"""Charge identity: which billing rows are the same charge, whatever file or source they came in.

A charge is identified by the FOCUS columns that say *whose* charge it is, *for what*, *when*
and *how much*:

- whose: BillingAccountId, SubAccountId, ProviderName, PublisherName, InvoiceIssuerName;
- for what: ChargeCategory, ChargeClass, ChargeFrequency, ChargeDescription, ServiceName,
  ResourceId, RegionId, AvailabilityZone, SkuId, SkuPriceId, PricingCategory, PricingUnit,
  ConsumedUnit, CommitmentDiscountId, CommitmentDiscountStatus, CapacityReservationId, and
  for an allocated charge (FOCUS 1.3 split cost allocation) AllocatedMethodId,
  AllocatedResourceId and AllocatedTags, plus ``x_SourceBillingRowId``, the row SpecLedger's
  own FOCUS export split it from (so that export is a delivery of its own charges, never a
  copy of the provider's);
- when: BillingPeriodStart, ChargePeriodStart, ChargePeriodEnd;
- how much: BilledCost, EffectiveCost and BillingCurrency.

Left out on purpose: display names (BillingAccountName, ServiceCategory, ResourceName...),
which a provider may change between deliveries; Tags, which users fix after the fact;
InvoiceId, which a provider fills in after the month; and the provider's other ``x_``
columns. So the same charges in another file, another order or under another source name
have the same keys, and a charge whose amount changed (a restatement) is a different charge.
Rows equal in every identity column share one key: within a delivery they are two lines of
one charge, and a delivery is never compared with itself.

A key is a 64-bit number (stored signed): a BLAKE2b digest of each distinct combination of
the row's descriptive columns, mixed with the row's periods and amounts by the SplitMix64
finalizer, vectorised over Arrow columns.
"""

import hashlib
import json
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TYPED_IDENTITY = (
    "billing_account_id",
    "sub_account_id",
    "provider_name",
    "publisher_name",
    "invoice_issuer_name",
    "billing_period_start",
    "billing_currency",
    "charge_category",
    "charge_class",
    "charge_frequency",
    "charge_description",
    "service_name",
    "resource_id",
    "region_id",
    "sku_id",
    "pricing_category",
    "pricing_unit",
    "consumed_unit",
)
"""Stored billing-attribute columns in the identity."""
FOCUS_IDENTITY = (
    "AvailabilityZone",
    "SkuPriceId",
    "CommitmentDiscountId",
    "CommitmentDiscountStatus",
    "CapacityReservationId",
    "AllocatedMethodId",
    "AllocatedResourceId",
    "AllocatedTags",
)
"""Other FOCUS columns (kept in ``focus_columns``) in the identity."""
PROVIDER_IDENTITY = ("x_SourceBillingRowId",)
"""Provider columns (kept in ``provider_columns``) in the identity."""
VALUE_IDENTITY = (
    "charge_period_start",
    "charge_period_end",
    "billed_cost_micros",
    "effective_cost_micros",
)
"""Per-row values in the identity (timestamps in microseconds, money in micros)."""

_NULL = "\x00"


def attribute_digest(attributes: Mapping[str, Any]) -> int:
    """The unsigned 64-bit digest of one combination of descriptive columns: the typed ones by
    their stored names, ``focus_columns`` and ``provider_columns`` as JSON text or objects."""
    focus = _as_object(attributes.get("focus_columns"))
    provider = _as_object(attributes.get("provider_columns"))
    parts = [
        *(_canonical(attributes.get(name)) for name in TYPED_IDENTITY),
        *(_canonical(focus.get(name)) for name in FOCUS_IDENTITY),
        *(_canonical(provider.get(name)) for name in PROVIDER_IDENTITY),
    ]
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def attribute_digests(combinations: Iterable[Mapping[str, Any]]) -> np.ndarray:
    """:func:`attribute_digest` of each combination, as ``uint64``."""
    return np.array([attribute_digest(c) for c in combinations], dtype=np.uint64)


def charge_keys(digests: np.ndarray, values: pa.Table) -> np.ndarray:
    """The key of each row (``int64``): ``digests`` is its combination's digest (``uint64``,
    one per row), ``values`` has the :data:`VALUE_IDENTITY` columns (timestamps or integer
    microseconds, integer micros; nulls allowed)."""
    key = digests.astype(np.uint64, copy=True)
    with np.errstate(over="ignore"):
        for salt, name in enumerate(VALUE_IDENTITY, start=1):
            key = _mix(key ^ _mix(_as_uint64(values.column(name)) + np.uint64(salt)))
    return key.view(np.int64)


def _as_uint64(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    array = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if pa.types.is_timestamp(array.type):
        array = array.cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
    array = array.cast(pa.int64())
    nulls = pc.is_null(array).to_numpy(zero_copy_only=False)
    numbers = pc.fill_null(array, 0).to_numpy(zero_copy_only=False).astype(np.int64)
    unsigned = numbers.view(np.uint64)
    # A null is a value no number has: the high bit with a marker in the low ones.
    return np.where(nulls, np.uint64(0x8000_0000_0000_0A11), unsigned).astype(np.uint64)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer, elementwise on ``uint64`` (wrapping)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


def _as_object(value: Any) -> Mapping[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        parsed = json.loads(value) if value else {}
        return parsed if isinstance(parsed, dict) else {}
    return value if isinstance(value, Mapping) else {}


def _canonical(value: Any) -> str:
    if value is None:
        return _NULL
    if isinstance(value, datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=UTC)
        return aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
