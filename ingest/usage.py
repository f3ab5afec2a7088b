"""Load usage records from the proxy's JSONL logs (or its spill files), idempotently.

Each line is one JSON object written by the proxy: a usage record (``"record": "usage"``,
keyed by ``event_id``) or a replica's idle time (``"record": "replica_idle"``). Records whose
``event_id`` is already stored are skipped (``INSERT ... ON CONFLICT DO NOTHING``), so loading
a file twice, or a file whose records the proxy already wrote, changes nothing. Idle records
are matched on deployment, replica and window. A file with any bad line is rejected whole,
with the file and line of every problem, and nothing is written.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Engine

from app.domain.errors import Invalid
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.kit.dataset_store import DatasetStore
from app.usage.repository import insert_idle, insert_usage
from app.usage.schemas import record_from_json
from app.usage.store import events_table, write_usage
from ingest.errors import IngestError, Problem

__all__ = ["UsageInputError", "UsageLoadReport", "load_usage", "read_usage_file"]

_BATCH = 2000
_MAX_PROBLEMS = 20


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
    return problem.file if problem.row is None else f"{problem.file}, line {problem.row}"


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
    engine: Engine, paths: Sequence[Path], *, store: DatasetStore | None = None
) -> UsageLoadReport:
    """Load JSONL usage files into the database in one transaction, or their usage records
    into a Parquet store (idle records still go to the database). The store keeps every
    file written; the allocation reads each event id once.

    Raises:
        UsageInputError: If any line of any file is bad; nothing is written then.
    """
    report = UsageLoadReport(files=[str(path) for path in paths])
    records: list[UsageEvent | ReplicaIdleEvent] = []
    problems: list[Problem] = []
    for path in paths:
        try:
            records.extend(read_usage_file(path))
        except UsageInputError as exc:
            problems.extend(exc.problems)
    if problems:
        raise UsageInputError(problems)
    usage = [r for r in records if isinstance(r, UsageEvent)]
    idle = [r for r in records if isinstance(r, ReplicaIdleEvent)]
    report.lines = len(records)
    report.usage_read, report.idle_read = len(usage), len(idle)
    if store is not None:
        write_usage(store, events_table(usage))
        report.usage_inserted = len(usage)
        usage = []
    with engine.begin() as conn:
        for start in range(0, len(usage), _BATCH):
            report.usage_inserted += insert_usage(conn, usage[start : start + _BATCH])
        for start in range(0, len(idle), _BATCH):
            report.idle_inserted += insert_idle(
                conn, idle[start : start + _BATCH], skip_existing=True
            )
    return report
