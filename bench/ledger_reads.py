"""The ledger's commands on a large month in the embedded database (SQLite), each timed beside
bare SQL doing the least the same read must do, in the same run.

    .venv/bin/python -m bench.ledger_reads [--sizes 1000000,10000000] [--keep DIR] [--no-bare]

A month of requests (the fleet and sessions of bench/allocate.py for that size) is written
into a fresh SQLite database, with a synthetic FOCUS bill for the fleet (p4d.24xlarge hours
and daily networking, ``specledger billing synth``) ingested by the CLI. Then, each as the
user runs it (``specledger ...`` in a child process, its own peak memory):

- ``allocate --month``: the plan over the month read from the database, entries written;
- ``costs --by team,session --json``: unit costs per team and session, against a bare
  ``GROUP BY`` of the entries joined to their requests (costs, GPU-ns, requests, tokens);
- ``export chargeback --format focus``: the FOCUS 1.3 allocation to Parquet, against the
  entries joined to their billing rows streamed by sqlite3 to a Parquet writer;
- the same month with a Parquet store (``ledger store-usage``, then ``allocate --store``
  from a database holding only the bill and the registry, then ``costs`` read from the
  store), the unit costs checked identical to the database's.

Printed: seconds, peak MB and, for reads, the ratio to the bare SQL.
"""

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sqlalchemy import create_engine

from app.kit.bulk import bulk_insert
from bench.allocate import DEPLOYMENT, GPUS_PER_INSTANCE, HOURS, PERIOD, START_US, TEAMS, fleet_for

HOUR_US = 3_600_000_000
BATCH_ROWS = 100_000


def seed(
    folder: Path, requests: int, *, usage: bool = True, name: str = "ledger.db"
) -> dict[str, str]:
    """A migrated SQLite database holding the month (its usage too, unless ``usage`` is
    false); the environment that points at it."""
    env = {**os.environ, "SPECLEDGER_DATABASE_URL": f"sqlite:///{folder / name}"}
    gpus, sessions = fleet_for(requests)
    instances = gpus // GPUS_PER_INSTANCE
    bill = folder / "bill.parquet"
    cli(env, "db", "upgrade")
    cli(env, "deployments", "add", DEPLOYMENT)
    for i in range(instances):
        cli(env, "deployments", "add-replica", DEPLOYMENT, f"r{i}", "--gpus", "8")
    cli(
        env,
        "billing",
        "synth",
        "--out",
        str(bill),
        "--month",
        str(PERIOD),
        "--instance-type",
        "p4d.24xlarge",
        "--instances",
        str(instances),
        "--tag",
        f"specledger-deployment={DEPLOYMENT}",
    )
    cli(env, "ingest", "billing", str(bill))
    if not usage:
        return env
    engine = create_engine(env["SPECLEDGER_DATABASE_URL"])
    with engine.begin() as conn:
        for table in usage_batches(requests, sessions, instances):
            bulk_insert(conn, "usage_records", table)
    engine.dispose()
    return env


