"""Every GET route and dashboard on a month of 1M and 10M ledger entries, with an admin key
and a team key, over real HTTP; the time per route at each size and the ratio between sizes.

    .venv/bin/python -m bench.reads [--sizes 1000000,10000000] [--postgres URL] [--keep DIR]
                                    [--json OUT]

Each size gets a fresh database (a SQLite file by default, or a database ``specledger_bench_
reads`` created on the server of ``--postgres``), migrated to head. The registry, a synthetic
FOCUS bill (``billing synth``: 6 p4d.24xlarge instances hourly and daily networking) and a
budget go in through the API. The month itself is bulk-written (COPY on PostgreSQL) as an
allocation would leave it, without running one: 50 teams, 3 deployments of 2 instances (one
speculating with eagle, one with ngram, one plainly), sessions of about 200 requests, one
request entry per request in its deployment-hour's pool, an idle entry per pool, each team's
share of each day's networking row, the pools' billing rows, the current run and its
rollups. Entries: the size asked for; requests: that less the idle and shared entries.

Then each route is called once as admin and once with team ``team-07``'s key (a team key
reads its team only; admin-only routes give 403 to it and are shown as such), in the order
listed, against the app served by uvicorn in this process. Printed per size: seconds per
route and key; then per route and key the ratio of the largest size's time to the
smallest's, against the ratio of the sizes (at most that ratio: no faster than linear).
"""

import argparse
import json
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pyarrow as pa
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from app import migrate
from app.auth.service import create_key
from app.db import make_engine
from app.domain.periods import Month
from app.kit.bulk import bulk_insert
from app.main import create_app
from app.models import BillingRow
from app.settings import Settings
from bench.common import fresh_postgres, serve

MONTH = Month.parse("2026-11")
HOUR_US = 3_600_000_000
START_US = int(MONTH.start.timestamp()) * 1_000_000
TEAMS = np.array([f"team-{i:02d}" for i in range(50)])
TEAM = "team-07"
DEPLOYMENTS = ("chat-70b", "code-8b", "batch-8b")
METHODS = np.array(["eagle", "ngram", "none"])
REPLICAS = 2
"""Replicas (instances of 8 GPUs) per deployment."""
REQUESTS_PER_SESSION = 200
BATCH = 200_000
MICROS_PER_GPU_NS = 1 / 110_000
"""About a p4d.24xlarge GPU-hour's price ($4.10) per GPU-nanosecond, in micros."""

ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/v1/whoami", {}),
    ("/v1/costs", {"month": str(MONTH), "by": "team"}),
    ("/v1/costs", {"month": str(MONTH), "by": "team,session"}),
    ("/v1/allocation", {"window": str(MONTH), "aggregate": "team", "step": "day"}),
    ("/v1/allocation", {"window": str(MONTH), "aggregate": "session,model", "idle": "separate"}),
    ("/v1/chargeback", {"month": str(MONTH), "format": "csv"}),
    ("/v1/chargeback", {"month": str(MONTH), "format": "focus-csv"}),
    ("/v1/reconciliation", {"month": str(MONTH)}),
    ("/v1/ledger/closures", {}),
    ("/v1/sessions", {"window": str(MONTH)}),
    ("/v1/sessions/{session}", {}),
    ("/v1/waste", {"window": str(MONTH)}),
    ("/v1/anomalies", {}),
    ("/v1/budgets", {}),
    ("/v1/budgets/budget-team-07", {}),
    ("/v1/speculation/positions", {"window": str(MONTH)}),
    ("/v1/slurm/jobs", {"month": str(MONTH)}),
    ("/v1/slurm/usage", {"month": str(MONTH)}),
    ("/v1/deployments", {}),
    ("/v1/breakeven/sweeps", {}),
    ("/v1/tiers", {}),
    ("/dashboards/cost", {"month": str(MONTH)}),
    ("/dashboards/speculation", {"month": str(MONTH)}),
    ("/dashboards/breakeven", {"month": str(MONTH)}),
    ("/dashboards/tiers", {"month": str(MONTH)}),
    ("/dashboards/budgets", {"month": str(MONTH)}),
]


