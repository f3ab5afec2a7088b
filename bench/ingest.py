"""Ingest benchmark: a 1,000,000-row FOCUS 1.2 file (CSV.gz and Parquet) into SQLite and
PostgreSQL, timed side by side with a bare pyarrow read of the same file.

    .venv/bin/python -m bench.ingest [--rows 1000000] [--postgres URL]

Prints rows/s and the ratio of end-to-end ingest time to the bare read (target: <= 5x, and
under 30 s into PostgreSQL on the 2-core reference machine), then the time each database
takes to store the already-normalised rows alone: the floor under the end-to-end time.
Every figure is the median of several runs, with the lowest and highest in brackets.
"""

import argparse
import contextlib
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError

from app import migrate
from app.db import make_engine
from bench.common import fresh_postgres
from ingest.load import insert_rows
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

    def fmt(instants: np.ndarray) -> np.ndarray:
        return np.char.add(np.datetime_as_string(instants, unit="s"), "Z")

    prices = rng.choice(["5.672", "21.957642", "55.04", "0.0416", "1.006"], size=resources)
    quantity = np.round(rng.uniform(0.01, 1.0, size=rows), 6)
    cost = np.char.mod("%.6f", quantity * prices[resource].astype(float))
    teams = rng.choice(["search", "ads", "platform", "research"], size=resources)
    tags = np.char.add(
        np.char.add('{"specledger-deployment":"dep-', (resource % 50).astype(str)),
        np.char.add('","team":"', np.char.add(teams[resource], '"}')),
    )
    constant = {
        "BillingAccountId": "123456789012",
        "BillingAccountName": "bench",
        "BillingAccountType": "Billing Account",
        "BillingCurrency": "USD",
        "BillingPeriodStart": "2026-11-01T00:00:00Z",
        "BillingPeriodEnd": "2026-12-01T00:00:00Z",
        "ChargeCategory": "Usage",
        "ChargeDescription": "instance hour",
        "ChargeFrequency": "Usage-Based",
        "InvoiceIssuerName": "AWS",
        "PricingCategory": "Standard",
        "PricingUnit": "Hours",
        "ConsumedUnit": "Hours",
        "ProviderName": "AWS",
        "PublisherName": "AWS",
        "ServiceCategory": "Compute",
        "ServiceName": "EC2",
        "ServiceSubcategory": "Virtual Machines",
        "RegionId": "us-east-1",
        "ResourceType": "Instance",
    }
    columns: dict[str, pa.Array] = {k: pa.array(np.full(rows, v)) for k, v in constant.items()}
    columns |= {
        "ChargeClass": pa.nulls(rows, pa.string()),
        "ChargePeriodStart": pa.array(fmt(starts)),
        "ChargePeriodEnd": pa.array(fmt(starts + np.timedelta64(1, "h"))),
        "BilledCost": pa.array(cost),
        "EffectiveCost": pa.array(cost),
        "ListCost": pa.array(cost),
        "ContractedCost": pa.array(cost),
        "PricingQuantity": pa.array(quantity.astype(str)),
        "ConsumedQuantity": pa.array(quantity.astype(str)),
        "ListUnitPrice": pa.array(prices[resource]),
        "ResourceId": pa.array(np.char.add("i-", resource.astype(str))),
        "SkuId": pa.array(np.char.add("SKU", (resource % 5).astype(str))),
        "Tags": pa.array(tags),
        "x_ServiceCode": pa.array(np.full(rows, "AmazonEC2")),
    }
    return pa.table(columns)


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def settle(engine: Engine) -> None:
    """Let the previous run's writes reach the disk first, so that no run pays for another's
    (PostgreSQL's CHECKPOINT needs a superuser or pg_checkpoint; without, the run goes on)."""
    os.sync()
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn, contextlib.suppress(DBAPIError):
            conn.exec_driver_sql("CHECKPOINT")


