"""Allocation at scale: a month of 1M, 10M and 30M requests through the allocation plan,
beside a bare DuckDB query doing the same split, in the same run.

    .venv/bin/python -m bench.allocate [--sizes 1000000,10000000,30000000] [--spark-at 10000000]

Each month is one deployment of 8 to 64 GPUs (p4d.24xlarge instances of 8 GPUs, one billing
row per instance and hour, tagged to the deployment, so they pool), 10k to 100k sessions,
and one month-long support fee among the hourly rows (shared by GPU-seconds: the skewed row
the plan splits in two levels). The usage is a Parquet dataset partitioned by day.

End to end, each contestant reads the usage files, allocates, writes the entries to Parquet,
and (the plan) reads them back for the rollups. Each runs in a child process so its peak
memory (max RSS) is its own. The reference is one hand-written DuckDB statement with the
same largest-remainder split in HUGEINT, for the same four cost bases, the fee row split
flat. Printed: seconds, peak MB, entries, and the plan's ratio to the reference. Targets
(issue 12): at most 1.5x the reference, 10M in under 60 s on 2 cores, peak memory under 3 GB
at 30M and not growing with the month.
"""

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from app.allocation.engine import EngineName, PlanEngine, conform
from app.allocation.plan import HOUR_US
from app.domain.periods import Month

PERIOD = Month.parse("2026-11")
START_US = int(PERIOD.start.timestamp()) * 1_000_000
END_US = int(PERIOD.end.timestamp()) * 1_000_000
HOURS = (END_US - START_US) // HOUR_US
GPUS_PER_INSTANCE = 8
INSTANCE_HOUR_MICROS = 32_772_800  # p4d.24xlarge on demand, $32.7728 an hour
FEE_MICROS = 2_500_000_000  # a $2,500 monthly support fee
DEPLOYMENT = "llama-70b"
TEAMS = np.array(["search", "ads", "platform", "research", "support", "growth", "infra", "labs"])
FLEETS = {1_000_000: (8, 10_000), 10_000_000: (32, 50_000), 30_000_000: (64, 100_000)}
"""Requests a month -> (GPUs, sessions)."""
MEMORY_LIMIT = "2GB"


def fleet_for(requests: int) -> tuple[int, int]:
    for size in sorted(FLEETS):
        if requests <= size:
            return FLEETS[size]
    return FLEETS[max(FLEETS)]


def write_usage(folder: Path, requests: int, sessions: int, gpus: int, seed: int = 7) -> None:
    """The month's requests as Parquet files, one folder per day (hive partitioning)."""
    rng = np.random.default_rng(seed)
    days = HOURS // 24
    per_day = np.full(days, requests // days)
    per_day[: requests % days] += 1
    ordinal = 0
    replicas = gpus // GPUS_PER_INSTANCE
    for day, count in enumerate(per_day):
        n = int(count)
        day_start = START_US + day * 24 * HOUR_US
        arrived = day_start + np.sort(rng.integers(0, 24 * HOUR_US - 20_000_000, n))
        seconds = rng.integers(1_000_000, 20_000_000, n)
        session = rng.integers(0, sessions, n)
        ids = np.arange(ordinal, ordinal + n)
        table = pa.table(
            {
                "usage_ord": pa.array(ids, pa.int64()),
                "event_id": pc.binary_join_element_wise("e", pa.array(ids).cast(pa.string()), ""),
                "session_id": pc.binary_join_element_wise(
                    "s", pa.array(session).cast(pa.string()), ""
                ),
                "team": pa.array(TEAMS[session % len(TEAMS)]),
                "deployment": pa.array(np.full(n, DEPLOYMENT)),
                "replica": pa.array(np.char.add("r", (session % replicas).astype(str))),
                "arrived_us": pa.array(arrived, pa.int64()),
                "finished_us": pa.array(arrived + seconds, pa.int64()),
                "gpu_ns": pa.array(
                    (seconds * 1000 * rng.uniform(0.2, 2.0, n)).astype(np.int64), pa.int64()
                ),
            }
        )
        part = folder / "usage" / f"day={day + 1:02d}"
        part.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, part / "part-0.parquet")
        ordinal += n


