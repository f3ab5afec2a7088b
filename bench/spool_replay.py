"""How fast a proxy's usage sink replays a spool an earlier proxy left (a database that
was down for a while, or a proxy killed with kill -9), beside the same records inserted
straight into the database in the sink's batch size (the reference), in the same run.

    python -m bench.spool_replay [--records 100000] [--postgres URL]
"""

import argparse
import tempfile
import time
from pathlib import Path

from sqlalchemy import Engine, func, select

from app import migrate
from app.db import make_engine
from app.models import UsageRecord
from app.usage.repository import insert_usage
from bench.common import fresh_postgres
from bench.concurrent_writers import writer_events
from serving.proxy.sink import UsageSink
from serving.proxy.spool import Spool

BATCH = 500
"""The sink's batch size, and so the size of a spool segment under load."""


def replay_seconds(url: str, spool_dir: Path, records: int) -> float:
    """Seconds for a fresh sink to store a spool of ``records`` records."""
    spool = Spool(spool_dir)
    events = writer_events(0, records)
    for first in range(0, records, BATCH):
        spool.append(events[first : first + BATCH])
    spool.close()
    engine = make_engine(url)
    began = time.perf_counter()
    sink = UsageSink(engine=engine, spool_dir=spool_dir, batch_size=BATCH)
    sink.start()
    while sink.backlog.oldest() is not None:
        time.sleep(0.01)
    seconds = time.perf_counter() - began
    sink.close()
    _check(engine, records)
    return seconds


def direct_seconds(url: str, records: int) -> float:
    """Seconds to insert the same records straight, ``BATCH`` per transaction."""
    engine = make_engine(url)
    events = writer_events(0, records)
    began = time.perf_counter()
    for first in range(0, records, BATCH):
        with engine.begin() as conn:
            insert_usage(conn, events[first : first + BATCH])
    seconds = time.perf_counter() - began
    _check(engine, records)
    return seconds


def _check(engine: Engine, records: int) -> None:
    with engine.connect() as conn:
        stored = conn.scalar(select(func.count()).select_from(UsageRecord))
    engine.dispose()
    if stored != records:
        raise SystemExit(f"stored {stored} of {records} records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument(
        "--postgres",
        default="postgresql+psycopg://postgres:postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server URL (fresh databases are created on it)",
    )
    args = parser.parse_args()
    print(f"{args.records:,} records, segments of {BATCH}")
    print(f"{'database':<12}{'replay s':>10}{'direct s':>10}{'records/s':>11}{'ratio':>7}")
    with tempfile.TemporaryDirectory() as folder:
        for name in ("sqlite", "postgresql"):
            urls = [
                f"sqlite+pysqlite:///{Path(folder) / f'{name}-{n}.db'}"
                if name == "sqlite"
                else fresh_postgres(args.postgres, f"specledger_bench_spool_{n}")
                for n in (1, 2)
            ]
            for url in urls:
                migrate.upgrade(url)
            replay = replay_seconds(urls[0], Path(folder) / f"spool-{name}", args.records)
            direct = direct_seconds(urls[1], args.records)
            print(
                f"{name:<12}{replay:>10.2f}{direct:>10.2f}{args.records / replay:>11.0f}"
                f"{replay / direct:>7.2f}"
            )


if __name__ == "__main__":
    main()