def usage_batches(requests: int, sessions: int, replicas: int, seed: int = 7) -> Any:
    """The month's requests as usage_records rows, a batch at a time, spread evenly."""
    rng = np.random.default_rng(seed)
    span = HOURS * HOUR_US - 20_000_000
    for first in range(0, requests, BATCH_ROWS):
        n = min(BATCH_ROWS, requests - first)
        ids = np.arange(first, first + n)
        arrived = START_US + (ids * (span // requests)) + rng.integers(0, 1000, n)
        seconds = rng.integers(1_000_000, 20_000_000, n)
        session = rng.integers(0, sessions, n)
        completion = rng.integers(20, 800, n)
        drafted = completion * 3 // 2
        stamp = pa.timestamp("us", tz="UTC")
        yield pa.table(
            {
                "event_id": pa.array(np.char.add("e", ids.astype(str))),
                "session_id": pa.array(np.char.add("s", session.astype(str))),
                "team": pa.array(TEAMS[session % len(TEAMS)]),
                "tags": pa.array(["{}"] * n),
                "deployment": pa.array([DEPLOYMENT] * n),
                "replica": pa.array(np.char.add("r", (session % replicas).astype(str))),
                "model": pa.array(["meta-llama/Llama-3.1-70B-Instruct"] * n),
                "endpoint": pa.array(["chat"] * n),
                "streamed": pa.array(np.ones(n, bool)),
                "spec_method": pa.array(["eagle"] * n),
                "spec_k": pa.array(np.full(n, 3), pa.int64()),
                "arrived_at": pa.array(arrived, stamp),
                "first_token_at": pa.array(arrived + 200_000, stamp),
                "finished_at": pa.array(arrived + seconds, stamp),
                "prompt_tokens": pa.array(rng.integers(50, 4000, n), pa.int64()),
                "cached_tokens": pa.array(np.zeros(n, np.int64)),
                "completion_tokens": pa.array(completion, pa.int64()),
                "num_drafts": pa.array(drafted // 3, pa.int64()),
                "draft_tokens": pa.array(drafted, pa.int64()),
                "accepted_tokens": pa.array(completion * 2 // 3, pa.int64()),
                "gpu_ns": pa.array(
                    (seconds * 1000 * rng.uniform(0.2, 2.0, n)).astype(np.int64), pa.int64()
                ),
                "concurrency": pa.array(rng.integers(1, 64, n), pa.int64()),
                "status": pa.array(["ok"] * n),
            }
        )


def cli(env: dict[str, str], *args: str, out: Path | None = None) -> dict[str, float]:
    """Run ``specledger ARGS`` in a child; its seconds and peak MB (stdout to ``out``)."""
    command = [sys.executable, "-c", "from app.cli import main; main()", *args]
    return _timed(command, f"specledger {' '.join(args)}", env=env, out=out)


def _timed(
    command: list[str], what: str, *, env: dict[str, str] | None = None, out: Path | None = None
) -> dict[str, float]:
    """Run ``command`` as a child; its seconds and peak MB (its own max RSS)."""
    with open(out or os.devnull, "wb") as sink:
        begin = time.perf_counter()
        child = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.perf_counter() - begin
        errors = child.stderr.read().decode() if child.stderr else ""
    if status != 0:
        raise SystemExit(f"{what} failed:\n{errors}")
    return {"seconds": seconds, "max_rss_mb": usage.ru_maxrss / 1024}


COSTS_SQL = """
SELECT u.team, u.session_id, count(*), sum(c.effective), sum(c.billed), sum(u.gpu_ns),
       sum(u.completion_tokens), sum(u.draft_tokens), sum(u.accepted_tokens)
FROM usage_records u
JOIN (SELECT event_id, sum(effective_cost_micros) AS effective,
             sum(billed_cost_micros) AS billed
      FROM ledger_entries WHERE event_id IS NOT NULL GROUP BY event_id) c
  ON c.event_id = u.event_id
GROUP BY u.team, u.session_id
"""

FOCUS_SQL = """
SELECT e.id, e.billing_row_id, e.pool_id, e.kind, e.method, e.event_id, e.session_id, e.team,
       e.effective_cost_micros, e.billed_cost_micros, e.list_cost_micros,
       e.contracted_cost_micros, e.currency, v.*, a.*
FROM ledger_entries e
LEFT JOIN ledger_pool_rows p ON p.pool_id = e.pool_id AND p.run_id = e.run_id
LEFT JOIN billing_rows v ON v.id = coalesce(e.billing_row_id, p.billing_row_id)
LEFT JOIN billing_row_attributes a ON a.id = v.attributes_id
"""


def bare(database: Path, sql: str, out: Path | None) -> dict[str, float]:
    """Run ``sql`` with sqlite3 in a child, its rows to Parquet when ``out`` is set."""
    script = (
        "import sqlite3, sys, pyarrow as pa, pyarrow.parquet as pq\n"
        "con = sqlite3.connect(sys.argv[1]); cur = con.execute(sys.argv[2])\n"
        "names = [d[0] for d in cur.description]; writer = None\n"
        "while rows := cur.fetchmany(50000):\n"
        "    if sys.argv[3] == '-': continue\n"
        "    batch = pa.table(dict(zip(names, map(list, zip(*rows)))))\n"
        "    writer = writer or pq.ParquetWriter(sys.argv[3], batch.schema)\n"
        "    writer.write_table(batch.cast(writer.schema))\n"
        "writer and writer.close()\n"
    )
    command = [sys.executable, "-c", script, str(database), sql, str(out) if out else "-"]
    return _timed(command, "bare SQL")


def run_size(folder: Path, requests: int, *, database_reads: bool = True) -> None:
    begin = time.perf_counter()
    env = seed(folder, requests)
    database = folder / "ledger.db"
    print(f"{requests:,} requests: seeded in {time.perf_counter() - begin:.0f} s", flush=True)
    month = str(PERIOD)
    _line("startup (--help)", cli(env, "--help"), None, "what every command below includes")
    allocated = cli(env, "allocate", "--month", month)
    entries = sqlite3.connect(database).execute("SELECT count(*) FROM ledger_entries").fetchone()
    _line("allocate", allocated, None, f"{entries[0]:,} entries")
    costs_out = folder / "costs.json"
    costs = cli(env, "costs", "--month", month, "--by", "team,session", "--json", out=costs_out)
    lines = len(json.loads(costs_out.read_text())["lines"])
    reference = bare(database, COSTS_SQL, None) if database_reads else None
    _line("costs --by team,session", costs, reference, f"{lines:,} lines")
    if not database_reads:
        run_store(folder, requests, env, costs_out)
        return
    focus_out = folder / "focus.parquet"
    focus = cli(
        env, "export", "chargeback", "--month", month, "--format", "focus", "--out", str(focus_out)
    )
    reference = bare(database, FOCUS_SQL, folder / "bare.parquet")
    rows = pq.ParquetFile(focus_out).metadata.num_rows
    _line("export --format focus", focus, reference, f"{rows:,} rows")
    run_store(folder, requests, env, costs_out)


def run_store(folder: Path, requests: int, env: dict[str, str], costs_in_database: Path) -> None:
    """The same month with a Parquet store: usage copied there from the database above, the
    month allocated into it from a database that holds only the bill and the registry, and
    unit costs read back; they must equal the database's."""
    month, store = str(PERIOD), str(folder / "store")
    copied = cli(env, "ledger", "store-usage", month, "--store", store)
    _line("ledger store-usage", copied, None, "the month's usage, database to Parquet")
    store_env = seed(folder, requests, usage=False, name="ledger-store.db")
    allocated = cli(store_env, "allocate", "--month", month, "--store", store)
    files = sum(f.stat().st_size for f in (folder / "store" / "entries").rglob("*.parquet"))
    _line("allocate --store", allocated, None, f"entries to Parquet, {files / 1e6:,.0f} MB")
    costs_out = folder / "costs-store.json"
    costs = cli(
        store_env, "costs", "--month", month, "--by", "team,session", "--json", out=costs_out
    )
    same = json.loads(costs_out.read_text()) == json.loads(costs_in_database.read_text())
    _line(
        "costs (store)",
        costs,
        None,
        "identical to the database's" if same else "DIFFERENT from the database's",
    )
    if not same:
        raise SystemExit("unit costs from the store differ from the database's")


def _line(name: str, ours: dict[str, float], ref: dict[str, float] | None, what: str) -> None:
    text = f"  {name:<24} {ours['seconds']:7.1f} s {ours['max_rss_mb']:6.0f} MB  {what}"
    if ref:
        text += (
            f" | bare SQL {ref['seconds']:6.1f} s {ref['max_rss_mb']:6.0f} MB"
            f" | ratio {ours['seconds'] / ref['seconds']:.2f}x"
        )
    print(text, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000000", help="Requests a month, comma-separated.")
    parser.add_argument("--keep", type=Path, help="Build the databases here and keep them.")
    parser.add_argument(
        "--no-bare",
        action="store_true",
        help="Skip the bare SQL references and the FOCUS export from the database (the "
        "longest steps at 10M): allocate, costs and the store run only.",
    )
    args = parser.parse_args()
    for size in (int(s) for s in args.sizes.split(",")):
        if args.keep:
            folder = args.keep / str(size)
            folder.mkdir(parents=True, exist_ok=False)
            run_size(folder, size, database_reads=not args.no_bare)
        else:
            with tempfile.TemporaryDirectory(prefix="specledger-reads-") as tmp:
                run_size(Path(tmp), size, database_reads=not args.no_bare)


if __name__ == "__main__":
    main()
