"""The FOCUS vocabulary: the Cost and Usage columns ingest knows, by version, with their data
kinds, and how they map to the stored billing columns.

Source: the FOCUS specification's column tables for 1.0, 1.1, 1.2 and 1.3
(see ../shared/reference/focus.md, section 1.2).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, localcontext
from enum import StrEnum

import numpy as np

from app.domain.allocation import split_array_by_weight, split_by_weight
from app.domain.money import residual_column

VERSIONS = ("1.0", "1.1", "1.2", "1.3")


class Kind(StrEnum):
    money = "money"  # a cost metric, stored as integer micros
    decimal = "decimal"  # another numeric metric, stored as exact decimal text
    datetime = "datetime"
    string = "string"
    enum = "enum"  # a closed list of allowed values; case is repaired
    open_enum = "open_enum"  # a list of values the spec allows, kept as given when unknown
    json = "json"  # a flat JSON object (key-value format)
    json_object = "json_object"  # a JSON object that may nest (1.3 JSON Object Format)


@dataclass(frozen=True, slots=True)
class FocusColumn:
    name: str
    kind: Kind
    since: str
    allowed: tuple[str, ...] = ()


_SERVICE_CATEGORIES = (
    "AI and Machine Learning",
    "Analytics",
    "Business Applications",
    "Compute",
    "Databases",
    "Developer Tools",
    "Multicloud",
    "Identity",
    "Integration",
    "Internet of Things",
    "Management and Governance",
    "Media",
    "Migration",
    "Mobile",
    "Networking",
    "Security",
    "Storage",
    "Web",
    "Other",
)

COLUMNS: tuple[FocusColumn, ...] = (
    FocusColumn("AllocatedMethodDetails", Kind.json_object, "1.3"),
    FocusColumn("AllocatedMethodId", Kind.string, "1.3"),
    FocusColumn("AllocatedResourceId", Kind.string, "1.3"),
    FocusColumn("AllocatedResourceName", Kind.string, "1.3"),
    FocusColumn("AllocatedTags", Kind.json, "1.3"),
    FocusColumn("AvailabilityZone", Kind.string, "1.0"),
    FocusColumn("BilledCost", Kind.money, "1.0"),
    FocusColumn("BillingAccountId", Kind.string, "1.0"),
    FocusColumn("BillingAccountName", Kind.string, "1.0"),
    FocusColumn("BillingAccountType", Kind.string, "1.2"),
    FocusColumn("BillingCurrency", Kind.string, "1.0"),
    FocusColumn("BillingPeriodEnd", Kind.datetime, "1.0"),
    FocusColumn("BillingPeriodStart", Kind.datetime, "1.0"),
    FocusColumn("CapacityReservationId", Kind.string, "1.1"),
    FocusColumn("CapacityReservationStatus", Kind.enum, "1.1", ("Used", "Unused")),
    FocusColumn(
        "ChargeCategory", Kind.enum, "1.0", ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
    ),
    FocusColumn("ChargeClass", Kind.enum, "1.0", ("Correction",)),
    FocusColumn("ChargeDescription", Kind.string, "1.0"),
    FocusColumn("ChargeFrequency", Kind.enum, "1.0", ("One-Time", "Recurring", "Usage-Based")),
    FocusColumn("ChargePeriodEnd", Kind.datetime, "1.0"),
    FocusColumn("ChargePeriodStart", Kind.datetime, "1.0"),
    FocusColumn("CommitmentDiscountCategory", Kind.enum, "1.0", ("Spend", "Usage")),
    FocusColumn("CommitmentDiscountId", Kind.string, "1.0"),
    FocusColumn("CommitmentDiscountName", Kind.string, "1.0"),
    FocusColumn("CommitmentDiscountQuantity", Kind.decimal, "1.1"),
    FocusColumn("CommitmentDiscountStatus", Kind.enum, "1.0", ("Used", "Unused")),
    FocusColumn("CommitmentDiscountType", Kind.string, "1.0"),
    FocusColumn("CommitmentDiscountUnit", Kind.string, "1.1"),
    FocusColumn("ConsumedQuantity", Kind.decimal, "1.0"),
    FocusColumn("ConsumedUnit", Kind.string, "1.0"),
    FocusColumn("ContractApplied", Kind.string, "1.3"),
    FocusColumn("ContractedCost", Kind.money, "1.0"),
    FocusColumn("ContractedUnitPrice", Kind.decimal, "1.0"),
    FocusColumn("EffectiveCost", Kind.money, "1.0"),
    FocusColumn("HostProviderName", Kind.string, "1.3"),
    FocusColumn("InvoiceId", Kind.string, "1.2"),
    FocusColumn("InvoiceIssuerName", Kind.string, "1.0"),
    FocusColumn("ListCost", Kind.money, "1.0"),
    FocusColumn("ListUnitPrice", Kind.decimal, "1.0"),
    FocusColumn("PricingCategory", Kind.enum, "1.0", ("Standard", "Dynamic", "Committed", "Other")),
    FocusColumn("PricingCurrency", Kind.string, "1.2"),
    FocusColumn("PricingCurrencyContractedUnitPrice", Kind.decimal, "1.2"),
    FocusColumn("PricingCurrencyEffectiveCost", Kind.decimal, "1.2"),
    FocusColumn("PricingCurrencyListUnitPrice", Kind.decimal, "1.2"),
    FocusColumn("PricingQuantity", Kind.decimal, "1.0"),
    FocusColumn("PricingUnit", Kind.string, "1.0"),
    FocusColumn("ProviderName", Kind.string, "1.0"),
    FocusColumn("PublisherName", Kind.string, "1.0"),
    FocusColumn("RegionId", Kind.string, "1.0"),
    FocusColumn("RegionName", Kind.string, "1.0"),
    FocusColumn("ResourceId", Kind.string, "1.0"),
    FocusColumn("ResourceName", Kind.string, "1.0"),
    FocusColumn("ResourceType", Kind.string, "1.0"),
    FocusColumn("ServiceCategory", Kind.open_enum, "1.0", _SERVICE_CATEGORIES),
    FocusColumn("ServiceName", Kind.string, "1.0"),
    FocusColumn("ServiceProviderName", Kind.string, "1.3"),
    FocusColumn("ServiceSubcategory", Kind.string, "1.1"),
    FocusColumn("SkuId", Kind.string, "1.0"),
    FocusColumn("SkuMeter", Kind.string, "1.1"),
    FocusColumn("SkuPriceDetails", Kind.json, "1.1"),
    FocusColumn("SkuPriceId", Kind.string, "1.0"),
    FocusColumn("SubAccountId", Kind.string, "1.0"),
    FocusColumn("SubAccountName", Kind.string, "1.0"),
    FocusColumn("SubAccountType", Kind.string, "1.2"),
    FocusColumn("Tags", Kind.json, "1.0"),
)

BY_NAME: dict[str, FocusColumn] = {c.name: c for c in COLUMNS}
BY_LOWER_NAME: dict[str, FocusColumn] = {c.name.lower(): c for c in COLUMNS}

_MANDATORY_1_0 = (
    "BilledCost",
    "BillingAccountId",
    "BillingAccountName",
    "BillingCurrency",
    "BillingPeriodEnd",
    "BillingPeriodStart",
    "ChargeCategory",
    "ChargeClass",
    "ChargeDescription",
    "ChargePeriodEnd",
    "ChargePeriodStart",
    "ContractedCost",
    "EffectiveCost",
    "InvoiceIssuerName",
    "ListCost",
    "PricingQuantity",
    "PricingUnit",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
)
# 1.3 deprecates ProviderName and PublisherName in favour of these two.
_MANDATORY_1_3 = tuple(
    sorted(
        set(_MANDATORY_1_0) - {"ProviderName", "PublisherName"}
        | {"HostProviderName", "ServiceProviderName"}
    )
)
MANDATORY: dict[str, tuple[str, ...]] = {
    "1.0": _MANDATORY_1_0,
    "1.1": _MANDATORY_1_0,
    "1.2": _MANDATORY_1_0,
    "1.3": _MANDATORY_1_3,
}


def columns_of(version: str) -> tuple[FocusColumn, ...]:
    """The columns defined in a FOCUS version."""
    return tuple(c for c in COLUMNS if c.since <= version)


def detect_version(names: set[str]) -> str:
    """The lowest FOCUS version that defines every FOCUS column present."""
    present = [BY_NAME[n].since for n in names if n in BY_NAME]
    return max(present, default="1.0")


# FOCUS columns that have their own table column; every other FOCUS column goes to JSON.
TYPED_COLUMNS: dict[str, str] = {
    "BillingPeriodStart": "billing_period_start",
    "BillingPeriodEnd": "billing_period_end",
    "ChargePeriodStart": "charge_period_start",
    "ChargePeriodEnd": "charge_period_end",
    "BilledCost": "billed_cost_micros",
    "EffectiveCost": "effective_cost_micros",
    "ListCost": "list_cost_micros",
    "ContractedCost": "contracted_cost_micros",
    "BillingCurrency": "billing_currency",
    "ChargeCategory": "charge_category",
    "ChargeClass": "charge_class",
    "ChargeFrequency": "charge_frequency",
    "ChargeDescription": "charge_description",
    "PricingCategory": "pricing_category",
    "PricingQuantity": "pricing_quantity",
    "PricingUnit": "pricing_unit",
    "ConsumedQuantity": "consumed_quantity",
    "ConsumedUnit": "consumed_unit",
    "ProviderName": "provider_name",
    "PublisherName": "publisher_name",
    "InvoiceIssuerName": "invoice_issuer_name",
    "BillingAccountId": "billing_account_id",
    "BillingAccountName": "billing_account_name",
    "SubAccountId": "sub_account_id",
    "ServiceCategory": "service_category",
    "ServiceName": "service_name",
    "ResourceId": "resource_id",
    "ResourceType": "resource_type",
    "RegionId": "region_id",
    "SkuId": "sku_id",
    "Tags": "tags",
}
# Non-nullable columns the ledger's figures stand on: a null here rejects the row (the cost
# bases it splits, the currency it keeps them in, the periods it books them to).
NOT_NULL = (
    "BilledCost",
    "EffectiveCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
)
NEVER_DEFAULTED = ("BilledCost", "EffectiveCost", "BillingCurrency")
"""Mandatory columns a file must have, ``--allow-missing-columns`` or not: the two cost bases
the ledger splits and their currency are never read as null (which would load them as 0)."""
# Columns the FOCUS text says are never null (the "Allows nulls: False" column of its tables)
# that the ledger only carries along. Real exports break this (an OCI export has null
# ContractedCost): such rows load, with a conformance warning in the ingest report.
CONFORMANCE_NOT_NULL = (
    "BillingAccountId",
    "BillingAccountType",
    "ChargeCategory",
    "ChargeFrequency",
    "ContractedCost",
    "HostProviderName",
    "InvoiceIssuerName",
    "ListCost",
    "ProviderName",
    "PublisherName",
    "ServiceCategory",
    "ServiceName",
    "ServiceProviderName",
    "ServiceSubcategory",
)
# Unit prices the text makes mandatory on Usage and Purchase charges that are not corrections
# (ContractedUnitPrice and ListUnitPrice, 1.0-1.3: "MUST NOT be null when ChargeClass is not
# Correction and ChargeCategory is Usage or Purchase").
CONFORMANCE_NOT_NULL_ON_USAGE = ("ContractedUnitPrice", "ListUnitPrice")
# FOCUS columns whose values change from row to row. Every other column (typed, other FOCUS
# and provider ones) describes what the row is for; a file has few distinct combinations of
# those, and each combination is normalised once.
ROW_VALUE_FOCUS_COLUMNS = (
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "PricingQuantity",
    "ConsumedQuantity",
)
MONEY_VALUE_COLUMNS = (
    "billed_cost_micros",
    "effective_cost_micros",
    "list_cost_micros",
    "contracted_cost_micros",
)
"""The money among the row values; each has its residual in picos beside it when stored
(``app.domain.money``)."""
VALUE_COLUMNS = (
    "source_row",
    *(TYPED_COLUMNS[name] for name in ROW_VALUE_FOCUS_COLUMNS),
    *(residual_column(column) for column in MONEY_VALUE_COLUMNS),
)
ATTRIBUTE_COLUMNS = (
    *(db for focus, db in TYPED_COLUMNS.items() if focus not in ROW_VALUE_FOCUS_COLUMNS),
    "focus_columns",
    "provider_columns",
)


# Data generator-calculated split cost allocation (FOCUS 1.3): each allocated charge carries
# AllocatedMethodDetails {"Elements": [{"AllocatedRatio": r, ...}]}, and the ratios of one
# origin charge's allocated charges sum to exactly 1. Ratios are fixed-point decimals with
# RATIO_DIGITS digits: 10**RATIO_DIGITS units split by largest remainder (the rule the money
# follows), so the decimal texts add up to exactly 1 (read them as decimals, not floats).
RATIO_DIGITS = 12
QUANTITY_DIGITS = 9
"""The least number of decimals a split quantity (PricingQuantity, ConsumedQuantity) gets."""
SUMMABLE_DECIMALS = (
    "PricingQuantity",
    "ConsumedQuantity",
    "PricingCurrencyEffectiveCost",
    "CommitmentDiscountQuantity",
)
"""The summable metrics besides the four costs: split like them, by the same weights."""


def split_units(total: int, weights: np.ndarray) -> list[int]:
    """An integer ``total`` split by non-negative int64 ``weights``, largest remainder (ties
    to the earlier position), the sign applied after; any size of total."""
    return [int(part) for part in split_units_array(total, weights)]


def split_units_array(total: int, weights: np.ndarray) -> np.ndarray:
    """:func:`split_units` as an array: int64 where the total fits, else Python integers."""
    if abs(total) < 2**62:
        return split_array_by_weight(total, weights)
    keyed = split_by_weight(total, dict(enumerate(weights.tolist())))
    return np.array([keyed.get(i, 0) for i in range(len(weights))], dtype=object)


def ratio_units(weights: np.ndarray) -> list[int]:
    """Each share's AllocatedRatio in units of 10**-RATIO_DIGITS; they sum to 10**RATIO_DIGITS."""
    return split_units(10**RATIO_DIGITS, weights)


