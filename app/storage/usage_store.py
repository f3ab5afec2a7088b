"""Usage records in a Parquet store: ``usage/month=YYYY-MM/deployment=D/hour=YYYY-MM-DDTHH``.

The store keeps what the allocation plan reads (app.allocation.plan's usage input), the
token counts unit costs need and each request's acceptance histogram (``accepted_hist``;
files written before it was kept read as null there). ``usage_ord`` orders requests that
tie in the largest remainder split (same remainder, same arrival microsecond): a record
copied from the database keeps its id there, one written by the proxy or from a JSONL log
gets the first 63 bits of the SHA-256 of its event id, so the order is the same whoever
writes it. A record written twice (a log loaded after the proxy wrote it) is read once:
the plan's reader keeps the lowest ``usage_ord`` per event id.
"""

import hashlib
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from sqlalchemy import DateTime, func, select, type_coerce
from sqlalchemy.orm import Session

from app.domain.usage import UsageEvent
from app.kit.epoch import to_us
from app.models import UsageRecord
from app.storage.dataset_store import DatasetStore

USAGE_PREFIX = "usage"
PARTITIONS = {"month": pa.string(), "deployment": pa.string(), "hour": pa.string()}
"""Hive partition columns of the usage dataset, outermost first."""
SCHEMA = pa.schema(
    [
        ("usage_ord", pa.int64()),
        ("event_id", pa.string()),
        ("session_id", pa.string()),
        ("team", pa.string()),
        ("cost_center", pa.string()),
        ("tags", pa.string()),
        ("deployment", pa.string()),
        ("replica", pa.string()),
        ("model", pa.string()),
        ("spec_method", pa.string()),
        ("spec_k", pa.int64()),
        ("arrived_us", pa.int64()),
        ("finished_us", pa.int64()),
        ("gpu_ns", pa.int64()),
        ("prompt_tokens", pa.int64()),
        ("cached_tokens", pa.int64()),
        ("completion_tokens", pa.int64()),
        ("num_drafts", pa.int64()),
        ("draft_tokens", pa.int64()),
        ("accepted_tokens", pa.int64()),
        ("accepted_hist", pa.list_(pa.int64())),
        ("concurrency", pa.int64()),
        ("status", pa.string()),
    ]
)
"""The columns of a usage file (besides its partitions)."""
SCHEMA_WITH_PARTITIONS = pa.schema(
    [*SCHEMA, *(pa.field(n, t) for n, t in PARTITIONS.items() if n not in SCHEMA.names)]
)
"""A usage dataset's columns: the records' and the partitions' (``deployment`` is both,
listed once; a file keeps it in its path)."""
_COPY_BATCH_ROWS = 200_000
_PLAIN = DateTime(timezone=True)


def event_ord(event_id: str) -> int:
    """The tie-break order of a record written outside the database: 63 bits of its id's
    SHA-256 (stable across writers and runs)."""
    return int.from_bytes(hashlib.sha256(event_id.encode()).digest()[:8], "big") >> 1


_BULK_ORDS = 20_000
"""From this many ids :func:`event_ords` hashes in DuckDB (about 3x faster than hashlib a
row, and on both cores), below it in Python (DuckDB's import costs more)."""