def route_name(path: str, params: dict[str, Any]) -> str:
    shown = {k: v for k, v in params.items() if k not in ("month", "window")}
    return path + ("?" + "&".join(f"{k}={v}" for k, v in shown.items()) if shown else "")


def build(
    url: str, entries: int, folder: Path, days: int
) -> tuple[dict[str, str], dict[str, float]]:
    """The month (its first ``days`` days) in a fresh database at ``url``; the keys (admin,
    team) and build seconds."""
    begin = time.perf_counter()
    migrate.upgrade(url)
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        keys = {
            "admin": create_key(session, team=None, admin=True).secret,
            "team": create_key(session, team=TEAM, admin=False).secret,
        }
    admin = {"Authorization": f"Bearer {keys['admin']}"}
    bill = folder / "bill.csv"
    _write_bill(bill, days)
    app = create_app(Settings(env="dev", database_url=url, data_dir=folder))
    with serve(app) as base, httpx.Client(base_url=base, headers=admin, timeout=600) as client:
        for name in DEPLOYMENTS:
            _ok(client.post("/v1/deployments", json={"name": name}))
            for r in range(REPLICAS):
                replica = {"name": f"{name}-r{r}", "gpus": 8}
                _ok(client.post(f"/v1/deployments/{name}/replicas", json=replica))
        _ok(client.post("/v1/billing/ingest", json={"location": str(bill)}))
        budget = {"name": f"budget-{TEAM}", "scope": f"team={TEAM}", "amount": "5000"}
        _ok(client.post("/v1/budgets", json=budget))
    setup = time.perf_counter() - begin
    _write_month(engine, entries, days * 24)
    engine.dispose()
    return keys, {"setup_s": setup, "build_s": time.perf_counter() - begin}


def _write_bill(out: Path, days: int) -> None:
    from app.catalog import instance_prices
    from ingest.synth import SynthSpec, synth_rows, write_bill

    spec = SynthSpec(
        instance=instance_prices()["p4d.24xlarge"],
        start=MONTH.start,
        end=MONTH.start + timedelta(days=days),
        billing_period_start=MONTH.start,
        billing_period_end=MONTH.end,
        tags={"specledger-deployment": DEPLOYMENTS[0]},
        instances=len(DEPLOYMENTS) * REPLICAS,
    )
    write_bill(synth_rows(spec), out)


def _ok(response: httpx.Response) -> None:
    if response.status_code >= 300:
        raise SystemExit(f"{response.request.url}: {response.status_code} {response.text}")


