"""AWS Data Exports in S3, against moto's S3 server over HTTP (boto3 is not patched)."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pytest
from sqlalchemy import Engine, select
from typer.testing import CliRunner

import ingest.service
from app.cli import app
from app.models import BillingDelivery, BillingRow
from tests.ingest.helpers import focus_csv_text, focus_row

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BUCKET = "acme-billing"
EXPORT = "focus-export"


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Client]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SPECLEDGER_S3_ENDPOINT_URL", s3_endpoint)
    client = boto3.client("s3", endpoint_url=s3_endpoint)
    client.create_bucket(Bucket=BUCKET)
    yield client
    for item in client.list_objects_v2(Bucket=BUCKET).get("Contents", []):
        client.delete_object(Bucket=BUCKET, Key=item["Key"])
    client.delete_bucket(Bucket=BUCKET)


def _deliver(client: S3Client, partition: str, execution: str, rows: list[dict[str, str]]) -> None:
    data_key = f"exports/{EXPORT}/data/{partition}/{execution}/{EXPORT}-00001.csv.gz"
    client.put_object(
        Bucket=BUCKET, Key=data_key, Body=gzip.compress(focus_csv_text(rows).encode())
    )
    manifest = {
        "exportName": EXPORT,
        "executionId": execution,
        "dataFiles": [f"s3://{BUCKET}/{data_key}"],
    }
    client.put_object(
        Bucket=BUCKET,
        Key=f"exports/{EXPORT}/metadata/{partition}/{execution}/{EXPORT}-Manifest.json",
        Body=json.dumps(manifest).encode(),
    )


def _descriptions(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(
            conn.scalars(
                select(BillingRow.charge_description).order_by(BillingRow.charge_period_start)
            )
        )


@pytest.mark.parametrize(
    "keep_read_bytes",
    [ingest.service.KEEP_READ_BYTES, 0],
    ids=["kept-in-memory", "downloads-read-again"],
)
def test_two_deliveries_of_a_month_leave_only_the_newest_manifests_rows(
    engine: Engine,
    cli_env: str,
    s3: S3Client,
    tmp_path: Path,
    keep_read_bytes: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ingest.service, "KEEP_READ_BYTES", keep_read_bytes)
    _deliver(
        s3,
        "BILLING_PERIOD=2026-10",
        "exec-1",
        [focus_row(hour=h, ChargeDescription="first") for h in range(3)],
    )
    time.sleep(1.1)  # S3 LastModified has one-second resolution
    _deliver(
        s3,
        "BILLING_PERIOD=2026-10",
        "exec-2",
        [focus_row(hour=h, cost="2.00", ChargeDescription="restated") for h in range(2)],
    )
    # A data file no manifest lists (an aborted refresh) must never be read.
    s3.put_object(
        Bucket=BUCKET,
        Key=f"exports/{EXPORT}/data/BILLING_PERIOD=2026-10/stray.csv",
        Body=focus_csv_text([focus_row(ChargeDescription="stray")]).encode(),
    )
    _deliver(
        s3, "billing_period=2026-11", "exec-3", [focus_row("2026-11", ChargeDescription="november")]
    )

    runner = CliRunner()
    result = runner.invoke(app, ["ingest", "billing", f"s3://{BUCKET}/exports", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)

    assert _descriptions(engine) == ["restated", "restated", "november"]
    assert [p["source"] for p in report["periods"]] == [f"s3://{BUCKET}/exports/{EXPORT}"] * 2
    assert report["totals"]["USD"]["BilledCost"] == "5.500000"
    # Each delivery names the manifest that decided which files were current.
    with engine.connect() as conn:
        manifests = conn.scalars(
            select(BillingDelivery.manifest)
            .where(BillingDelivery.superseded_at.is_(None))
            .order_by(BillingDelivery.billing_period_start)
        ).all()
    metadata = f"s3://{BUCKET}/exports/{EXPORT}/metadata"
    assert manifests == [
        f"{metadata}/BILLING_PERIOD=2026-10/exec-2/{EXPORT}-Manifest.json",
        f"{metadata}/billing_period=2026-11/exec-3/{EXPORT}-Manifest.json",
    ]

    again = runner.invoke(app, ["ingest", "billing", f"s3://{BUCKET}/exports", "--json"])
    assert [p["action"] for p in json.loads(again.stdout)["periods"]] == ["unchanged"] * 2
    assert _descriptions(engine) == ["restated", "restated", "november"]


def test_manifest_listing_a_missing_file_writes_nothing(
    engine: Engine,
    cli_env: str,
    s3: S3Client,
) -> None:
    manifest = {
        "dataFiles": [f"s3://{BUCKET}/exports/{EXPORT}/data/BILLING_PERIOD=2026-10/gone.csv.gz"]
    }
    s3.put_object(
        Bucket=BUCKET,
        Key=f"exports/{EXPORT}/metadata/BILLING_PERIOD=2026-10/{EXPORT}-Manifest.json",
        Body=json.dumps(manifest).encode(),
    )

    result = CliRunner().invoke(app, ["ingest", "billing", f"s3://{BUCKET}/exports"])

    assert result.exit_code == 2
    assert "gone.csv.gz" in result.stderr
    assert _descriptions(engine) == []


def test_prefix_without_manifest_is_a_clear_error(
    engine: Engine, cli_env: str, s3: S3Client
) -> None:
    result = CliRunner().invoke(app, ["ingest", "billing", f"s3://{BUCKET}/nothing-here"])
    assert result.exit_code == 2
    assert "no AWS Data Exports manifest" in result.stderr