def event_ords(event_ids: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """:func:`event_ord` of every id (int64)."""
    if len(event_ids) < _BULK_ORDS:
        return pa.array([event_ord(e) for e in event_ids.to_pylist()], pa.int64())
    import duckdb

    query = "SELECT (('0x' || left(sha256(event_id), 16))::UBIGINT >> 1)::BIGINT FROM ids"
    with duckdb.connect() as con:
        con.register("ids", pa.table({"event_id": event_ids}))
        return con.sql(query).to_arrow_table().column(0)


def tags_json(tags: Mapping[str, str] | None) -> str:
    """A record's tags as the JSON text the store keeps (keys sorted)."""
    return json.dumps(dict(tags or {}), sort_keys=True, separators=(",", ":"))


def events_table(events: Sequence[UsageEvent]) -> pa.Table:
    """Usage events as the store's columns."""
    columns: dict[str, list[object]] = {
        "usage_ord": [event_ord(e.event_id) for e in events],
        "event_id": [e.event_id for e in events],
        "session_id": [e.session_id for e in events],
        "team": [e.team for e in events],
        "cost_center": [e.cost_center for e in events],
        "tags": [tags_json(e.tags) for e in events],
        "deployment": [e.deployment for e in events],
        "replica": [e.replica for e in events],
        "model": [e.model for e in events],
        "spec_method": [e.spec_method for e in events],
        "spec_k": [e.spec_k for e in events],
        "arrived_us": list(to_us([e.arrived_at for e in events])),
        "finished_us": list(to_us([e.finished_at for e in events])),
        "gpu_ns": [e.gpu_ns for e in events],
        "prompt_tokens": [e.prompt_tokens for e in events],
        "cached_tokens": [e.cached_tokens for e in events],
        "completion_tokens": [e.completion_tokens for e in events],
        "num_drafts": [e.num_drafts for e in events],
        "draft_tokens": [e.draft_tokens for e in events],
        "accepted_tokens": [e.accepted_tokens for e in events],
        "accepted_hist": [
            None if e.accepted_hist is None else list(e.accepted_hist) for e in events
        ],
        "concurrency": [e.concurrency for e in events],
        "status": [str(e.status) for e in events],
    }
    return pa.table(columns, schema=SCHEMA)


def columns_table(usage: pa.Table) -> pa.Table:
    """Usage records given as :data:`app.usage.columns.USAGE_COLUMNS` as the store's
    columns (``tags`` is already the store's JSON text)."""
    columns = {
        **{name: usage[name] for name in SCHEMA.names if name in usage.column_names},
        "usage_ord": event_ords(usage["event_id"]),
        "arrived_us": usage["arrived_at"].cast(pa.int64()),
        "finished_us": usage["finished_at"].cast(pa.int64()),
    }
    return pa.table([columns[f.name] for f in SCHEMA], schema=SCHEMA)


def write_usage(store: DatasetStore, table: pa.Table) -> list[str]:
    """Append usage rows (the store's columns) as new files, partitioned by month,
    deployment and hour of arrival. Returns the files written."""
    if table.num_rows == 0:
        return []
    month, hour = _arrival_partitions(table["arrived_us"])
    partitioned = table.append_column("month", month).append_column("hour", hour)
    return store.write(partitioned, USAGE_PREFIX, partitions=list(PARTITIONS))


_HOUR_US = 3_600_000_000


def _arrival_partitions(arrived_us: pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
    """Each row's month (``YYYY-MM``) and hour (``YYYY-MM-DDTHH``) of arrival, as text.

    Formatted once per distinct hour and taken per row: ``strftime`` on every row was a
    fifth of a store ingest's time (about 2 s a million rows)."""
    hours = np.floor_divide(arrived_us.to_numpy(), _HOUR_US)
    distinct, row_hour = np.unique(hours, return_inverse=True)
    starts = pa.array(distinct * _HOUR_US, pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    rows = pa.array(row_hour.astype(np.int64))
    return (
        pc.strftime(starts, "%Y-%m").take(rows),
        pc.strftime(starts, "%Y-%m-%dT%H").take(rows),
    )


def copy_from_database(
    session: Session,
    store: DatasetStore,
    start: datetime,
    end: datetime,
    progress: Callable[[str, int, int], None] | None = None,
) -> int:
    """Copy the database's usage arriving in ``[start, end)`` to the store (ids kept as
    ``usage_ord``), reporting ``progress(description, done, total)``. Returns the records
    copied."""
    total = 0
    if progress is not None:
        total = (
            session.scalar(
                select(func.count()).where(
                    UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end
                )
            )
            or 0
        )
    copied = 0
    for batch in _database_batches(session, start, end):
        write_usage(store, batch)
        copied += batch.num_rows
        if progress is not None:
            progress("copying usage to the store", copied, total)
    return copied


def _database_batches(session: Session, start: datetime, end: datetime) -> Iterator[pa.Table]:
    columns = [
        UsageRecord.id,
        UsageRecord.event_id,
        UsageRecord.session_id,
        UsageRecord.team,
        UsageRecord.cost_center,
        UsageRecord.tags,
        UsageRecord.deployment,
        UsageRecord.replica,
        UsageRecord.model,
        UsageRecord.spec_method,
        UsageRecord.spec_k,
        type_coerce(UsageRecord.arrived_at, _PLAIN),
        type_coerce(UsageRecord.finished_at, _PLAIN),
        UsageRecord.gpu_ns,
        UsageRecord.prompt_tokens,
        UsageRecord.cached_tokens,
        UsageRecord.completion_tokens,
        UsageRecord.num_drafts,
        UsageRecord.draft_tokens,
        UsageRecord.accepted_tokens,
        UsageRecord.accepted_hist,
        UsageRecord.concurrency,
        UsageRecord.status,
    ]
    query = (
        select(*columns)
        .where(UsageRecord.arrived_at >= start, UsageRecord.arrived_at < end)
        .order_by(UsageRecord.id)
        .execution_options(yield_per=_COPY_BATCH_ROWS)
    )
    for rows in session.execute(query).partitions():
        values: list[Any] = list(zip(*rows, strict=True))
        values[5] = [tags_json(t) for t in values[5]]
        values[11], values[12] = to_us(values[11]), to_us(values[12])
        yield pa.table(
            [pa.array(v, f.type) for v, f in zip(values, SCHEMA, strict=True)], schema=SCHEMA
        )


def plan_usage(store: DatasetStore, first_us: int, last_us: int) -> ds.Dataset:
    """The store's requests overlapping ``[first_us, last_us)``: month partitions from the
    month before the first (a request may start there) to the last's, then by time."""
    dataset = usage_dataset(store)
    if not dataset.files:
        return ds.dataset(pa.table({f.name: pa.array([], f.type) for f in SCHEMA}))
    months = months_between(first_us, last_us)
    return dataset.filter(
        pc.field("month").isin(months)
        & (pc.field("finished_us") >= first_us)
        & (pc.field("arrived_us") < last_us)
    )


def usage_dataset(store: DatasetStore) -> ds.Dataset:
    """Every usage file in the store, read with the current columns."""
    return store.dataset(USAGE_PREFIX, PARTITIONS, SCHEMA_WITH_PARTITIONS)


def months_between(first_us: int, last_us: int) -> list[str]:
    first = datetime.fromtimestamp(first_us / 1e6, UTC)
    last = datetime.fromtimestamp(max(last_us, first_us) / 1e6, UTC)
    year, month = (first.year, first.month - 1) if first.month > 1 else (first.year - 1, 12)
    months = []
    while (year, month) <= (last.year, last.month):
        months.append(f"{year:04d}-{month:02d}")
        year, month = (year, month + 1) if month < 12 else (year + 1, 1)
    return months


class HourlyUsageFiles:
    """Usage records buffered per hour of arrival and written to the store as one file per
    hour and deployment once the hour is over (plus ``grace_s``, for requests still
    finishing), or sooner when an hour holds ``max_rows``. Not thread-safe: one writer
    thread (the proxy's usage sink) owns it."""

    def __init__(self, store: DatasetStore, *, max_rows: int = 100_000, grace_s: float = 120):
        self.store = store
        self.max_rows = max_rows
        self.grace_us = int(grace_s * 1e6)
        self._hours: dict[int, list[UsageEvent]] = {}
        self.files = 0
        self.rows = 0

    def add(self, events: Sequence[UsageEvent]) -> None:
        for event in events:
            hour = int(to_us([event.arrived_at])[0]) // _HOUR_US * _HOUR_US
            self._hours.setdefault(hour, []).append(event)

    @property
    def buffered(self) -> int:
        return sum(len(events) for events in self._hours.values())

    def write_due(self, now: datetime) -> int:
        """Write the hours that are over, and any hour holding ``max_rows``; returns the
        records written.

        Raises:
            StoreError: If the store refuses a write (the records stay buffered).
        """
        now_us = int(to_us([now])[0])
        due = [
            hour
            for hour, events in self._hours.items()
            if hour + _HOUR_US + self.grace_us <= now_us or len(events) >= self.max_rows
        ]
        return sum(self._write(hour) for hour in sorted(due))

    def write_all(self) -> int:
        """Write every buffered hour (at shutdown)."""
        return sum(self._write(hour) for hour in sorted(self._hours))

    def take_all(self) -> list[UsageEvent]:
        """Give up the buffered records (to spill them elsewhere)."""
        events = [e for hour in sorted(self._hours) for e in self._hours[hour]]
        self._hours.clear()
        return events

    def _write(self, hour: int) -> int:
        events = self._hours[hour]
        self.files += len(write_usage(self.store, events_table(events)))
        del self._hours[hour]
        self.rows += len(events)
        return len(events)


_HOUR_US = 3_600_000_000
