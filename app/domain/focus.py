"""The FOCUS vocabulary: the Cost and Usage columns ingest knows, by version, with their data
kinds, and how they map to the stored billing columns.

Source: the FOCUS specification's column tables for 1.0, 1.1, 1.2 and 1.3
(see ../shared/reference/focus.md, section 1.2).
"""

from dataclasses import dataclass
from enum import StrEnum

VERSIONS = ("1.0", "1.1", "1.2", "1.3")


class Kind(StrEnum):
    money = "money"  # a cost metric, stored as integer micros
    decimal = "decimal"  # another numeric metric, stored as exact decimal text
    datetime = "datetime"
    string = "string"
    enum = "enum"  # a closed list of allowed values; case is repaired
    open_enum = "open_enum"  # a list of values the spec allows, kept as given when unknown
    json = "json"  # a flat JSON object (key-value format)


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
    FocusColumn("AllocatedMethodDetails", Kind.json, "1.3"),
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
# Columns the spec says are never null; checked on the rows when the column is present.
NOT_NULL = (
    "BilledCost",
    "EffectiveCost",
    "ListCost",
    "ContractedCost",
    "BillingCurrency",
    "BillingPeriodStart",
    "BillingPeriodEnd",
    "ChargePeriodStart",
    "ChargePeriodEnd",
    "ChargeCategory",
)
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
VALUE_COLUMNS = ("source_row", *(TYPED_COLUMNS[name] for name in ROW_VALUE_FOCUS_COLUMNS))
ATTRIBUTE_COLUMNS = (
    *(db for focus, db in TYPED_COLUMNS.items() if focus not in ROW_VALUE_FOCUS_COLUMNS),
    "focus_columns",
    "provider_columns",
)