def _write_month(engine: Engine, entries: int, hours: int) -> None:
    """Usage, entries, pool rows, the run and its rollups, bulk-written."""
    with Session(engine) as session:
        rows = session.execute(
            select(BillingRow.id, BillingRow.charge_period_start, BillingRow.charge_period_end)
            .where(BillingRow.charge_period_start >= MONTH.start)
            .order_by(BillingRow.charge_period_start, BillingRow.id)
        ).all()
    spans = [(row_id, end - start) for row_id, start, end in rows if start and end]
    hourly = [row_id for row_id, span in spans if span == timedelta(hours=1)]
    daily = [row_id for row_id, span in spans if span != timedelta(hours=1)]
    instances = len(DEPLOYMENTS) * REPLICAS
    # Instance k of each hour serves deployment k // REPLICAS; a pool is a deployment-hour,
    # named by its first row.
    row_ids = np.array(hourly, np.int64).reshape(hours, instances)
    pools = row_ids[:, ::REPLICAS]  # [hour, deployment]
    idle_count = hours * len(DEPLOYMENTS)
    shared_count = len(daily) * len(TEAMS)
    requests = entries - idle_count - shared_count
    if requests < len(TEAMS) * 10:
        raise SystemExit(f"{entries:,} entries is too few for a month of {len(TEAMS)} teams")
    run_id = 1
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO allocation_runs (id, month, window_start, window_end, share_idle, "
                "status, created_at, entry_count, summary) VALUES (:id, :month, :start, :end, "
                ":share, 'current', :now, :count, '{}')"
            ),
            {
                "id": run_id,
                "month": str(MONTH),
                "start": MONTH.start,
                "end": MONTH.end,
                "share": False,
                "now": datetime.now(UTC),
                "count": entries,
            },
        )
        if conn.dialect.name == "postgresql":  # the row above named its id
            conn.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('allocation_runs', 'id'), 1)"
            )
        pool_rows = pa.table(
            {
                "run_id": pa.array(np.full(row_ids.size, run_id), pa.int64()),
                "pool_id": pa.array(np.repeat(pools.ravel(), REPLICAS), pa.int64()),
                "billing_row_id": pa.array(row_ids.ravel(), pa.int64()),
            }
        )
        bulk_insert(conn, "ledger_pool_rows", pool_rows)
        for usage, ledger in _request_batches(requests, pools, run_id, hours):
            bulk_insert(conn, "usage_records", usage)
            bulk_insert(conn, "ledger_entries", ledger)
        bulk_insert(conn, "ledger_entries", _other_entries(pools, daily, run_id))
        conn.exec_driver_sql(_ROLLUPS)
        if conn.dialect.name == "postgresql":
            # Every table, as autovacuum would have: without statistics on allocation_runs
            # the planner took the current runs' entries for a few thousand rows and drove
            # a team's waste report from the whole month's entries (7.3 s at 1M, 1.3 s).
            conn.exec_driver_sql("ANALYZE")


