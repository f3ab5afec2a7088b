"""Many writers on one database: API clients posting usage events to `specledger serve`
and metering proxies' usage sinks, at once, a third of the event ids shared between
writers. Every distinct event must be stored exactly once, with no 5xx.

    python -m bench.concurrent_writers [--writers 32] [--events 200] [--postgres URL]

prints events/s on SQLite and on PostgreSQL, side by side, in the same run (PostgreSQL is
the reference: a server built for concurrent writers). The test suite runs the same
harness (tests/api/test_concurrent_writers.py) and checks what was stored.
"""

import argparse
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from app import migrate
from app.auth.service import create_key
from app.db import make_engine, unit_of_work
from app.domain.usage import UsageEvent
from app.main import create_app
from app.models import UsageRecord
from app.settings import Settings
from bench.common import fresh_postgres, serve
from serving.proxy.sink import UsageSink

BATCH = 20
"""Events per API request."""
START = datetime(2026, 10, 1, tzinfo=UTC)


@dataclass(slots=True)
class WritersRun:
    """What the writers sent and what the database holds afterwards."""

    writers: int
    submitted: int
    """Events sent, duplicates included."""
    distinct: set[str]
    stored: set[str]
    stored_rows: int
    statuses: Counter[int] = field(default_factory=Counter)
    """HTTP statuses the API clients got, retries included."""
    retries: int = 0
    seconds: float = 0.0

    @property
    def events_per_s(self) -> float:
        return self.submitted / self.seconds if self.seconds else 0.0


def writer_events(writer: int, count: int) -> list[UsageEvent]:
    """``count`` events of one writer: every third id is shared with the other writers."""
    return [
        _event(f"shared-{i}" if i % 3 == 0 else f"w{writer}-{i}", writer, i) for i in range(count)
    ]


def _event(event_id: str, writer: int, i: int) -> UsageEvent:
    arrived = START + timedelta(seconds=i)
    return UsageEvent(
        event_id=event_id,
        session_id=f"s{writer}",
        team="search",
        cost_center=None,
        tags={},
        deployment="d1",
        replica=f"r{writer % 4}",
        model="smollm2-135m",
        endpoint="completions",
        streamed=False,
        spec_method="ngram",
        spec_k=4,
        arrived_at=arrived,
        first_token_at=None,
        finished_at=arrived + timedelta(seconds=1),
        prompt_tokens=10,
        cached_tokens=0,
        completion_tokens=20,
        num_drafts=5,
        draft_tokens=20,
        accepted_tokens=10,
        gpu_ns=10**9,
        concurrency=1,
        status="ok",
        http_status=200,
        error=None,
    )


def run_writers(
    db_url: str, *, writers: int = 32, proxies: int = 2, events: int = 200
) -> WritersRun:
    """``writers`` writers at once on a migrated, empty database: ``proxies`` usage sinks
    (each with its own engine, as separate proxy processes have) and the rest API clients
    posting batches of :data:`BATCH`, retrying a 503 or a dropped connection as a
    well-behaved client does."""
    engine = make_engine(db_url)
    with unit_of_work(engine) as session:
        secret = create_key(session, team=None, admin=True, name="bench").secret
    sent = {w: writer_events(w, events) for w in range(writers)}
    run = WritersRun(
        writers=writers,
        submitted=writers * events,
        distinct={e.event_id for batch in sent.values() for e in batch},
        stored=set(),
        stored_rows=0,
    )
    lock = threading.Lock()
    with serve(create_app(Settings(env="test", database_url=db_url))) as base:
        start = threading.Barrier(writers)

        def api_client(events: list[UsageEvent]) -> None:
            headers = {"Authorization": f"Bearer {secret}"}
            with httpx.Client(base_url=base, headers=headers, timeout=120) as client:
                start.wait()
                for first in range(0, len(events), BATCH):
                    body = {"events": [e.to_json() for e in events[first : first + BATCH]]}
                    _post_until_answered(client, body, run, lock)

        def proxy_sink(events: list[UsageEvent]) -> None:
            sink = UsageSink(engine=make_engine(db_url), batch_size=50, flush_interval_s=0.05)
            sink.start()
            start.wait()
            for event in events:
                sink.submit(event)
            sink.close(timeout_s=120)
            assert sink.engine is not None
            sink.engine.dispose()

        threads = [
            threading.Thread(target=proxy_sink if w < proxies else api_client, args=(sent[w],))
            for w in range(writers)
        ]
        began = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        run.seconds = time.perf_counter() - began
    with engine.connect() as conn:
        run.stored = set(conn.scalars(select(UsageRecord.event_id)))
        run.stored_rows = conn.scalar(select(func.count()).select_from(UsageRecord)) or 0
    engine.dispose()
    return run


def _post_until_answered(
    client: httpx.Client, body: dict[str, Any], run: WritersRun, lock: threading.Lock
) -> None:
    for attempt in range(20):
        try:
            response = client.post("/v1/usage/events", json=body)
        except httpx.TransportError:
            status = 0
        else:
            status = response.status_code
        with lock:
            run.statuses[status] += 1
            if status in (0, 503):
                run.retries += 1
        if status not in (0, 503):
            return
        time.sleep(min(0.05 * 2**attempt, 2.0))
    raise RuntimeError("the API kept answering 503")


def _sqlite_url(folder: Path) -> str:
    return f"sqlite+pysqlite:///{folder / 'writers.db'}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--writers", type=int, default=32)
    parser.add_argument("--events", type=int, default=200, help="events per writer")
    parser.add_argument(
        "--postgres",
        default="postgresql+psycopg://postgres:postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL server URL (a fresh database is created on it)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        urls = {
            "sqlite": _sqlite_url(Path(folder)),
            "postgresql": fresh_postgres(args.postgres, "specledger_bench_writers"),
        }
        print(f"{args.writers} writers x {args.events} events, a third of the ids shared")
        print(f"{'database':<12}{'events/s':>10}{'retries':>9}{'5xx':>6}{'stored':>8}{'ratio':>7}")
        results = {}
        for name, url in urls.items():
            migrate.upgrade(url)
            results[name] = run_writers(url, writers=args.writers, events=args.events)
        reference = results["postgresql"].events_per_s
        for name, run in results.items():
            errors = sum(n for status, n in run.statuses.items() if status >= 500)
            exact = run.stored == run.distinct and run.stored_rows == len(run.distinct)
            print(
                f"{name:<12}{run.events_per_s:>10.0f}{run.retries:>9}{errors:>6}"
                f"{'exact' if exact else 'WRONG':>8}{run.events_per_s / reference:>7.2f}"
            )


if __name__ == "__main__":
    main()
