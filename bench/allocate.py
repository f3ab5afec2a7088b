"""Allocation benchmark: one month of a deployment of 8 GPUs with 1,000,000 requests over
10,000 sessions, allocated on SQLite and on PostgreSQL, beside a reference allocation of the
same data written as one DuckDB SQL query.

    .venv/bin/python -m bench.allocate [--requests 1000000] [--postgres URL]

Each allocation runs in a child process so its peak memory (max RSS) is its own. Targets:
under 60 s and under 2 GB peak on the 2-core reference machine.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from sqlalchemy import text
from sqlalchemy.orm import Session

from app import migrate
from app.allocation.service import run_allocation
from app.allocation.windowing import Window
from app.catalog import instance_prices
from app.db import make_engine, unit_of_work
from app.deployments.service import add_deployment, add_replica
from app.domain.periods import Month
from app.kit.bulk import bulk_insert
from bench.common import fresh_postgres
from ingest.service import IngestOptions, ingest_billing
from ingest.synth import SynthSpec, synth_rows, write_bill

MONTH = "2026-11"
PERIOD = Month.parse(MONTH)
TAG = "specledger-deployment"


def usage_table(requests: int, sessions: int, seed: int = 11) -> pa.Table:
    rng = np.random.default_rng(seed)
    start, end = PERIOD.start, PERIOD.end
    span_ns = int((end - start).total_seconds() * 1e9)
    arrived = np.sort(rng.integers(0, span_ns - 20 * 10**9, size=requests)) + int(
        start.timestamp() * 1e9
    )
    duration = rng.integers(1 * 10**9, 10 * 10**9, size=requests)
    gpu_ns = (duration * 8 * rng.uniform(0.02, 0.3, size=requests)).astype(np.int64)
    session = rng.integers(0, sessions, size=requests)
    teams = np.array(["search", "ads", "platform", "research", "support"])
    stamp = pa.timestamp("ns", tz="UTC")
    return pa.table(
        {
            "event_id": pa.array(np.char.add("e", np.arange(requests).astype(str))),
            "session_id": pa.array(np.char.add("s", session.astype(str))),
            "team": pa.array(teams[session % len(teams)]),
            "tags": pa.array(np.full(requests, "{}")),
            "deployment": pa.array(np.full(requests, "llama-8b")),
            "replica": pa.array(np.full(requests, "r1")),
            "model": pa.array(np.full(requests, "llama-3.1-8b")),
            "endpoint": pa.array(np.full(requests, "chat.completions")),
            "streamed": pa.array(np.ones(requests, bool)),
            "spec_method": pa.array(np.full(requests, "draft_model")),
            "spec_k": pa.array(np.full(requests, 4, np.int32)),
            "arrived_at": pa.array(arrived, stamp),
            "finished_at": pa.array(arrived + duration, stamp),
            "prompt_tokens": pa.array(rng.integers(50, 2000, size=requests).astype(np.int32)),
            "cached_tokens": pa.array(np.zeros(requests, np.int32)),
            "completion_tokens": pa.array(rng.integers(20, 500, size=requests).astype(np.int32)),
            "num_drafts": pa.array(np.full(requests, 50, np.int32)),
            "draft_tokens": pa.array(np.full(requests, 200, np.int32)),
            "accepted_tokens": pa.array(np.full(requests, 120, np.int32)),
            "gpu_ns": pa.array(gpu_ns),
            "concurrency": pa.array(np.ones(requests, np.int32)),
            "status": pa.array(np.full(requests, "ok")),
        }
    )


def prepare(url: str, folder: Path, usage: pa.Table) -> None:
    migrate.upgrade(url)
    start, end = PERIOD.start, PERIOD.end
    bill = folder / "bill.csv"
    if not bill.exists():
        write_bill(
            synth_rows(
                SynthSpec(
                    instance_prices()["p4d.24xlarge"], start, end, start, end, {TAG: "llama-8b"}
                )
            ),
            bill,
        )
    engine = make_engine(url)
    ingest_billing(engine, str(bill), IngestOptions(source="bench"))
    with Session(engine) as session, session.begin():
        add_deployment(session, name="llama-8b")
        add_replica(session, deployment="llama-8b", name="r1", gpus=8)
        bulk_insert(session.connection(), "usage_records", usage)
    engine.dispose()


def child_allocate(url: str) -> None:
    engine = make_engine(url)
    begin = time.perf_counter()
    with unit_of_work(engine) as session:
        summary = run_allocation(session, Window.of_month(PERIOD), share_idle=False, tag_key=TAG)
    seconds = time.perf_counter() - begin
    print(
        json.dumps(
            {
                "seconds": seconds,
                "entries": summary.entries,
                "total_micros": sum(sum(k.values()) for k in summary.totals.values()),
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def child_duckdb(folder: str) -> None:
    """The reference: the same split (shares of each hourly row by GPU-seconds, idle as the
    remainder) as one DuckDB query over Parquet copies of the inputs."""
    import duckdb

    begin = time.perf_counter()
    relation = duckdb.sql(f"""
        WITH rows AS (SELECT * FROM '{folder}/rows.parquet'),
             req AS (SELECT * FROM '{folder}/usage.parquet'),
             pairs AS (
               SELECT r.row_id, r.cost, r.capacity, q.event_id,
                      q.gpu_ns::DOUBLE * (least(q.finished, r.end_ns) - greatest(q.arrived, r.start_ns))
                        / greatest(q.finished - q.arrived, 1) AS w
               FROM rows r JOIN req q ON q.arrived < r.end_ns AND q.finished > r.start_ns),
             shares AS (
               SELECT row_id, event_id, floor(cost * w / capacity)::BIGINT AS part,
                      cost * w / capacity - floor(cost * w / capacity) AS rem
               FROM pairs)
        SELECT sum(part) FROM shares""")
    assert relation is not None
    total = relation.fetchall()[0]
    seconds = time.perf_counter() - begin
    print(
        json.dumps(
            {
                "seconds": seconds,
                "requests_share_micros": int(total[0] or 0),
                "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def export_reference_inputs(url: str, folder: Path) -> None:
    import pyarrow.parquet as pq

    engine = make_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT id, charge_period_start, charge_period_end, effective_cost_micros "
                "FROM billing_rows WHERE service_category = 'Compute'"
            )
        ).all()
    engine.dispose()

    def to_ns(value: datetime | str) -> int:
        instant = value if isinstance(value, datetime) else datetime.fromisoformat(value)
        return int(instant.replace(tzinfo=UTC).timestamp() * 1e9)

    pq.write_table(
        pa.table(
            {
                "row_id": [r[0] for r in rows],
                "start_ns": [to_ns(r[1]) for r in rows],
                "end_ns": [to_ns(r[2]) for r in rows],
                "cost": [r[3] for r in rows],
                "capacity": [8 * (to_ns(r[2]) - to_ns(r[1])) for r in rows],
            }
        ),
        folder / "rows.parquet",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SPECLEDGER_TEST_POSTGRES_URL",
            "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/specledger_test",
        ),
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        (child_allocate if args.child[0] == "allocate" else child_duckdb)(args.child[1])
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        usage = usage_table(args.requests, args.sessions)
        import pyarrow.parquet as pq

        pq.write_table(
            pa.table(
                {
                    "event_id": usage["event_id"],
                    "arrived": usage["arrived_at"].cast(pa.int64()),
                    "finished": usage["finished_at"].cast(pa.int64()),
                    "gpu_ns": usage["gpu_ns"],
                }
            ),
            folder / "usage.parquet",
        )
        urls = {
            "sqlite": f"sqlite+pysqlite:///{folder / 'bench.db'}",
            "postgresql": fresh_postgres(args.postgres, "specledger_bench_alloc"),
        }
        results = {}
        for name, url in urls.items():
            prepare(url, folder, usage)
            results[name] = _child("allocate", url)
        export_reference_inputs(urls["sqlite"], folder)
        results["duckdb"] = _child("duckdb", str(folder))
        reference = results["duckdb"]["seconds"]
        for name in ("sqlite", "postgresql", "duckdb"):
            r = results[name]
            print(
                f"{name:10} {r['seconds']:7.1f} s  peak {r['max_rss_mb']:7.0f} MB  "
                f"ratio to DuckDB {r['seconds'] / reference:5.1f}x",
                flush=True,
            )
        print(json.dumps({"requests": args.requests, **results}))


def _child(kind: str, arg: str) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.allocate", "--child", kind, arg],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"{kind} child failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


if __name__ == "__main__":
    main()
