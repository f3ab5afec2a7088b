"""The usage sink: idempotent batched inserts, retries while the database is down, spill."""

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import DataError, OperationalError
from sqlalchemy.orm import Session

from app.db import Base
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.models import ReplicaIdle, UsageRecord
from app.usage.repository import insert_usage
from ingest.usage import load_usage
from serving.proxy import sink as usage_sink
from serving.proxy.sink import UsageSink

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def make_event(n: int, **overrides: Any) -> UsageEvent:
    event = UsageEvent(
        event_id=f"event-{n}",
        session_id=f"s{n % 3}",
        team="search",
        cost_center="cc-1",
        tags={"env": "prod"},
        deployment="smol",
        replica="r0",
        model="SmolLM2-135M-Instruct",
        endpoint="completions",
        streamed=n % 2 == 0,
        spec_method="ngram",
        spec_k=4,
        arrived_at=T0 + timedelta(seconds=n),
        first_token_at=T0 + timedelta(seconds=n, microseconds=5),
        finished_at=T0 + timedelta(seconds=n + 1),
        prompt_tokens=10,
        completion_tokens=n,
        num_drafts=1,
        draft_tokens=4,
        accepted_tokens=3,
        gpu_ns=1_000_000_000 + n,
        concurrency=2,
        status="ok",
        http_status=200,
    )
    return replace(event, **overrides)


def count(engine: Engine, table: type[Base] = UsageRecord) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(table)).scalar_one()


def test_insert_usage_is_idempotent_on_event_id(engine):
    events = [make_event(n) for n in range(5)]
    with engine.begin() as conn:
        assert insert_usage(conn, [*events, events[0]]) == 5
    with engine.begin() as conn:
        assert insert_usage(conn, [*events[3:], make_event(9)]) == 1
    assert count(engine) == 6
    with Session(engine) as session:
        stored = session.scalars(select(UsageRecord).where(UsageRecord.event_id == "event-1")).one()
    assert stored.tags == {"env": "prod"}
    assert stored.first_token_at == T0 + timedelta(seconds=1, microseconds=5)
    assert stored.gpu_ns == 1_000_000_001


def test_sink_writes_batches_and_jsonl(engine, tmp_path: Path):
    log = tmp_path / "logs" / "usage.jsonl"
    sink = UsageSink(engine=engine, jsonl_path=log, batch_size=7, flush_interval_s=0.01)
    sink.start()
    for n in range(20):
        sink.submit(make_event(n))
    sink.submit(make_event(3))  # a retry of the same request
    sink.submit(
        ReplicaIdleEvent(
            deployment="smol",
            replica="r0",
            start_at=T0,
            end_at=T0 + timedelta(minutes=1),
            gpu_ns=42,
        )
    )
    assert sink.flush(10)
    stats = sink.close()
    assert (stats.inserted, stats.duplicates, stats.idle_rows, stats.jsonl_lines) == (20, 1, 1, 22)
    assert count(engine) == 20
    assert count(engine, ReplicaIdle) == 1
    lines = log.read_text().splitlines()
    assert json.loads(lines[-1]) == {
        "record": "replica_idle",
        "deployment": "smol",
        "replica": "r0",
        "start_at": "2026-12-01T09:00:00.000000Z",
        "end_at": "2026-12-01T09:01:00.000000Z",
        "gpu_ns": 42,
    }
    with pytest.raises(RuntimeError, match="closed"):
        sink.submit(make_event(99))


class FlakyEngine:
    """An engine whose first ``failures`` transactions fail as if the database were down."""

    def __init__(self, engine: Engine, failures: int | None) -> None:
        self.engine, self.failures, self.attempts = engine, failures, 0

    @contextmanager
    def begin(self) -> Iterator[Connection]:
        self.attempts += 1
        if self.failures is None or self.attempts <= self.failures:
            raise OperationalError("INSERT", {}, ConnectionRefusedError("database is down"))
        with self.engine.begin() as conn:
            yield conn


