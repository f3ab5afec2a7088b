"""Wire schemas of billing ingest."""

from typing import Any, Literal

from pydantic import ConfigDict, Field

from app.kit.schemas import Schema, StoredText


class BillingIngestCreate(Schema):
    location: str = Field(
        min_length=1,
        max_length=2048,
        examples=["/data/focus/2026-11.csv.gz", "s3://billing-bucket/exports/focus"],
    )
    """A FOCUS file (.csv, .csv.gz, .parquet) or folder on the server, or an S3 prefix of an
    AWS Data Export."""
    source: StoredText | None = Field(None, min_length=1, max_length=256)
    """Name of the billing source; re-ingesting a source replaces its billing periods."""
    force: bool = False
    """Replace stored billing periods even with an older delivery."""
    replace: bool = False
    """Replace the deliveries of other sources that already hold the same charges (by charge
    identity), instead of refusing the input."""
    lenient: bool = False
    """Skip rows that cannot be repaired (listed in the report) instead of rejecting."""
    allow_missing_columns: bool = False
    focus_version: Literal["1.0", "1.1", "1.2", "1.3"] | None = None


class BillingIngestRead(Schema):
    model_config = ConfigDict(extra="ignore")  # built from IngestReport.to_json
    files: list[dict[str, Any]]
    rows: int
    periods: list[dict[str, Any]]
    """Per billing period: rows, what was done (inserted, replaced, unchanged...), totals."""
    totals: dict[str, dict[str, str]]
    """currency -> BilledCost / EffectiveCost, decimal strings."""
    repairs: dict[str, int]
    rejects: list[dict[str, Any]]
    warnings: list[str]
    conformance_warnings: list[dict[str, Any]]
    """FOCUS rules broken in columns the ledger only carries (the rows loaded): file, column,
    rule, count and the first rows."""