def small_inputs(gpus: int) -> dict[str, pa.Table]:
    """Billing rows (one per instance and hour, plus the fee) and the registry."""
    instances = gpus // GPUS_PER_INSTANCE
    hours = np.repeat(np.arange(HOURS), instances)
    n = len(hours)
    rows = {
        "row_id": np.arange(1, n + 2),
        "start_us": np.append(START_US + hours * HOUR_US, START_US),
        "end_us": np.append(START_US + (hours + 1) * HOUR_US, END_US),
        "effective": np.append(np.full(n, INSTANCE_HOUR_MICROS), FEE_MICROS),
        "billed": np.append(np.full(n, INSTANCE_HOUR_MICROS), FEE_MICROS),
        "list_cost": np.append(np.full(n, INSTANCE_HOUR_MICROS), FEE_MICROS),
        "contracted": np.append(np.full(n, INSTANCE_HOUR_MICROS), FEE_MICROS),
    }
    return {
        "rows": pa.table(
            {
                **{k: pa.array(v, pa.int64()) for k, v in rows.items()},
                "currency": pa.array(["USD"] * (n + 1)),
                "tag_value": pa.array([DEPLOYMENT] * (n + 1)),
                "resource_id": pa.array([f"i-{i % instances}" for i in range(n)] + [None]),
                "category_compute": pa.array([True] * n + [False]),
                "corrects_month": pa.nulls(n + 1, pa.string()),
            }
        ),
        "deployments": pa.table(
            {
                "deployment": [DEPLOYMENT],
                "tag_value": [DEPLOYMENT],
                "gpus_total": pa.array([gpus], pa.int64()),
                "shared_policy": ["proportional"],
                "shared_team": pa.nulls(1, pa.string()),
            }
        ),
        "replicas": pa.table(
            {
                "deployment": [DEPLOYMENT] * instances,
                "replica": [f"r{i}" for i in range(instances)],
                "gpus": pa.array([GPUS_PER_INSTANCE] * instances, pa.int64()),
                "resource_id": pa.nulls(instances, pa.string()),
            }
        ),
    }


def child_plan(folder: Path, gpus: int, engine_name: str) -> dict[str, Any]:
    engine = PlanEngine(
        EngineName(engine_name),
        spark_partitions=16,
        duckdb_options={
            "threads": 2,
            "memory_limit": MEMORY_LIMIT,
            "temp_directory": str(folder / "spill"),
            "preserve_insertion_order": False,
        },
    )
    begin = time.perf_counter()
    run = engine.allocate_dataset(
        small_inputs(gpus),
        str(folder / "usage" / "*" / "*.parquet"),
        folder / f"out-{engine_name}",
        share_idle=False,
    )
    seconds = time.perf_counter() - begin
    total = int(pc.sum(run.rollups["effective_cost_micros"]).as_py())
    return {"seconds": seconds, "entries": run.entries, "total_micros": total}


REFERENCE_SQL = """
COPY (
WITH u AS (SELECT usage_ord, event_id, team, arrived_us AS a, finished_us AS f, gpu_ns AS g
           FROM read_parquet('{usage}')),
rows AS (SELECT * FROM read_parquet('{rows}')),
hourly AS (SELECT start_us, end_us, min(row_id) AS pool,
                  sum(effective)::HUGEINT AS c1, sum(billed)::HUGEINT AS c2,
                  sum(list_cost)::HUGEINT AS c3, sum(contracted)::HUGEINT AS c4
           FROM rows WHERE end_us - start_us <= {hour} GROUP BY start_us, end_us),
uh AS (SELECT *, unnest(range(a - a % {hour},
                              greatest(f - 1, a) - greatest(f - 1, a) % {hour} + {hour},
                              {hour})) AS hour FROM u),
pairs AS (SELECT h.pool, uh.usage_ord, uh.event_id, uh.team, uh.a,
                 CASE WHEN uh.a >= h.start_us AND uh.f <= h.end_us THEN uh.g
                      ELSE (uh.g::HUGEINT * (least(uh.f, h.end_us) - greatest(uh.a, h.start_us)))
                           // greatest(uh.f - uh.a, 1) END AS w,
                 h.c1, h.c2, h.c3, h.c4, h.end_us - h.start_us AS span
          FROM uh JOIN hourly h ON uh.hour = h.start_us
          WHERE greatest(uh.a - uh.a % {hour}, h.start_us) = uh.hour),
idle AS (SELECT pool, NULL::BIGINT AS usage_ord, NULL AS event_id, NULL AS team, 0 AS a,
                greatest({gpus} * span * 1000 - sum(w), 0) AS w, c1, c2, c3, c4, span
         FROM pairs GROUP BY pool, c1, c2, c3, c4, span),
fee AS (SELECT r.row_id AS pool, u.usage_ord, u.event_id, u.team, u.a, u.g::HUGEINT AS w,
               r.effective::HUGEINT AS c1, r.billed::HUGEINT AS c2, r.list_cost::HUGEINT AS c3,
               r.contracted::HUGEINT AS c4, 0 AS span
        FROM u, rows r WHERE r.end_us - r.start_us > {hour}),
m AS (SELECT *, sum(w) OVER (PARTITION BY pool) AS wsum
      FROM (SELECT * FROM pairs UNION ALL SELECT * FROM idle UNION ALL SELECT * FROM fee)),
q AS (SELECT *, (c1 * w) // wsum AS b1, (c1 * w) % wsum AS r1, (c2 * w) // wsum AS b2,
             (c2 * w) % wsum AS r2, (c3 * w) // wsum AS b3, (c3 * w) % wsum AS r3,
             (c4 * w) // wsum AS b4, (c4 * w) % wsum AS r4 FROM m),
k AS (SELECT *,
        c1 - sum(b1) OVER (PARTITION BY pool) AS l1,
        row_number() OVER (PARTITION BY pool ORDER BY r1 DESC, event_id IS NULL, a, usage_ord) AS k1,
        c2 - sum(b2) OVER (PARTITION BY pool) AS l2,
        row_number() OVER (PARTITION BY pool ORDER BY r2 DESC, event_id IS NULL, a, usage_ord) AS k2,
        c3 - sum(b3) OVER (PARTITION BY pool) AS l3,
        row_number() OVER (PARTITION BY pool ORDER BY r3 DESC, event_id IS NULL, a, usage_ord) AS k3,
        c4 - sum(b4) OVER (PARTITION BY pool) AS l4,
        row_number() OVER (PARTITION BY pool ORDER BY r4 DESC, event_id IS NULL, a, usage_ord) AS k4
      FROM q)
SELECT pool, event_id, team, w::BIGINT AS gpu_ns,
       (b1 + (k1 <= l1)::INT)::BIGINT AS effective_cost_micros,
       (b2 + (k2 <= l2)::INT)::BIGINT AS billed_cost_micros,
       (b3 + (k3 <= l3)::INT)::BIGINT AS list_cost_micros,
       (b4 + (k4 <= l4)::INT)::BIGINT AS contracted_cost_micros
FROM k) TO '{out}' (FORMAT parquet)
"""