def split_quantity(total: Decimal, weights: np.ndarray) -> list[Decimal]:
    """A summable quantity split by ``weights`` so that the parts sum to ``total`` exactly.

    The parts have QUANTITY_DIGITS decimals, or as many as ``total`` has if more: the total
    in those units is split by largest remainder, as money is in micros."""
    parts, digits = split_quantity_units(total, weights)
    with localcontext() as exact:
        exact.prec = _EXACT_DIGITS
        return [Decimal(int(part)).scaleb(-digits) for part in parts]


def split_quantity_units(total: Decimal, weights: np.ndarray) -> tuple[np.ndarray, int]:
    """:func:`split_quantity` as (parts in units of 10**-digits, digits)."""
    exponent = total.as_tuple().exponent
    digits = max(QUANTITY_DIGITS, -exponent if isinstance(exponent, int) else 0)
    with localcontext() as exact:  # the default 28 significant digits would round
        exact.prec = _EXACT_DIGITS
        units = int(total.scaleb(digits))
    return split_units_array(units, weights), digits


_EXACT_DIGITS = 200


def decimal_text(value: Decimal) -> str:
    """A decimal as FOCUS numeric text: plain notation, no exponent, no ``+``."""
    text = f"{value:f}"
    return text if text != "-0" else "0"


def split_weights(
    share_amounts: Sequence[Sequence[int] | np.ndarray], fallback: np.ndarray
) -> np.ndarray:
    """What an origin charge's shares were split by: the magnitudes of their amounts in the
    first cost basis whose shares are not all zero (EffectiveCost first), else ``fallback``
    (the shares' GPU-nanoseconds), else equal weights."""
    for amounts in share_amounts:
        weights = np.abs(np.asarray(amounts, dtype=np.int64))
        if weights.any():
            return weights
    if len(fallback) and np.asarray(fallback).any():
        return np.asarray(fallback, dtype=np.int64)
    return np.ones(len(fallback), dtype=np.int64)
