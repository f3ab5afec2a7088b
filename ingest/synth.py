"""A conformant, clearly synthetic FOCUS 1.2 bill for GPU instance-hours (demo and benchmarks)."""

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from app.catalog import InstancePrice, networking_prices

SYNTHETIC = "SYNTHETIC (specledger billing synth)"


@dataclass(frozen=True, slots=True)
class SynthSpec:
    instance: InstancePrice
    start: datetime
    """First charge hour (inclusive, aware UTC, on the hour)."""
    end: datetime
    """End of the last charge hour (exclusive)."""
    billing_period_start: datetime
    billing_period_end: datetime
    tags: dict[str, str]
    instances: int = 1
    network_gb_per_day: Decimal = Decimal("50")
    account_id: str = "000000000000"
    sub_account_id: str | None = None
    """The linked account of the rows (default: ``account_id``). Bills of two deployments
    that ran side by side need their own, or their daily networking rows would be the same
    charge twice (and the second bill is refused as a duplicate delivery)."""


def synth_rows(spec: SynthSpec) -> pa.Table:
    """One row per instance per hour, plus one data-transfer row per day."""
    rows: list[dict[str, str | None]] = []
    hours = int((spec.end - spec.start) / timedelta(hours=1))
    price = spec.instance.usd_per_hour
    for index in range(spec.instances):
        resource = (
            "i-"
            + hashlib.sha256(
                f"{spec.tags}|{spec.instance.instance_type}|{index}".encode()
            ).hexdigest()[:17]
        )
        for hour in range(hours):
            at = spec.start + timedelta(hours=hour)
            rows.append(
                _row(
                    spec,
                    at,
                    at + timedelta(hours=1),
                    price,
                    Decimal(1),
                    "Hours",
                    resource,
                    "Compute",
                    "Amazon Elastic Compute Cloud",
                    f"{SYNTHETIC}: {spec.instance.instance_type} on-demand instance-hour",
                    f"USE1-BoxUsage:{spec.instance.instance_type}",
                )
            )
    gb_price = networking_prices()["data_transfer_out_usd_per_gb"]
    day = spec.start.replace(hour=0)
    while day < spec.end:
        begin, finish = max(day, spec.start), min(day + timedelta(days=1), spec.end)
        gb = (spec.network_gb_per_day * Decimal((finish - begin) / timedelta(hours=24))).quantize(
            Decimal("0.000001")
        )
        rows.append(
            _row(
                spec,
                begin,
                finish,
                gb_price,
                gb,
                "GB",
                None,
                "Networking",
                "AWS Data Transfer",
                f"{SYNTHETIC}: data transfer out to the internet",
                "USE1-DataTransfer-Out-Bytes",
            )
        )
        day += timedelta(days=1)
    return pa.table({k: pa.array([r[k] for r in rows], pa.string()) for k in rows[0]})


def _row(
    spec: SynthSpec,
    start: datetime,
    end: datetime,
    unit_price: Decimal,
    quantity: Decimal,
    unit: str,
    resource: str | None,
    category: str,
    service: str,
    description: str,
    meter: str,
) -> dict[str, str | None]:
    cost = str((unit_price * quantity).quantize(Decimal("0.000001")))
    return {
        "BilledCost": cost,
        "EffectiveCost": cost,
        "ListCost": cost,
        "ContractedCost": cost,
        "BillingAccountId": spec.account_id,
        "BillingAccountName": "SpecLedger demo",
        "BillingAccountType": "Billing Account",
        "BillingCurrency": "USD",
        "BillingPeriodStart": _iso(spec.billing_period_start),
        "BillingPeriodEnd": _iso(spec.billing_period_end),
        "ChargeCategory": "Usage",
        "ChargeClass": None,
        "ChargeDescription": description,
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodStart": _iso(start),
        "ChargePeriodEnd": _iso(end),
        "ConsumedQuantity": str(quantity),
        "ConsumedUnit": unit,
        "ContractedUnitPrice": str(unit_price),
        "ListUnitPrice": str(unit_price),
        "InvoiceIssuerName": "Amazon Web Services, Inc.",
        "PricingCategory": "Standard",
        "PricingQuantity": str(quantity),
        "PricingUnit": unit,
        "ProviderName": "AWS",
        "PublisherName": "Amazon Web Services, Inc.",
        "RegionId": "us-east-1",
        "RegionName": "US East (N. Virginia)",
        "ResourceId": resource,
        "ResourceType": "Instance" if resource else None,
        "ServiceCategory": category,
        "ServiceName": service,
        "ServiceSubcategory": "Virtual Machines" if category == "Compute" else "Other (Networking)",
        "SkuMeter": meter,
        "SubAccountId": spec.sub_account_id or spec.account_id,
        "Tags": json.dumps(spec.tags, sort_keys=True),
    }


def write_bill(table: pa.Table, out: Path) -> None:
    """Write as CSV, CSV.gz or Parquet, chosen by the file name."""
    out.parent.mkdir(parents=True, exist_ok=True)
    name = out.name.lower()
    if name.endswith(".parquet"):
        pq.write_table(table, out)
    elif name.endswith(".csv.gz"):
        with pa.CompressedOutputStream(str(out), "gzip") as stream:
            pacsv.write_csv(table, stream)
    else:
        pacsv.write_csv(table, out)


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")