def child_reference(folder: Path, gpus: int) -> dict[str, Any]:
    import duckdb

    rows_path = folder / "rows.parquet"
    pq.write_table(conform("rows", small_inputs(gpus)["rows"]), rows_path)
    con = duckdb.connect(
        config={
            "threads": 2,
            "memory_limit": MEMORY_LIMIT,
            "temp_directory": str(folder / "spill-ref"),
            "preserve_insertion_order": False,
        }
    )
    out = folder / "reference.parquet"
    begin = time.perf_counter()
    con.execute(
        REFERENCE_SQL.format(
            usage=folder / "usage" / "*" / "*.parquet",
            rows=rows_path,
            out=out,
            hour=HOUR_US,
            gpus=gpus,
        )
    )
    seconds = time.perf_counter() - begin
    entries, total = con.execute(
        f"SELECT count(*), sum(effective_cost_micros) FROM '{out}'"
    ).fetchone() or (0, 0)
    return {"seconds": seconds, "entries": int(entries), "total_micros": int(total)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000000,10000000,30000000")
    parser.add_argument(
        "--spark-at", type=int, default=10_000_000, help="Size to run Spark at too (0: never)."
    )
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, folder, gpus, engine_name = args.child
        result = (
            child_reference(Path(folder), int(gpus))
            if kind == "reference"
            else child_plan(Path(folder), int(gpus), engine_name)
        )
        result["max_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(json.dumps(result))
        return
    report = []
    for size in (int(s) for s in args.sizes.split(",")):
        gpus, sessions = fleet_for(size)
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            write_usage(folder, size, sessions, gpus)
            reference = _child("reference", folder, gpus, "duckdb")
            plan = _child("plan", folder, gpus, "duckdb")
            spark = _child("plan", folder, gpus, "spark") if size == args.spark_at else None
        bill = gpus // GPUS_PER_INSTANCE * HOURS * INSTANCE_HOUR_MICROS + FEE_MICROS
        assert plan["total_micros"] == bill, (plan["total_micros"], bill)
        assert reference["total_micros"] == bill, (reference["total_micros"], bill)
        line = {
            "requests": size,
            "gpus": gpus,
            "sessions": sessions,
            "plan": plan,
            "reference": reference,
            "ratio": plan["seconds"] / reference["seconds"],
            "spark": spark,
        }
        report.append(line)
        print(
            f"{size:>11,} requests {gpus:>3} GPUs {sessions:>7,} sessions | plan "
            f"{plan['seconds']:6.1f} s {plan['max_rss_mb']:6.0f} MB {plan['entries']:>11,} entries"
            f" | reference {reference['seconds']:6.1f} s {reference['max_rss_mb']:6.0f} MB"
            f" {reference['entries']:>11,} entries | ratio {line['ratio']:4.2f}x"
            + (
                f" | spark local[2] {spark['seconds']:6.1f} s"
                f" ({spark['seconds'] / plan['seconds']:.1f}x DuckDB)"
                if spark
                else ""
            ),
            flush=True,
        )
    print(json.dumps(report))


def _child(kind: str, folder: Path, gpus: int, engine_name: str) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.allocate",
            "--child",
            kind,
            str(folder),
            str(gpus),
            engine_name,
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise SystemExit(f"{kind} ({engine_name}) failed:\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  {kind} on {engine_name}: {json.dumps(result)}", flush=True)
    return result


if __name__ == "__main__":
    main()
