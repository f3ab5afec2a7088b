"""Small builders for FOCUS test files (written with the csv module, independent of ingest)."""

import csv
import gzip
import io
import json
from pathlib import Path

HEADER = [
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
    "ResourceId",
    "Tags",
]


def focus_row(
    month: str = "2026-10", hour: int = 0, cost: str = "1.50", **overrides: str
) -> dict[str, str]:
    year, mon = (int(x) for x in month.split("-"))
    next_month = f"{year + (mon == 12)}-{mon % 12 + 1:02d}"
    row = {
        "BilledCost": cost,
        "BillingAccountId": "111",
        "BillingAccountName": "acct",
        "BillingCurrency": "USD",
        "BillingPeriodStart": f"{month}-01T00:00:00Z",
        "BillingPeriodEnd": f"{next_month}-01T00:00:00Z",
        "ChargeCategory": "Usage",
        "ChargeClass": "",
        "ChargeDescription": "gpu hour",
        "ChargePeriodStart": f"{month}-01T{hour:02d}:00:00Z",
        "ChargePeriodEnd": f"{month}-01T{hour + 1:02d}:00:00Z",
        "ContractedCost": cost,
        "EffectiveCost": cost,
        "InvoiceIssuerName": "AWS",
        "ListCost": cost,
        "PricingQuantity": "1",
        "PricingUnit": "Hours",
        "ProviderName": "AWS",
        "PublisherName": "AWS",
        "ServiceCategory": "Compute",
        "ServiceName": "EC2",
        "ResourceId": "i-1",
        "Tags": json.dumps({"specledger-deployment": "d1"}),
    }
    row.update(overrides)
    return row


def focus_csv_text(rows: list[dict[str, str]], header: list[str] | None = None) -> str:
    header = header or HEADER
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=header, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def write_focus_csv(
    path: Path, rows: list[dict[str, str]], header: list[str] | None = None
) -> Path:
    text = focus_csv_text(rows, header)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path
