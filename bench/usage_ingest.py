"""Usage ingest benchmark: `specledger ingest usage FILE` of a proxy JSONL log (1M and 10M
records) into SQLite, PostgreSQL and the Parquet store, each in a fresh process, timed
beside a bare pyarrow read of the same file (``pyarrow.json.read_json``) in the same run.

    .venv/bin/python -m bench.usage_ingest [--sizes 1000000,10000000] [--postgres URL]
        [--targets sqlite,postgresql,store]

Prints records/s per target and the ratio of its time to the bare read run just before it
(targets: at least 200,000 records/s into PostgreSQL and the store, 100,000 into SQLite, at
most 3x the bare read), with the CPU seconds of both processes (a steadier ratio on a busy
machine; the database server's CPU is not counted), then one JSON line per size with the
counts each ingest reported. The generated file is deleted after its size is done.

Into a database, a second anchor follows: the database alone writing the same rows into an
empty copy of ``usage_records`` with the same indexes (SQLite: ``INSERT ... SELECT`` from an
in-memory copy, all in C; PostgreSQL: a binary ``COPY FROM STDIN`` of the rows the ingest
wrote, timed around the server's work), so a records/s target above what the database
itself reaches on the machine shows as such.
"""

import argparse
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import make_url

from app.db import make_engine
from bench.common import fresh_postgres

IDLE_WINDOW_S = 300
DEPLOYMENTS = 8
REPLICAS = 4
_CHUNK = 500_000
CLI = [
    sys.executable,
    "-c",
    "import sys; from app.cli import main; sys.argv[0] = 'specledger'; main()",
]
_START_US = 1_796_083_200_000_000  # 2026-12-01T00:00:00Z


def write_proxy_log(path: Path, records: int, seed: int = 11, span_s: int = 86_400) -> int:
    """A realistic proxy JSONL log of ``records`` usage records over ``span_s`` seconds
    (arrival order), with an idle record per replica every five minutes among them, as
    ``specledger proxy --jsonl`` writes it. Returns the idle records written."""
    rng = np.random.default_rng(seed)
    idle = 0
    with path.open("wb") as out:
        for start in range(0, records, _CHUNK):
            count = min(_CHUNK, records - start)
            first = _START_US + start * span_s * 1_000_000 // records
            last = _START_US + (start + count) * span_s * 1_000_000 // records
            lines = _usage_lines(rng, start, count, first, last)
            windows = _idle_lines(first, last)
            idle += len(windows)
            out.write(_buffer(pa.concat_arrays([lines, windows])))
    return idle


def _buffer(lines: pa.Array) -> memoryview:
    """The lines' bytes, each ended by a newline."""
    ended = pc.binary_join_element_wise(lines, "\n", "").cast(pa.large_string())
    offsets = np.frombuffer(ended.buffers()[1], dtype=np.int64)
    first, last = offsets[ended.offset], offsets[ended.offset + len(ended)]
    return memoryview(ended.buffers()[2])[first:last]


def _hex_ids(ids: np.ndarray) -> pa.Array:
    """Distinct 16-hex-digit event ids."""
    scrambled = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).astype(">u8")
    digits = scrambled.tobytes().hex().encode()
    fixed = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(16), len(ids), [None, pa.py_buffer(digits)]
    )
    return fixed.cast(pa.binary()).cast(pa.string())


def _text(values: np.ndarray) -> pa.Array:
    return pc.cast(pa.array(values), pa.string())