def test_sink_retries_while_the_database_is_down(engine):
    flaky = FlakyEngine(engine, failures=3)
    # a test double: the sink only calls begin(), which FlakyEngine provides
    sink = UsageSink(engine=cast(Engine, flaky), flush_interval_s=0.01, retry_max_s=0.05)
    sink.start()
    for n in range(4):
        sink.submit(make_event(n))
    assert sink.flush(10)
    stats = sink.close()
    assert stats.db_failures == 3
    assert stats.inserted == 4
    assert stats.spilled == 0
    assert count(engine) == 4


def test_records_the_database_never_took_are_spilled_and_loadable(engine, tmp_path: Path):
    spill = tmp_path / "spill.jsonl"
    sink = UsageSink(
        engine=cast(Engine, FlakyEngine(engine, failures=None)),
        spill_path=spill,
        flush_interval_s=0.01,
        retry_max_s=0.02,
    )
    sink.start()
    for n in range(3):
        sink.submit(make_event(n))
    stats = sink.close(timeout_s=0.3)
    assert stats.spilled == 3
    assert stats.inserted == 0
    assert count(engine) == 0
    report = load_usage(engine, [spill])
    assert report.usage_inserted == 3


def test_a_refused_record_does_not_block_its_batch(engine, tmp_path: Path, monkeypatch):
    real_insert = insert_usage  # the function the sink module imported

    def picky_insert(conn: Connection, events: Sequence[UsageEvent]) -> int:
        if any(event.event_id == "poison" for event in events):
            raise DataError("INSERT", {}, ValueError("value out of range"))
        return real_insert(conn, events)

    monkeypatch.setattr(usage_sink, "insert_usage", picky_insert)
    spill = tmp_path / "spill.jsonl"
    sink = UsageSink(engine=engine, spill_path=spill, flush_interval_s=0.5)
    sink.start()
    for event in (make_event(1), replace(make_event(2), event_id="poison"), make_event(3)):
        sink.submit(event)
    stats = sink.close()
    assert (stats.inserted, stats.spilled) == (2, 1)
    assert [json.loads(line)["event_id"] for line in spill.read_text().splitlines()] == ["poison"]


def test_sink_needs_somewhere_to_write():
    with pytest.raises(ValueError, match="database, a Parquet store or a JSONL file"):
        UsageSink(engine=None)


def test_sink_writes_hourly_parquet_files_to_a_store(engine: Engine, tmp_path: Path) -> None:
    from app.storage.dataset_store import DatasetStore
    from app.storage.usage_store import PARTITIONS, USAGE_PREFIX, HourlyUsageFiles

    store = DatasetStore.at(str(tmp_path / "store"))
    sink = UsageSink(engine=engine, store=store, flush_interval_s=0.01)
    sink.start()
    # Two hours of requests (T0 is 09:00), an idle record for the database.
    for n in (*range(0, 3600, 600), *range(3600, 7200, 1200)):
        sink.submit(make_event(n))
    sink.submit(ReplicaIdleEvent("smol", "r0", T0, T0 + timedelta(seconds=5), 5 * 10**9))
    assert sink.flush(timeout_s=10)
    # 09:00 and 10:00 of 2026-12-01 are long over: the sink wrote one file per hour.
    stats = sink.close()
    assert (stats.parquet_rows, stats.parquet_files, stats.inserted) == (9, 2, 0)
    assert count(engine) == 0
    assert count(engine, ReplicaIdle) == 1
    files = store.files(USAGE_PREFIX)
    assert [f.split("/")[1:4] for f in files] == [
        ["month=2026-12", "deployment=smol", "hour=2026-12-01T09"],
        ["month=2026-12", "deployment=smol", "hour=2026-12-01T10"],
    ]
    written = store.dataset(USAGE_PREFIX, PARTITIONS).to_table()
    assert sorted(written["event_id"].to_pylist()) == sorted(
        f"event-{n}" for n in (*range(0, 3600, 600), *range(3600, 7200, 1200))
    )

    # An hour still under way (or within the grace for requests finishing) stays buffered.
    hourly = HourlyUsageFiles(store, grace_s=120)
    hourly.add([make_event(0)])
    assert hourly.write_due(T0 + timedelta(hours=1, seconds=119)) == 0
    assert hourly.write_due(T0 + timedelta(hours=1, seconds=120)) == 1
