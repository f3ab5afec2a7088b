"""Load usage records from the proxy's JSONL logs (or its spill files), idempotently.

Each line is one JSON object written by the proxy: a usage record (``"record": "usage"``,
keyed by ``event_id``) or a replica's idle time (``"record": "replica_idle"``). Records whose
``event_id`` is already stored are skipped (``INSERT ... ON CONFLICT DO NOTHING``), so loading
a file twice, or a file whose records the proxy already wrote, changes nothing. Idle records
are matched on deployment, replica and window. A file with any bad line is rejected whole,
with the file and line of every problem, and nothing is written.

Files are read in blocks by Arrow and checked as columns (:mod:`ingest.usage_read`,
:mod:`ingest.usage_checks`); the per-record schema decides only what the columns cannot
prove, so messages name the same field in the same words as :func:`read_usage_file`, which
stays the reference (and the reader of files Arrow cannot number the same way).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlalchemy import Connection, Engine

from app.domain.errors import Invalid
from app.domain.names import unknown_name
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.storage.dataset_store import DatasetStore
from app.storage.usage_store import columns_table, write_usage
from app.usage.columns import events_columns
from app.usage.repository import insert_idle, insert_usage_columns
from app.usage.schemas import record_from_json
from ingest.errors import IngestError, Problem
from ingest.usage_read import BLOCK_BYTES, Unreadable, prefetched, read_blocks

__all__ = ["UsageInputError", "UsageLoadReport", "load_usage", "read_usage_file"]

_BATCH = 2000
_MAX_PROBLEMS = 20
_SQLITE_CACHE_KIB = 512 * 1024


class UsageInputError(IngestError):
    """Usage input that cannot be loaded; nothing was written."""

    code = "invalid_usage_input"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        shown = "\n".join(f"  {_where(p)}: {p.reason}" for p in problems[:_MAX_PROBLEMS])
        more = (
            f"\n  ... and {len(problems) - _MAX_PROBLEMS} more"
            if len(problems) > _MAX_PROBLEMS
            else ""
        )
        Invalid.__init__(self, f"usage input rejected, nothing was written:\n{shown}{more}")


def _where(problem: Problem) -> str:
    where = problem.file if problem.row is None else f"{problem.file}, line {problem.row}"
    return where if problem.column is None else f"{where}, field {problem.column}"


@dataclass
class UsageLoadReport:
    """What a load read and wrote."""

    files: list[str] = field(default_factory=list)
    lines: int = 0
    """Records read (blank lines are not counted)."""
    usage_read: int = 0
    usage_inserted: int = 0
    idle_read: int = 0
    idle_inserted: int = 0

    @property
    def usage_already_present(self) -> int:
        """Usage records skipped because their event id was stored (or repeated)."""
        return self.usage_read - self.usage_inserted

    @property
    def idle_already_present(self) -> int:
        return self.idle_read - self.idle_inserted

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files, "read": self.lines,
            "usage": {"read": self.usage_read, "inserted": self.usage_inserted,
                      "already_present": self.usage_already_present},
            "replica_idle": {"read": self.idle_read, "inserted": self.idle_inserted,
                             "already_present": self.idle_already_present},
        }  # fmt: skip

    def to_text(self) -> str:
        return (
            f"read {self.lines} records from {len(self.files)} file(s)\n"
            f"usage records: {self.usage_inserted} inserted, "
            f"{self.usage_already_present} already present\n"
            f"idle records:  {self.idle_inserted} inserted, "
            f"{self.idle_already_present} already present"
        )


def _open(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    with _open(path) as stream:
        yield from enumerate(stream, start=1)


def read_usage_file(path: Path) -> list[UsageEvent | ReplicaIdleEvent]:
    """Decode every record of one JSONL file (``.jsonl`` or ``.jsonl.gz``).

    Raises:
        UsageInputError: Listing each bad line (file and line number) or an unreadable file.
    """
    records: list[UsageEvent | ReplicaIdleEvent] = []
    problems: list[Problem] = []
    try:
        for number, line in _lines(path):
            if not line.strip():
                continue
            try:
                records.append(record_from_json(json.loads(line)))
            except ValueError as exc:  # json.JSONDecodeError is a ValueError
                problems.append(Problem(file=str(path), reason=str(exc), row=number))
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        problems.append(Problem(file=str(path), reason=f"cannot read the file: {exc}"))
    if problems:
        raise UsageInputError(problems)
    return records


def load_usage(
    engine: Engine,
    paths: Sequence[Path],
    *,
    store: DatasetStore | None = None,
    progress: Callable[[int, int], None] | None = None,
    block_bytes: int = BLOCK_BYTES,
    deployments: Collection[str] | None = None,
) -> UsageLoadReport:
    """Load JSONL usage files into the database in one transaction, or their usage records
    into a Parquet store (idle records still go to the database). The store keeps every
    file written; the allocation reads each event id once.

    Files are read in blocks with Arrow and checked as columns (:mod:`ingest.usage_read`);
    usage records go in with COPY (PostgreSQL) or one ``executemany`` per block (SQLite),
    or as one set of Parquet files per block. ``progress(done, total)`` is told the bytes
    read so far (of plain files; a ``.gz`` file counts its compressed size once read).

    ``deployments``: the registered deployments; a usage record naming another is a problem
    (its usage would be priced at nothing). None loads every deployment's records.

    Raises:
        UsageInputError: If any line of any file is bad; nothing is written then.
    """
    report = UsageLoadReport(files=[str(path) for path in paths])
    total = sum(path.stat().st_size for path in paths)
    done = 0
    problems: list[Problem] = []
    stored: list[pa.Table] = []
    idle: list[ReplicaIdleEvent] = []
    with engine.begin() as conn, _large_cache(conn):
        for path in paths:
            savepoint = conn.begin_nested()
            try:
                loaded = _load_file(conn, path, store is not None, block_bytes, progress,
                                    done, total, bool(problems))  # fmt: skip
                savepoint.commit()
            except Unreadable:  # undo its blocks, read it as before
                savepoint.rollback()
                loaded = _load_records(conn, path, store is not None, bool(problems))
            problems.extend(loaded.problems)
            if deployments is not None:
                problems.extend(
                    _unregistered(path, loaded.deployments - set(deployments), deployments)
                )
            report.lines += loaded.lines
            report.usage_read += loaded.usage_read
            report.usage_inserted += loaded.usage_inserted
            stored.extend(loaded.stored)
            idle.extend(loaded.idle)
            done += path.stat().st_size
            if progress is not None:
                progress(done, total)
        if problems:
            raise UsageInputError(problems)
        report.idle_read = len(idle)
        for start in range(0, len(idle), _BATCH):
            report.idle_inserted += insert_idle(
                conn, idle[start : start + _BATCH], skip_existing=True
            )
        if store is not None:
            for table in stored:
                write_usage(store, table)
    return report


@contextmanager
def _large_cache(conn: Connection) -> Iterator[None]:
    """On SQLite, a page cache that holds the indexes a large load updates (restored)."""
    if conn.dialect.name != "sqlite":
        yield
        return
    was = conn.exec_driver_sql("PRAGMA cache_size").scalar_one()
    conn.exec_driver_sql(f"PRAGMA cache_size = -{_SQLITE_CACHE_KIB}")
    try:
        yield
    finally:
        conn.exec_driver_sql(f"PRAGMA cache_size = {int(was)}")


@dataclass
class _Loaded:
    """One file's part of a load."""

    problems: list[Problem] = field(default_factory=list)
    lines: int = 0
    usage_read: int = 0
    usage_inserted: int = 0
    stored: list[pa.Table] = field(default_factory=list)
    """Usage records for the store, written once every file is known good."""
    idle: list[ReplicaIdleEvent] = field(default_factory=list)
    deployments: set[str] = field(default_factory=set)
    """The deployments its usage records name."""