def _request_batches(
    requests: int, pools: np.ndarray, run_id: int, hours: int
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """The month's requests (arriving evenly over it) and their entries, a batch at a time."""
    rng = np.random.default_rng(28)
    sessions = max(len(TEAMS), requests // REQUESTS_PER_SESSION)
    span = hours * HOUR_US - 30_000_000
    stamp = pa.timestamp("us", tz="UTC")
    for first in range(0, requests, BATCH):
        n = min(BATCH, requests - first)
        ids = np.arange(first, first + n)
        arrived = START_US + ids * (span // requests) + rng.integers(0, 1000, n)
        seconds = rng.integers(1_000_000, 20_000_000, n)
        session = rng.integers(0, sessions, n)
        deployment = session % len(DEPLOYMENTS)
        replica = rng.integers(0, REPLICAS, n)
        completion = rng.integers(20, 800, n)
        speculating = deployment != 2
        drafted = np.where(speculating, completion * 3 // 2, 0)
        accepted = np.where(speculating, drafted * rng.integers(20, 90, n) // 100, 0)
        gpu_ns = (seconds * 1000 * rng.uniform(0.2, 2.0, n)).astype(np.int64)
        hour = (arrived - START_US) // HOUR_US
        event_id = pa.array(np.char.add("e", ids.astype(str)))
        session_id = pa.array(np.char.add("s", session.astype(str)))
        team = pa.array(TEAMS[session % len(TEAMS)])
        names = np.array(DEPLOYMENTS)[deployment]
        replicas = np.char.add(np.char.add(names, "-r"), replica.astype(str))
        usage = pa.table(
            {
                "event_id": event_id,
                "session_id": session_id,
                "team": team,
                "cost_center": pa.array(np.char.add("cc-", TEAMS[session % len(TEAMS)])),
                "tags": pa.array(["{}"] * n),
                "deployment": pa.array(names),
                "replica": pa.array(replicas),
                "model": pa.array(np.where(deployment == 0, "llama-3.1-70b", "llama-3.1-8b")),
                "endpoint": pa.array(["chat.completions"] * n),
                "streamed": pa.array(np.ones(n, bool)),
                "spec_method": pa.array(METHODS[deployment]),
                "spec_k": pa.array(np.where(speculating, 4, 0), pa.int64()),
                "arrived_at": pa.array(arrived, stamp),
                "first_token_at": pa.array(arrived + 200_000, stamp),
                "finished_at": pa.array(arrived + seconds, stamp),
                "prompt_tokens": pa.array(rng.integers(50, 4000, n), pa.int64()),
                "cached_tokens": pa.array(np.zeros(n, np.int64)),
                "completion_tokens": pa.array(completion, pa.int64()),
                "num_drafts": pa.array(drafted // 4, pa.int64()),
                "draft_tokens": pa.array(drafted, pa.int64()),
                "accepted_tokens": pa.array(accepted, pa.int64()),
                "gpu_ns": pa.array(gpu_ns, pa.int64()),
                "concurrency": pa.array(rng.integers(1, 64, n), pa.int64()),
                "status": pa.array(["ok"] * n),
            }
        )
        cost = (gpu_ns * MICROS_PER_GPU_NS).astype(np.int64)
        ledger = pa.table(
            {
                "run_id": pa.array(np.full(n, run_id), pa.int64()),
                "booked_month": pa.array([str(MONTH)] * n),
                "kind": pa.array(["request"] * n),
                "method": pa.array(["gpu_seconds"] * n),
                "pool_id": pa.array(pools[hour, deployment], pa.int64()),
                "charge_period_start": pa.array(START_US + hour * HOUR_US, stamp),
                "charge_period_end": pa.array(START_US + (hour + 1) * HOUR_US, stamp),
                "deployment": pa.array(names),
                "replica": pa.array(replicas),
                "event_id": event_id,
                "session_id": session_id,
                "team": team,
                "gpu_ns": pa.array(gpu_ns, pa.int64()),
                "effective_cost_micros": pa.array(cost, pa.int64()),
                "billed_cost_micros": pa.array(cost, pa.int64()),
                "list_cost_micros": pa.array(cost, pa.int64()),
                "contracted_cost_micros": pa.array(cost, pa.int64()),
                "currency": pa.array(["USD"] * n),
            }
        )
        yield usage, ledger


def _other_entries(pools: np.ndarray, daily: list[int], run_id: int) -> pa.Table:
    """An idle entry per pool (deployment-hour), and each team's share of each day's
    networking row."""
    grid = np.meshgrid(np.arange(len(pools)), np.arange(len(DEPLOYMENTS)), indexing="ij")
    hours, deployments = grid[0].ravel(), grid[1].ravel()
    days = np.repeat(np.arange(len(daily)), len(TEAMS))
    n_idle, n_shared = len(hours), len(days)
    stamp = pa.timestamp("us", tz="UTC")
    start = np.concatenate([START_US + hours * HOUR_US, START_US + days * 24 * HOUR_US])
    end = np.concatenate([start[:n_idle] + HOUR_US, start[n_idle:] + 24 * HOUR_US])
    cost = np.concatenate([np.full(n_idle, 9_000_000), np.full(n_shared, 40_000)])
    return pa.table(
        {
            "run_id": pa.array(np.full(n_idle + n_shared, run_id), pa.int64()),
            "booked_month": pa.array([str(MONTH)] * (n_idle + n_shared)),
            "kind": pa.array(["idle"] * n_idle + ["shared"] * n_shared),
            "method": pa.array(["gpu_seconds"] * n_idle + ["even"] * n_shared),
            "billing_row_id": pa.array(
                np.concatenate([np.full(n_idle, -1), np.array(daily, np.int64)[days]]),
                pa.int64(),
                mask=np.arange(n_idle + n_shared) < n_idle,
            ),
            "pool_id": pa.array(pools[hours, deployments].tolist() + [None] * n_shared, pa.int64()),
            "charge_period_start": pa.array(start, stamp),
            "charge_period_end": pa.array(end, stamp),
            "deployment": pa.array(
                np.array(DEPLOYMENTS)[deployments].tolist() + [None] * n_shared, pa.string()
            ),
            "team": pa.array(
                [None] * n_idle + TEAMS[np.tile(np.arange(len(TEAMS)), len(daily))].tolist(),
                pa.string(),
            ),
            "gpu_ns": pa.array(np.zeros(n_idle + n_shared, np.int64)),
            "effective_cost_micros": pa.array(cost, pa.int64()),
            "billed_cost_micros": pa.array(cost, pa.int64()),
            "list_cost_micros": pa.array(cost, pa.int64()),
            "contracted_cost_micros": pa.array(cost, pa.int64()),
            "currency": pa.array(["USD"] * (n_idle + n_shared)),
        }
    )


_KEYS = (
    "pool_id, billing_row_id, charge_period_start, charge_period_end, deployment, team, kind, "
    "method, currency, corrects_month"
)
_ROLLUPS = f"""INSERT INTO ledger_rollups (run_id, booked_month, {_KEYS}, entries, gpu_ns,
    effective_cost_micros, billed_cost_micros, list_cost_micros, contracted_cost_micros)
SELECT run_id, booked_month, {_KEYS}, count(*), sum(gpu_ns), sum(effective_cost_micros),
    sum(billed_cost_micros), sum(list_cost_micros), sum(contracted_cost_micros)
FROM ledger_entries GROUP BY run_id, booked_month, {_KEYS}"""


def time_routes(
    url: str, keys: dict[str, str], folder: Path, skip: tuple[str, ...] = ()
) -> dict[str, dict[str, Any]]:
    """Each route's seconds (or refusal) per key: ``{route: {"admin": s, "team": s}}``."""
    with make_engine(url).connect() as conn:
        session = conn.execute(
            text("SELECT session_id FROM usage_records WHERE team = :t LIMIT 1"), {"t": TEAM}
        ).scalar_one()
    timings: dict[str, dict[str, Any]] = {}
    app = create_app(Settings(env="dev", database_url=url, data_dir=folder))
    with serve(app) as base, httpx.Client(base_url=base, timeout=3600) as client:
        for path, params in ROUTES:
            name = route_name(path, params)
            if any(part in name for part in skip):
                continue
            timings[name] = {}
            for who, key in keys.items():
                begin = time.perf_counter()
                response = client.get(
                    path.replace("{session}", session),
                    params=params,
                    headers={"Authorization": f"Bearer {key}"},
                )
                seconds = time.perf_counter() - begin
                if response.status_code == 200:
                    timings[name][who] = seconds
                elif response.status_code == 403 and who == "team":
                    timings[name][who] = "403"
                else:
                    raise SystemExit(
                        f"{name} as {who}: {response.status_code} {response.text[:500]}"
                    )
            print(
                f"  {name:<58} {_cell(timings[name], 'admin')} {_cell(timings[name], 'team')}",
                flush=True,
            )
    return timings


def _cell(timing: dict[str, Any], who: str) -> str:
    value = timing.get(who)
    return f"{value:>9.3f}" if isinstance(value, float) else f"{value or '-':>9}"


def run_size(
    entries: int,
    folder: Path,
    postgres: str | None,
    days: int = 30,
    callers: tuple[str, ...] = ("admin", "team"),
    skip: tuple[str, ...] = (),
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    if postgres:
        url = fresh_postgres(postgres, "specledger_bench_reads")
    else:
        url = f"sqlite+pysqlite:///{folder / 'reads.db'}"
    keys, build_times = build(url, entries, folder, days)
    keys = {who: key for who, key in keys.items() if who in callers}
    print(
        f"{entries:,} entries ({'PostgreSQL' if postgres else 'SQLite'}): built in "
        f"{build_times['build_s']:.0f} s\n  {'route':<58} {'admin s':>9} {'team s':>9}",
        flush=True,
    )
    return build_times, time_routes(url, keys, folder, skip)


def time_built(
    url: str, folder: Path, callers: tuple[str, ...], skip: tuple[str, ...]
) -> tuple[int, dict[str, dict[str, Any]]]:
    """Time the routes on a month this bench built before (``--keep``), with new keys."""
    engine = make_engine(url)
    with Session(engine) as session, session.begin():
        entries = session.execute(text("SELECT count(*) FROM ledger_entries")).scalar_one()
        keys = {
            "admin": create_key(session, team=None, admin=True).secret,
            "team": create_key(session, team=TEAM, admin=False).secret,
        }
    engine.dispose()
    print(f"{entries:,} entries (built before)\n  {'route':<58} {'admin s':>9} {'team s':>9}")
    chosen = {who: key for who, key in keys.items() if who in callers}
    return int(entries), time_routes(url, chosen, folder, skip)


def ratios(results: dict[int, dict[str, dict[str, Any]]]) -> dict[str, dict[str, float]]:
    """Per route and key: the largest size's seconds over the smallest's."""
    low, high = min(results), max(results)
    out: dict[str, dict[str, float]] = {}
    for name, timing in results[high].items():
        for who, seconds in timing.items():
            before = results[low][name].get(who)
            if isinstance(seconds, float) and isinstance(before, float):
                out.setdefault(name, {})[who] = seconds / before
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000000", help="Ledger entries, comma-separated.")
    parser.add_argument("--postgres", help="A PostgreSQL server URL (default: SQLite files).")
    parser.add_argument("--keep", type=Path, help="Build the SQLite databases here and keep them.")
    parser.add_argument("--json", type=Path, help="Also write the figures here as JSON.")
    parser.add_argument(
        "--skip",
        action="append",
        default=[],
        metavar="TEXT",
        help="Leave out the routes whose name contains TEXT (repeatable), e.g. focus-csv.",
    )
    parser.add_argument(
        "--database",
        help="Time the routes on a month built before with --keep (its URL); no build.",
    )
    parser.add_argument(
        "--keys", default="admin,team", help="Which keys call the routes: admin, team or both."
    )
    parser.add_argument(
        "--days",
        type=int,
        default=30,
        choices=range(1, 31),
        metavar="1..30",
        help="Days of the month with billing and usage (fewer: a quick run; the FOCUS export's "
        "time grows with the billing rows).",
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    callers = tuple(k for k in args.keys.split(",") if k)
    if not callers or set(callers) - {"admin", "team"}:
        parser.error("--keys: admin, team or admin,team")
    results: dict[int, dict[str, dict[str, Any]]] = {}
    builds: dict[int, dict[str, float]] = {}
    skip = tuple(args.skip)
    for size in [] if args.database else sizes:
        if args.keep:
            folder = args.keep / str(size)
            folder.mkdir(parents=True, exist_ok=False)
            builds[size], results[size] = run_size(
                size, folder, args.postgres, args.days, callers, skip
            )
        else:
            with tempfile.TemporaryDirectory(prefix="specledger-bench-reads-") as tmp:
                builds[size], results[size] = run_size(
                    size, Path(tmp), args.postgres, args.days, callers, skip
                )
    if args.database:
        folder = Path(tempfile.mkdtemp(prefix="specledger-bench-reads-"))
        size, timed = time_built(args.database, folder, callers, skip)
        results[size] = timed
        sizes = [size]
    report: dict[str, Any] = {
        "database": "postgresql" if args.postgres or "postgres" in str(args.database) else "sqlite",
        "sizes": sizes,
        "builds": {str(k): v for k, v in builds.items()},
        "seconds": {str(k): v for k, v in results.items()},
    }
    if len(sizes) > 1:
        growth = ratios(results)
        linear = max(sizes) / min(sizes)
        print(f"ratio {max(sizes):,} / {min(sizes):,} entries (linear: {linear:.0f}x)")
        for name, by_key in growth.items():
            cells = "  ".join(f"{who} {ratio:6.2f}x" for who, ratio in by_key.items())
            worst = max(by_key.values())
            print(
                f"  {name:<58} {cells}{'  GROWS FASTER THAN LINEAR' if worst > linear * 1.2 else ''}"
            )
        report["ratios"] = growth
        report["linear_ratio"] = linear
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
