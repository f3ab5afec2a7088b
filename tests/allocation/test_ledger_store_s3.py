"""The ledger in S3, end to end through the command line, against moto's S3 server over HTTP:
usage loaded into the bucket (twice: it is allocated once), a month allocated from it with
its entries written there, reconciled from the database's rollups, closed, and its files
proven unchanged until an object is overwritten."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING

import boto3
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from sqlalchemy import Engine, func, select
from typer.testing import CliRunner

from app.cli import app
from app.domain.usage import UsageEvent
from app.models import LedgerEntry, LedgerRollup
from serving.proxy.sink import write_jsonl
from tests.factories import at, usage_record

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

BUCKET = "acme-ledger"
STORE = f"s3://{BUCKET}/specledger"
runner = CliRunner()


@pytest.fixture
def bucket(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Client]:
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


def _ok(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_month_allocated_from_and_into_s3_reconciles_and_stays_provably_closed(
    cli_env: str, engine: Engine, bucket: S3Client, tmp_path: Path
) -> None:
    bill = tmp_path / "bill.parquet"
    _ok(
        "billing", "synth", "--out", str(bill), "--month", "2026-11",
        "--tag", "specledger-deployment=demo", "--instance-type", "g5.12xlarge",
        "--start", "2026-11-03T00:00:00", "--end", "2026-11-03T03:00:00",
    )  # fmt: skip
    _ok("ingest", "billing", str(bill))
    _ok("deployments", "add", "demo")
    _ok("deployments", "add-replica", "demo", "r1", "--gpus", "4")
    usage = tmp_path / "usage.jsonl"
    with usage.open("w") as stream:
        write_jsonl(
            stream,
            [
                UsageEvent(
                    **usage_record(
                        deployment="demo",
                        arrived=at(hour, 10 * k, day=3, month=11),
                        seconds=30,
                        gpu_ns=(k + 1) * 60 * 10**9,
                        team=("search", "ads")[k % 2],
                        session_id=f"s{k % 3}",
                    )
                )
                for hour in range(3)
                for k in range(4)
            ],
        )
    for _ in range(2):  # loaded twice: the store keeps both files, the plan reads each id once
        loaded = json.loads(_ok("ingest", "usage", str(usage), "--store", STORE, "--json"))
        assert loaded["usage"]["inserted"] == 12
    keys = [
        o["Key"]
        for o in bucket.list_objects_v2(Bucket=BUCKET)["Contents"]
        if o["Key"].endswith(".parquet")
    ]
    assert len([k for k in keys if k.startswith("specledger/usage/month=2026-11/")]) == 6, keys
    assert "specledger/usage/month=2026-11/deployment=demo/hour=2026-11-03T00/" in "".join(keys)

    summary = json.loads(_ok("allocate", "--month", "2026-11", "--store", STORE, "--json"))
    # 3 instance-hours split over 4 requests each plus idle, and the networking row shared.
    assert summary["entries"] == 3 * (4 + 1) + 4 * 3
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(LedgerEntry)) == 0
        assert conn.scalar(select(func.sum(LedgerRollup.entries))) == summary["entries"]
    report = json.loads(_ok("reconcile", "--month", "2026-11", "--json"))
    assert report["balanced"] is True
    # Unit costs read the entries and the usage from the bucket, and add up to the bill.
    costs = json.loads(_ok("costs", "--month", "2026-11", "--by", "team,session", "--json"))
    lines = {(line["team"], line["session"]): line for line in costs["lines"]}
    assert sum(line["requests"] for line in lines.values()) == 12
    assert lines[("search", "s0")]["completion_tokens"] == 3 * 50  # k = 0 in each hour
    total = sum(Decimal(line["effective_cost"]) for line in lines.values())
    assert total == Decimal(report["currencies"]["USD"]["bill"]["effective"])
    # The FOCUS allocation export streams the bucket's entries: a row per share, summing
    # back to the bill.
    focus = tmp_path / "focus.parquet"
    _ok("export", "chargeback", "--month", "2026-11", "--format", "focus", "--out", str(focus))
    shares = pq.read_table(focus)
    assert shares.num_rows == summary["entries"]
    assert pc.sum(shares["EffectiveCost"]).as_py() == total

    _ok("ledger", "close", "2026-11", "--yes")
    assert "unchanged since the close" in _ok("ledger", "verify", "2026-11")
    entry_keys = sorted(
        o["Key"]
        for o in bucket.list_objects_v2(Bucket=BUCKET, Prefix="specledger/entries/")["Contents"]
        if o["Key"].endswith(".parquet")
    )
    assert entry_keys[0].startswith("specledger/entries/month=2026-11/run=")
    bucket.put_object(Bucket=BUCKET, Key=entry_keys[0], Body=b"not the closed month's file")
    tampered = runner.invoke(app, ["ledger", "verify", "2026-11"])
    assert tampered.exit_code == 1
    assert tampered.stdout.startswith(f"changed: {entry_keys[0].removeprefix('specledger/')}")


def test_an_s3_store_whose_bucket_is_missing_is_a_clear_error(
    cli_env: str, bucket: S3Client, tmp_path: Path
) -> None:
    usage = tmp_path / "usage.jsonl"
    with usage.open("w") as stream:
        write_jsonl(stream, [UsageEvent(**usage_record(arrived=at(1) + timedelta(minutes=1)))])
    result = runner.invoke(
        app,
        [
            "ingest",
            "usage",
            str(usage),
            "--store",
            "s3://no-such-bucket/x",
            "--allow-unknown-deployments",
        ],
    )
    assert result.exit_code == 2
    assert "store s3://no-such-bucket/x: cannot write usage" in result.stderr
    assert "testing" not in result.stderr  # no credential in the message


def test_store_usage_copies_a_month_from_the_database_to_a_folder(
    cli_env: str, engine: Engine, tmp_path: Path
) -> None:
    usage = tmp_path / "usage.jsonl"
    with usage.open("w") as stream:
        write_jsonl(
            stream,
            [
                UsageEvent(**usage_record(arrived=at(h, day=3, month=11), session_id=f"s{h}"))
                for h in range(3)
            ]
            + [UsageEvent(**usage_record(arrived=at(0, day=3, month=12)))],  # not November
        )
    _ok("deployments", "add", "d1")
    _ok("ingest", "usage", str(usage))
    nameless = runner.invoke(app, ["ledger", "store-usage", "2026-11"])
    assert nameless.exit_code == 2
    assert "name the store" in nameless.stderr
    folder = tmp_path / "store"
    assert _ok("ledger", "store-usage", "2026-11", "--store", str(folder)).startswith(
        f"3 usage records of 2026-11 copied to {folder}"
    )
    hours = sorted(p.parent.name for p in folder.rglob("*.parquet"))
    assert hours == ["hour=2026-11-03T00", "hour=2026-11-03T01", "hour=2026-11-03T02"]
