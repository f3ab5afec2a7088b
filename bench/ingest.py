"""Ingest benchmark: a 1,000,000-row FOCUS 1.2 file (CSV.gz and Parquet) into SQLite and
PostgreSQL, timed side by side with a bare pyarrow read of the same file.

    .venv/bin/python -m bench.ingest [--rows 1000000] [--postgres URL]

Prints rows/s and the ratio of end-to-end ingest time to the bare read (target: <= 5x, and
under 30 s into PostgreSQL on the 2-core reference machine), then the time each database
takes to store the already-normalised rows alone: the floor under the end-to-end time.
"""

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from app import migrate
from app.db import make_engine
from bench.common import fresh_postgres
from ingest.load import OpenDelivery, insert_rows
from ingest.normalize import NormaliseOptions, normalise_file
from ingest.readers import read_billing_file
from ingest.service import IngestOptions, ingest_billing
from ingest.synth import write_bill

HOURS = 720  # November


def make_focus_table(rows: int, seed: int = 7) -> pa.Table:
    """A realistic FOCUS 1.2 month: hourly rows for many resources, varied prices and tags."""
    rng = np.random.default_rng(seed)
    resources = -(-rows // HOURS)
    resource = np.arange(rows) // HOURS
    hour = np.arange(rows) % HOURS
    starts = np.datetime64("2026-11-01T00:00:00") + hour.astype("timedelta64[h]")
    fmt = lambda a: np.char.add(np.datetime_as_string(a, unit="s"), "Z")  # noqa: E731
    prices = rng.choice(["5.672", "21.957642", "55.04", "0.0416", "1.006"], size=resources)
    quantity = np.round(rng.uniform(0.01, 1.0, size=rows), 6)
    cost = np.char.mod("%.6f", quantity * prices[resource].astype(float))
    teams = rng.choice(["search", "ads", "platform", "research"], size=resources)
    tags = np.char.add(np.char.add('{"specledger-deployment":"dep-', (resource % 50).astype(str)),
                       np.char.add('","team":"', np.char.add(teams[resource], '"}')))
    constant = {
        "BillingAccountId": "123456789012", "BillingAccountName": "bench",
        "BillingAccountType": "Billing Account", "BillingCurrency": "USD",
        "BillingPeriodStart": "2026-11-01T00:00:00Z", "BillingPeriodEnd": "2026-12-01T00:00:00Z",
        "ChargeCategory": "Usage", "ChargeDescription": "instance hour",
        "ChargeFrequency": "Usage-Based", "InvoiceIssuerName": "AWS", "PricingCategory": "Standard",
        "PricingUnit": "Hours", "ConsumedUnit": "Hours", "ProviderName": "AWS",
        "PublisherName": "AWS", "ServiceCategory": "Compute", "ServiceName": "EC2",
        "ServiceSubcategory": "Virtual Machines", "RegionId": "us-east-1", "ResourceType": "Instance",
    }
    columns: dict[str, pa.Array] = {k: pa.array(np.full(rows, v)) for k, v in constant.items()}
    columns |= {
        "ChargeClass": pa.nulls(rows, pa.string()),
        "ChargePeriodStart": pa.array(fmt(starts)),
        "ChargePeriodEnd": pa.array(fmt(starts + np.timedelta64(1, "h"))),
        "BilledCost": pa.array(cost), "EffectiveCost": pa.array(cost), "ListCost": pa.array(cost),
        "ContractedCost": pa.array(cost), "PricingQuantity": pa.array(quantity.astype(str)),
        "ConsumedQuantity": pa.array(quantity.astype(str)),
        "ListUnitPrice": pa.array(prices[resource]),
        "ResourceId": pa.array(np.char.add("i-", resource.astype(str))),
        "SkuId": pa.array(np.char.add("SKU", (resource % 5).astype(str))),
        "Tags": pa.array(tags), "x_ServiceCode": pa.array(np.full(rows, "AmazonEC2")),
    }
    return pa.table(columns)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def ingest_once(url: str, path: Path) -> float:
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        seconds = timed(lambda: ingest_billing(engine, str(path), IngestOptions()))
    finally:
        engine.dispose()
    return seconds


def write_only(url: str, path: Path) -> float:
    """Seconds the database takes to store the file's normalised rows, with nothing else
    going on: the floor under the end-to-end time."""
    migrate.upgrade(url)
    rows = normalise_file(read_billing_file(path), NormaliseOptions())
    attributes = rows.attributes.append_column(
        "source_file", pa.array([path.name] * rows.attributes.num_rows))
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            return timed(lambda: insert_rows(conn, OpenDelivery(0), rows.values, attributes))
    finally:
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--postgres", default=os.environ.get(
        "SPECLEDGER_TEST_POSTGRES_URL",
        "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/specledger_test"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table = make_focus_table(args.rows)
        files = {"csv.gz": folder / "bench.csv.gz", "parquet": folder / "bench.parquet"}
        for path in files.values():
            write_bill(table, path)
        results = []
        for fmt, path in files.items():
            bare = timed(lambda p=path: pq.read_table(p) if p.suffix == ".parquet"  # type: ignore[misc]
                         else pacsv.read_csv(p))
            for db in ("sqlite", "postgresql"):
                url = (f"sqlite+pysqlite:///{folder / f'{fmt}.db'}" if db == "sqlite"
                       else fresh_postgres(args.postgres, "specledger_bench"))
                seconds = ingest_once(url, path)
                results.append({"format": fmt, "database": db, "rows": args.rows,
                                "bare_read_s": round(bare, 2), "ingest_s": round(seconds, 2),
                                "rows_per_s": round(args.rows / seconds),
                                "ratio_to_bare_read": round(seconds / bare, 1)})
                print(f"{fmt:8} {db:10} ingest {seconds:6.1f} s  {args.rows / seconds:9.0f} rows/s"
                      f"  bare read {bare:5.2f} s  ratio {seconds / bare:5.1f}x", flush=True)
        for db in ("sqlite", "postgresql"):
            url = (f"sqlite+pysqlite:///{folder / 'write-only.db'}" if db == "sqlite"
                   else fresh_postgres(args.postgres, "specledger_bench"))
            seconds = write_only(url, files["parquet"])
            bare = next(r["bare_read_s"] for r in results if r["format"] == "csv.gz")
            results.append({"format": "normalised rows", "database": db, "rows": args.rows,
                            "write_only_s": round(seconds, 2)})
            print(f"{'rows':8} {db:10} write alone {seconds:6.1f} s (the floor; "
                  f"{seconds / bare:4.1f}x the csv.gz bare read)", flush=True)
        print(json.dumps(results))


if __name__ == "__main__":
    main()