def _unregistered(path: Path, names: set[str], known: Collection[str]) -> list[Problem]:
    """A problem per deployment the file names that is not registered, at its first line
    (found by reading the file again: this is the error path only)."""
    if not names:
        return []
    first: dict[str, int] = {}
    for number, line in _lines(path):
        if '"deployment"' in line:
            name = json.loads(line).get("deployment")
            if name in names and name not in first:
                first[name] = number
    return [
        Problem(
            file=str(path),
            row=first.get(name),
            column="deployment",
            value=name,
            reason=unknown_name(
                "deployment",
                name,
                known,
                hint=f"register it (`specledger deployments add {name}`) so its usage is "
                "priced, or load with --allow-unknown-deployments to hold it unpriced",
            ),
        )
        for name in sorted(names)
    ]


def _load_file(
    conn: Connection,
    path: Path,
    to_store: bool,
    block_bytes: int,
    progress: Callable[[int, int], None] | None,
    done: int,
    total: int,
    rejected: bool,
) -> _Loaded:
    """Read a file in blocks, writing each good block's usage records (unless the load is
    already ``rejected``: then only checking)."""
    loaded = _Loaded()
    try:
        for block in prefetched(read_blocks(path, block_bytes, workers=2)):
            loaded.problems.extend(block.problems)
            rejected = rejected or bool(block.problems)
            _add_usage(conn, loaded, block.usage, to_store, rejected)
            loaded.lines += block.records
            loaded.idle.extend(block.idle)
            done += block.size
            if progress is not None:
                progress(min(done, total), total)
    except (OSError, EOFError):
        raise Unreadable from None
    return loaded


def _load_records(conn: Connection, path: Path, to_store: bool, rejected: bool) -> _Loaded:
    """A file only the line-by-line reader reads as before (see :mod:`ingest.usage_read`)."""
    loaded = _Loaded()
    try:
        records = read_usage_file(path)
    except UsageInputError as exc:
        loaded.problems = exc.problems
        return loaded
    usage = [r for r in records if isinstance(r, UsageEvent)]
    loaded.idle = [r for r in records if isinstance(r, ReplicaIdleEvent)]
    loaded.lines = len(records)
    _add_usage(conn, loaded, events_columns(usage), to_store, rejected)
    return loaded


def _add_usage(
    conn: Connection, loaded: _Loaded, usage: pa.Table, to_store: bool, rejected: bool
) -> None:
    loaded.usage_read += usage.num_rows
    loaded.deployments.update(pc.unique(usage.column("deployment")).to_pylist())
    if rejected or usage.num_rows == 0:
        return
    if to_store:
        loaded.stored.append(columns_table(usage))
        loaded.usage_inserted += usage.num_rows
    else:
        loaded.usage_inserted += insert_usage_columns(conn, usage)