def _instant(us: np.ndarray) -> pa.Array:
    stamps = pa.array(us, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pc.binary_join_element_wise(pc.strftime(stamps, "%Y-%m-%dT%H:%M:%S"), "Z", "")


def _usage_lines(rng: np.random.Generator, start: int, n: int, first: int, last: int) -> pa.Array:
    ids = np.arange(start, start + n)
    arrived = np.sort(rng.integers(first, last, n))
    ttft = rng.integers(20_000, 900_000, n)
    duration = ttft + rng.integers(50_000, 30_000_000, n)
    deployment = rng.integers(0, DEPLOYMENTS, n)
    replica = rng.integers(0, REPLICAS, n)
    spec = rng.random(n) < 0.7
    k = np.where(spec, rng.integers(2, 6, n), 0)
    steps = rng.integers(1, 200, n)
    drafts = np.where(spec, steps * k, 0)
    accepted = (drafts * rng.uniform(0.3, 0.9, n)).astype(np.int64)
    completion = accepted + steps
    failed = rng.random(n) < 0.01
    teams = np.array(["search", "ads", "platform", "research", "assist"])[ids % 5]
    hist = pc.binary_join_element_wise(
        "[", _text(steps - accepted // np.maximum(k, 1)), ",", _text(accepted // 2), ",",
        _text(accepted - accepted // 2), "]", "",
    )  # fmt: skip
    parts = [
        '{"record":"usage","event_id":"', _hex_ids(ids),
        '","session_id":"s-', _text(ids // 7), '","team":"', pa.array(teams),
        '","cost_center":"cc-', _text(ids % 5), '","tags":{"env":"prod","specledger.key":"',
        _text(ids % 40), '","specledger.via":"key"},"deployment":"dep-', _text(deployment),
        '","replica":"r', _text(replica), '","model":"Llama-3.1-8B-Instruct","endpoint":"',
        pa.array(np.where(ids % 3 == 0, "completions", "chat.completions")),
        '","streamed":', pa.array(np.where(ids % 2 == 0, "true", "false")),
        ',"spec_method":"', pa.array(np.where(spec, "draft_model", "none")),
        '","spec_k":', pa.array(np.where(spec, k.astype(str), "null")),
        ',"arrived_at":"', _instant(arrived), '","first_token_at":"', _instant(arrived + ttft),
        '","finished_at":"', _instant(arrived + duration),
        '","prompt_tokens":', _text(rng.integers(20, 4000, n)),
        ',"cached_tokens":', _text(rng.integers(0, 20, n)),
        ',"completion_tokens":', _text(completion), ',"num_drafts":', _text(np.where(spec, steps, 0)),
        ',"draft_tokens":', _text(drafts), ',"accepted_tokens":', _text(accepted),
        ',"accepted_hist":', pc.if_else(pa.array(spec), hist, "null"),
        ',"gpu_ns":', _text(duration * 1000 // np.maximum(replica, 1)),
        ',"concurrency":', _text(rng.integers(1, 32, n)),
        ',"status":"', pa.array(np.where(failed, "error", "ok")),
        '","http_status":', pa.array(np.where(failed, "500", "200")),
        ',"error":', pa.array(np.where(failed, '"upstream returned 500"', "null")), "}",
    ]  # fmt: skip
    return pc.binary_join_element_wise(*parts, "")


def _idle_lines(first: int, last: int) -> pa.Array:
    step = IDLE_WINDOW_S * 1_000_000
    ends = np.arange((first // step + 1) * step, last + 1, step)
    deployment, replica = np.arange(DEPLOYMENTS), np.arange(REPLICAS)
    grid = np.array(np.meshgrid(ends, deployment, replica, indexing="ij")).reshape(3, -1)
    end, dep, rep = grid
    parts = [
        '{"record":"replica_idle","deployment":"dep-', _text(dep), '","replica":"r', _text(rep),
        '","start_at":"', _instant(end - step), '","end_at":"', _instant(end),
        '","gpu_ns":', _text((end // 1000) % 10_000_000), "}",
    ]  # fmt: skip
    return pc.binary_join_element_wise(*parts, "")


def bare_read(path: Path) -> tuple[float, float]:
    """``pyarrow.json.read_json`` of the whole file (types inferred, all cores) in a fresh
    process: its seconds, and the CPU seconds of the process."""
    code = (
        "import sys, time, pyarrow.json as j; s = time.perf_counter(); "
        "t = j.read_json(sys.argv[1]); print(time.perf_counter() - s, t.num_rows)"
    )
    before = _children_cpu()
    done = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True,
                          text=True, check=True)  # fmt: skip
    return float(done.stdout.split()[0]), _children_cpu() - before


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ingest(
    path: Path, env: dict[str, str], store: Path | None
) -> tuple[float, float, dict[str, Any]]:
    """`specledger ingest usage FILE --json` in a fresh process: seconds, CPU seconds (of
    the process; not the database server's) and its summary."""
    # The synthetic log's deployments are not registered in the bench's fresh database.
    command = [*CLI, "ingest", "usage", str(path), "--json", "--allow-unknown-deployments"]
    if store is not None:
        command += ["--store", str(store)]
    before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, _children_cpu() - before, json.loads(done.stdout)


def database_alone(url: str) -> float:
    """Seconds the database takes to write the rows of ``usage_records`` again into an empty
    copy of the table with the same indexes (dropped afterwards), with no client work
    timed: SQLite's ``INSERT ... SELECT`` from an in-memory copy, PostgreSQL's binary COPY
    of the rows read back beforehand."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_alone(str(parsed.database))
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            return _postgres_alone(conn.connection.driver_connection)
    finally:
        engine.dispose()


def _sqlite_alone(path: str) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        ddl = [row[0] for row in db.execute(
            "SELECT sql FROM sqlite_master WHERE tbl_name = 'usage_records' "
            "AND sql IS NOT NULL ORDER BY type DESC")]  # fmt: skip
        db.execute("ATTACH ':memory:' AS held")
        db.execute("CREATE TABLE held.rows AS SELECT * FROM main.usage_records")
        db.execute(ddl[0].replace("usage_records", "usage_records_alone", 1))
        for index in ddl[1:]:
            db.execute(index.replace(" ix_", " alone_ix_").replace(
                "ON usage_records", "ON usage_records_alone"))  # fmt: skip
        start = time.perf_counter()
        db.execute("BEGIN")
        db.execute("INSERT INTO usage_records_alone SELECT * FROM held.rows")
        db.execute("COMMIT")
        seconds = time.perf_counter() - start
        db.execute("DROP TABLE usage_records_alone")
        return seconds
    finally:
        db.close()


def _postgres_alone(db: Any) -> float:
    with db.cursor() as cursor:
        held = bytearray()
        with cursor.copy("COPY usage_records TO STDOUT (FORMAT binary)") as copy:
            for chunk in copy:
                held += chunk
        cursor.execute("CREATE TABLE usage_records_alone (LIKE usage_records INCLUDING ALL)")
        start = time.perf_counter()
        with cursor.copy("COPY usage_records_alone FROM STDIN (FORMAT binary)") as copy:
            view = memoryview(held)
            for at in range(0, len(view), 1 << 20):
                copy.write(view[at : at + (1 << 20)])
        seconds = time.perf_counter() - start
        cursor.execute("DROP TABLE usage_records_alone")
    return seconds


def run(sizes: list[int], targets: list[str], postgres: str, folder: Path) -> list[dict[str, Any]]:
    results = []
    for size in sizes:
        path = folder / f"usage-{size}.jsonl"
        idle = write_proxy_log(path, size)
        row: dict[str, Any] = {"records": size, "idle": idle, "bytes": path.stat().st_size}
        print(f"{size:>11,} usage + {idle:,} idle records, {row['bytes'] / 1e6:,.0f} MB "
              "(each target is timed right after a bare read of the same file: the machine's "
              "load changes)")  # fmt: skip
        for target in targets:
            env = {**os.environ, "PYTHONPATH": os.getcwd()}
            store = None
            if target == "postgresql":
                database = f"{make_url(postgres).database}_usage_bench"
                env["SPECLEDGER_DATABASE_URL"] = fresh_postgres(postgres, database)
                subprocess.run([*CLI, "db", "upgrade"], env=env, check=True,
                               capture_output=True)  # fmt: skip
            else:
                sqlite = folder / "bench.db"
                sqlite.unlink(missing_ok=True)
                env["SPECLEDGER_DATABASE_URL"] = f"sqlite+pysqlite:///{sqlite}"
                if target == "store":
                    store = folder / "store"
                    shutil.rmtree(store, ignore_errors=True)
            os.sync()
            bare, bare_cpu = bare_read(path)
            seconds, cpu, summary = ingest(path, env, store)
            row[target] = {"seconds": seconds, "cpu_s": cpu, "bare_read_s": bare,
                           "bare_read_cpu_s": bare_cpu, "summary": summary}  # fmt: skip
            print(f"  {'bare read':<11} {bare:7.2f} s {size / bare:>9,.0f} records/s "
                  f"(cpu {bare_cpu:6.1f} s)")  # fmt: skip
            print(f"  {target:<11} {seconds:7.2f} s {size / seconds:>9,.0f} records/s "
                  f"(cpu {cpu:6.1f} s)  {seconds / bare:5.2f}x the bare read "
                  f"({cpu / bare_cpu:4.2f}x its cpu)")  # fmt: skip
            if target != "store":
                alone = database_alone(env["SPECLEDGER_DATABASE_URL"])
                row[target]["database_alone_s"] = alone
                print(f"  {'db alone':<11} {alone:7.2f} s {size / alone:>9,.0f} records/s "
                      f"(the same rows, same indexes, no client)  the ingest is "
                      f"{seconds / alone:4.2f}x it")  # fmt: skip
        path.unlink()
        print(json.dumps({"records": size, "idle": idle,
                          **{t: row[t]["summary"] for t in targets}}))  # fmt: skip
        results.append(row)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1000000")
    parser.add_argument("--targets", default="sqlite,postgresql,store")
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "SPECLEDGER_TEST_POSTGRES_URL",
            "postgresql+psycopg://postgres:postgres@127.0.0.1:5432/specledger_test",
        ),
    )
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    sizes = [int(size) for size in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        run(sizes, args.targets.split(","), args.postgres, Path(tmp))


if __name__ == "__main__":
    main()