def ingest_once(url: str, path: Path) -> float:
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        settle(engine)
        seconds = timed(lambda: ingest_billing(engine, str(path), IngestOptions()))
    finally:
        engine.dispose()
    return seconds


def normalised(path: Path) -> tuple[pa.Table, pa.Table]:
    """The file's rows as the loader receives them: values, and attributes with the file."""
    rows = normalise_file(read_billing_file(path), NormaliseOptions())
    return rows.values, rows.attributes.append_column(
        "source_file", pa.array([path.name] * rows.attributes.num_rows)
    )


def write_only(url: str, rows: tuple[pa.Table, pa.Table]) -> float:
    """Seconds the database takes to store normalised rows, with nothing else going on: the
    floor under the end-to-end time."""
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        settle(engine)
        with engine.begin() as conn:
            return timed(lambda: insert_rows(conn, 0, *rows))
    finally:
        engine.dispose()


def median_seconds(fn: Callable[[], float], runs: int) -> tuple[float, float, float]:
    """Median, lowest and highest of ``runs`` timings: one run on these machines is noise."""
    times = sorted(fn() for _ in range(runs))
    return statistics.median(times), times[0], times[-1]


def bare_read(path: Path) -> float:
    return timed(lambda: pq.read_table(path) if path.suffix == ".parquet" else pacsv.read_csv(path))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="ingests timed per format and "
        "database (the median is reported; bare reads are timed 2x as often)",
    )
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SPECLEDGER_TEST_POSTGRES_URL",
            "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/specledger_test",
        ),
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        table = make_focus_table(args.rows)
        files = {"csv.gz": folder / "bench.csv.gz", "parquet": folder / "bench.parquet"}
        for path in files.values():
            write_bill(table, path)

        def url_for(db: str) -> str:
            if db == "postgresql":
                return fresh_postgres(args.postgres, "specledger_bench")
            database = folder / "bench.db"
            database.unlink(missing_ok=True)
            return f"sqlite+pysqlite:///{database}"

        results = []
        bare_reads = {}
        for fmt, path in files.items():
            bare, bare_low, bare_high = median_seconds(
                lambda p=path: bare_read(p),  # type: ignore[misc]
                2 * args.runs,
            )
            bare_reads[fmt] = bare
            for db in ("sqlite", "postgresql"):
                seconds, low, high = median_seconds(
                    functools.partial(ingest_once, url_for(db), path), args.runs
                )
                results.append(
                    {
                        "format": fmt,
                        "database": db,
                        "rows": args.rows,
                        "bare_read_s": round(bare, 2),
                        "ingest_s": round(seconds, 2),
                        "ingest_range_s": [round(low, 2), round(high, 2)],
                        "rows_per_s": round(args.rows / seconds),
                        "ratio_to_bare_read": round(seconds / bare, 1),
                    }
                )
                print(
                    f"{fmt:8} {db:10} ingest {seconds:5.1f} s ({low:.1f}-{high:.1f}) "
                    f"{args.rows / seconds:8.0f} rows/s  bare read {bare:4.2f} s "
                    f"({bare_low:.2f}-{bare_high:.2f})  ratio {seconds / bare:4.1f}x",
                    flush=True,
                )
        rows = normalised(files["parquet"])
        for db in ("sqlite", "postgresql"):
            seconds, low, high = median_seconds(
                functools.partial(write_only, url_for(db), rows), args.runs
            )
            results.append(
                {
                    "format": "normalised rows",
                    "database": db,
                    "rows": args.rows,
                    "write_only_s": round(seconds, 2),
                }
            )
            print(
                f"{'rows':8} {db:10} write alone {seconds:5.1f} s ({low:.1f}-{high:.1f}; the "
                f"floor: {seconds / bare_reads['csv.gz']:3.1f}x the csv.gz bare read, "
                f"{seconds / bare_reads['parquet']:3.1f}x the Parquet one)",
                flush=True,
            )
        print(json.dumps(results))


if __name__ == "__main__":
    main()
