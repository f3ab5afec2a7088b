"""Where the proxy's usage records go: the database in batches, and optionally a JSONL file.

Writes are idempotent on ``event_id`` (``INSERT ... ON CONFLICT DO NOTHING`` on PostgreSQL
and SQLite), so a record written twice, by a retry, a replay of the spool or
``specledger ingest usage`` on the JSONL log, is stored once. The proxy never waits on the
database: it hands records to a :class:`UsageSink`, whose thread batches them. Each batch
goes to the backlog first: with a spool folder (:mod:`serving.proxy.spool`) it is on disk,
fsync'd, before the database is tried, and leaves the spool only once stored, so a database
that is slow, locked or down, or a ``kill -9`` of the proxy, loses nothing spooled; the
next proxy on the spool replays it. Without a spool the backlog is in memory and what is
unwritten at shutdown goes to the JSONL log or a spill file, loadable with
``specledger ingest usage``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.storage.dataset_store import DatasetStore, StoreError
from app.storage.usage_store import HourlyUsageFiles
from app.usage.repository import insert_idle, insert_usage
from serving.proxy.spool import Backlog, MemoryBacklog, Spool, write_jsonl

__all__ = ["SinkStats", "UsageSink", "write_jsonl"]

log = logging.getLogger(__name__)

Record = UsageEvent | ReplicaIdleEvent


@dataclass(slots=True)
class SinkStats:
    """What a sink did so far."""

    submitted: int = 0
    inserted: int = 0
    """Usage records new to the database."""
    duplicates: int = 0
    """Usage records whose event id was already stored."""
    idle_rows: int = 0
    jsonl_lines: int = 0
    db_failures: int = 0
    """Failed database writes (each retried, or spilled when it kept failing)."""
    spilled: int = 0
    """Records left unwritten in the database at shutdown, kept in the spool, the JSONL
    log or the spill file."""
    replayed: int = 0
    """Records an earlier proxy left in the spool, stored by this one."""
    processed: int = 0
    """Records done with: stored, skipped as duplicates, handed to the hourly Parquet
    files, or left in a file."""
    parquet_rows: int = 0
    """Usage records written to the Parquet store."""
    parquet_files: int = 0
    store_failures: int = 0
    """Failed writes to the Parquet store (each retried; spilled at shutdown)."""


class UsageSink:
    """Batches usage records into the database and a JSONL log from a background thread."""

    def __init__(
        self,
        *,
        engine: Engine | None,
        jsonl_path: Path | None = None,
        store: DatasetStore | None = None,
        spill_path: Path | None = None,
        spool_dir: Path | None = None,
        batch_size: int = 500,
        flush_interval_s: float = 0.25,
        retry_max_s: float = 5.0,
    ) -> None:
        """Prepare a sink; :meth:`start` starts its thread.

        Args:
            engine: Database to write; None writes only the JSONL log (and the store).
            jsonl_path: JSONL log appended to (created with its folder).
            store: Parquet store that takes the usage records instead of the database, as
                hourly files (``usage/month=/deployment=/hour=``) written once each hour is
                over; idle records still go to the database. Records not yet in a file at a
                crash are in the JSONL log when there is one.
            spill_path: Where records the database refused until shutdown go when there is
                no JSONL log and no spool, and where records the database refuses as bad
                go. Default: ``usage-spill-<UTC time>.jsonl`` next to the working directory.
            spool_dir: The durable spool for records bound for the database (one proxy per
                folder); its leftovers from an earlier proxy are replayed first. None keeps
                the backlog in memory.
            batch_size: Most records per database transaction.
            flush_interval_s: Longest wait for more records before writing a batch.
            retry_max_s: Longest back-off between attempts while the database fails.
        """
        if engine is None and jsonl_path is None and store is None:
            raise ValueError("a usage sink needs a database, a Parquet store or a JSONL file")
        self.engine = engine
        self.jsonl_path = jsonl_path
        self.spill_path = spill_path
        self.spool_dir = spool_dir if engine is not None else None
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self.retry_max_s = retry_max_s
        self.stats = SinkStats()
        self._hourly = HourlyUsageFiles(store) if store is not None else None
        self._queue: queue.SimpleQueue[Record | None] = queue.SimpleQueue()
        self.backlog: Backlog = MemoryBacklog()
        self._done = threading.Condition()
        self._closing = threading.Event()
        self._all_spooled = threading.Event()
        self._backlog_grew = threading.Event()
        self._close_deadline = 0.0
        self._thread: threading.Thread | None = None
        self._writer: threading.Thread | None = None
        self._jsonl: IO[str] | None = None

    def start(self) -> None:
        """Open the spool and the JSONL log and start the writer thread.

        Raises:
            SpoolInUse: If another proxy holds the spool folder.
        """
        if self.spool_dir is not None:
            self.backlog = Spool(self.spool_dir)
        if self.jsonl_path is not None:
            self.jsonl_path.parent.mkdir(parents=True, exist_ok=True)
            self._jsonl = self.jsonl_path.open("a", encoding="utf-8")
        self._thread = threading.Thread(target=self._run, name="usage-sink", daemon=True)
        self._writer = threading.Thread(target=self._drain, name="usage-sink-db", daemon=True)
        self._thread.start()
        self._writer.start()

    def submit(self, record: Record) -> None:
        """Queue a record; never blocks. Thread-safe.

        Raises:
            RuntimeError: After :meth:`close`.
        """
        if self._closing.is_set():
            raise RuntimeError("the usage sink is closed")
        with self._done:
            self.stats.submitted += 1
        self._queue.put(record)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every record submitted so far is written (or spilled).

        Returns:
            False if ``timeout_s`` passed first.
        """
        with self._done:
            target = self.stats.submitted
            return self._done.wait_for(lambda: self.stats.processed >= target, timeout_s)

    def close(self, timeout_s: float = 30.0) -> SinkStats:
        """Write what is queued, retrying the database for up to ``timeout_s``, then stop.

        Records the database still refuses are left in the JSONL log or the spill file.
        """
        if self._thread is None:
            return self.stats
        self._close_deadline = time.monotonic() + timeout_s
        self._closing.set()
        self._queue.put(None)
        self._thread.join()
        self._thread = None
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        self.backlog.close()
        if self._jsonl is not None:
            self._jsonl.flush()
            os.fsync(self._jsonl.fileno())
            self._jsonl.close()
            self._jsonl = None
        return self.stats

    def _run(self) -> None:
        """Take records from the proxy into the JSONL log, the hourly files and the backlog.
        Never waits on the database (the writer thread does), so records reach the spool
        within a flush interval however slow the database is."""
        while True:
            batch = self._take(timeout_s=self.flush_interval_s)
            if batch:
                self._log_jsonl(batch)
                batch = self._to_hourly_files(batch)
            if batch and self.engine is None:
                self._mark_processed(len(batch))
            elif batch:
                self.backlog.append(batch)
                self._backlog_grew.set()
            self._write_hourly_files()
            # close() queues its wake-up marker after every record submitted before it.
            if self._closing.is_set() and self._queue.empty():
                self._write_hourly_files(final=True)
                self._all_spooled.set()
                self._backlog_grew.set()
                return

    def _drain(self) -> None:
        """Store the backlog in the database, oldest first, backing off while it fails;
        at close, give up on what the database still refuses at the deadline."""
        backoff_s = 0.0
        while True:
            if backoff_s:
                time.sleep(backoff_s)
            else:
                self._backlog_grew.wait(timeout=self.flush_interval_s)
            self._backlog_grew.clear()
            if self.backlog.oldest() is not None:
                if self._write_backlog():
                    backoff_s = 0.0
                    continue
                backoff_s = min(max(backoff_s * 2, 0.1), self.retry_max_s)
            if self._all_spooled.is_set():
                if self.backlog.oldest() is None:
                    return
                if time.monotonic() >= self._close_deadline:
                    self._give_up()
                    return

    def _write_backlog(self) -> bool:
        """Store the backlog's batches, oldest first.

        Returns:
            False when the database is unreachable (try again later).
        """
        while True:
            segment = self.backlog.oldest()
            if segment is None:
                break
            if not self._write_db(self.backlog.read(segment)):
                return False
            self.backlog.remove(segment)
            if segment.inherited:
                self.stats.replayed += segment.records
            else:
                self._mark_processed(segment.records)
        return True

    def _give_up(self) -> None:
        """Shutting down with the database still failing: spooled records stay in the
        spool for the next proxy; an in-memory backlog goes to the JSONL log or the spill
        file."""
        if isinstance(self.backlog, Spool):
            left = self.backlog.leave()
            depth = sum(segment.records for segment in left)
            log.error(
                "usage sink: %d records not in the database; they stay in the spool %s "
                "and the next proxy on it stores them",
                depth,
                self.spool_dir,
            )
            self.stats.spilled += depth
            self._mark_processed(sum(s.records for s in left if not s.inherited))
            return
        records: list[Record] = []
        while (segment := self.backlog.oldest()) is not None:
            records += self.backlog.read(segment)
            self.backlog.remove(segment)
        self._spill(records)
        self._mark_processed(len(records))

    def _to_hourly_files(self, batch: list[Record]) -> list[Record]:
        """Hand the usage records to the hourly Parquet files (done with, as far as flush()
        goes); returns the rest, for the database."""
        if self._hourly is None:
            return batch
        usage = [r for r in batch if isinstance(r, UsageEvent)]
        self._hourly.add(usage)
        self._mark_processed(len(usage))
        return [r for r in batch if not isinstance(r, UsageEvent)]

    def _write_hourly_files(self, *, final: bool = False) -> None:
        if self._hourly is None:
            return
        try:
            if final:
                self._hourly.write_all()
            else:
                self._hourly.write_due(datetime.now(UTC))
        except StoreError as exc:
            self.stats.store_failures += 1
            log.warning("usage sink: Parquet store unavailable, will retry: %s", exc)
            if final:
                left = self._hourly.take_all()
                self._spill(list(left))
        self.stats.parquet_rows = self._hourly.rows
        self.stats.parquet_files = self._hourly.files

    def _take(self, *, timeout_s: float) -> list[Record]:
        """Up to ``batch_size`` queued records, waiting up to ``timeout_s`` for the first."""
        batch: list[Record] = []
        try:
            item = self._queue.get(timeout=timeout_s)
            while True:
                if item is not None:
                    batch.append(item)
                if len(batch) >= self.batch_size:
                    break
                item = self._queue.get_nowait()
        except queue.Empty:
            pass
        return batch

    def _log_jsonl(self, batch: list[Record]) -> None:
        if self._jsonl is None:
            return
        write_jsonl(self._jsonl, batch)
        self._jsonl.flush()
        self.stats.jsonl_lines += len(batch)

    def _write_db(self, records: list[Record]) -> bool:
        """Write records in one transaction; on a bad row, one at a time (the rows the
        database refuses go to the spill file).

        Returns:
            False when the database is unreachable (try again later).
        """
        try:
            self._write_rows(records)
            return True
        except (OperationalError, InterfaceError) as exc:
            self.stats.db_failures += 1
            log.warning("usage sink: database unavailable, will retry: %s", exc)
            return False
        except DBAPIError as exc:
            if exc.connection_invalidated:
                self.stats.db_failures += 1
                return False
            log.error(
                "usage sink: a batch was refused (%s); writing its records one by one", exc.orig
            )
        refused = []
        for record in records:
            try:
                self._write_rows([record])
            except (OperationalError, InterfaceError):
                return False
            except DBAPIError as exc:
                log.error("usage sink: record refused by the database: %s", exc.orig)
                refused.append(record)
        if refused:
            self._spill(refused)
        return True

    def _write_rows(self, records: Sequence[Record]) -> None:
        assert self.engine is not None
        usage = [r for r in records if isinstance(r, UsageEvent)]
        idle = [r for r in records if isinstance(r, ReplicaIdleEvent)]
        with self.engine.begin() as conn:
            inserted = insert_usage(conn, usage) if usage else 0
            idle_rows = insert_idle(conn, idle) if idle else 0
        self.stats.inserted += inserted
        self.stats.duplicates += len(usage) - inserted
        self.stats.idle_rows += idle_rows

    def _spill(self, records: list[Record]) -> None:
        """Give up on the database (or the store) for ``records``."""
        count = len(records)
        if self._jsonl is not None:
            log.error(
                "usage sink: %d records not in the database; they are in %s "
                "(load with `specledger ingest usage`)",
                count,
                self.jsonl_path,
            )
        else:
            path = self.spill_path or Path(
                f"usage-spill-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}.jsonl"
            )
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a", encoding="utf-8") as stream:
                write_jsonl(stream, records)
            log.error(
                "usage sink: %d records not in the database; written to %s "
                "(load with `specledger ingest usage`)",
                count,
                path,
            )
        self.stats.spilled += count

    def _mark_processed(self, count: int) -> None:
        with self._done:
            self.stats.processed += count
            self._done.notify_all()
