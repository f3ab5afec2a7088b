"""The usage sink's durable spool: records bound for the database, on disk before any
attempt to write them there, removed once they are stored.

A spool is a folder of JSONL segments, one per batch, named in write order. A segment is
written, flushed and fsync'd (the folder too) before the sink tries the database, and is
deleted only after the database committed it, so a record survives a database that is
slow, locked or down, and a ``kill -9`` of the proxy: the next proxy on the same spool
replays it (idempotent on event_id: a record stored just before the kill is skipped).
What a kill can lose is what the sink had not spooled yet: records taken from the proxy in
the last flush interval. Segments are the JSONL log's format, so
``specledger ingest usage SEGMENT`` loads one by hand.

One proxy per spool: the folder is locked (``flock``) while a sink uses it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.usage.schemas import record_from_json

__all__ = ["Backlog", "MemoryBacklog", "Segment", "Spool", "SpoolInUse", "write_jsonl"]

log = logging.getLogger(__name__)

Record = UsageEvent | ReplicaIdleEvent
_SUFFIX = ".jsonl"
_KEPT_MAX = 200_000
"""Most records a spool keeps in memory as well as on disk (beyond, it reads them back)."""


def write_jsonl(stream: IO[str], records: Iterable[Record]) -> None:
    """Write records as JSON lines (no floats, ISO 8601 UTC instants)."""
    for record in records:
        stream.write(json.dumps(record.to_json(), ensure_ascii=False, separators=(",", ":")))
        stream.write("\n")


class SpoolInUse(RuntimeError):
    """Another proxy holds the spool folder."""


@dataclass(frozen=True, slots=True, eq=False)
class Segment:
    """One batch of records in a backlog."""

    path: Path | None
    """Its file in a spool; None in memory."""
    records: int
    written_at: float
    """``time.time()`` when it was written (its file's mtime for one found at start)."""
    inherited: bool
    """Found at start: written by an earlier proxy that did not get it stored."""


class Backlog(Protocol):
    """Batches of records waiting for the database, oldest first."""

    @property
    def depth(self) -> int:
        """Records waiting."""
        ...

    def oldest_age_s(self, now: float | None = None) -> float:
        """Seconds since the oldest batch came; 0 when there is none."""
        ...

    def oldest(self) -> Segment | None: ...

    def append(self, records: Sequence[Record]) -> Segment: ...

    def read(self, segment: Segment) -> list[Record]: ...

    def remove(self, segment: Segment) -> None:
        """Forget a batch whose records are stored."""
        ...

    def close(self) -> None: ...


@dataclass(slots=True)
class MemoryBacklog:
    """A backlog without a spool folder: batches in memory, lost if the process dies.
    Thread-safe (one thread appends, another stores and removes)."""

    _batches: list[tuple[Segment, list[Record]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def depth(self) -> int:
        return sum(segment.records for segment, _ in list(self._batches))

    def oldest_age_s(self, now: float | None = None) -> float:
        if not self._batches:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - self._batches[0][0].written_at)

    def oldest(self) -> Segment | None:
        return self._batches[0][0] if self._batches else None

    def append(self, records: Sequence[Record]) -> Segment:
        segment = Segment(None, len(records), time.time(), inherited=False)
        with self._lock:
            self._batches.append((segment, list(records)))
        return segment

    def read(self, segment: Segment) -> list[Record]:
        with self._lock:
            return next(records for known, records in self._batches if known is segment)

    def remove(self, segment: Segment) -> None:
        with self._lock:
            self._batches = [(known, r) for known, r in self._batches if known is not segment]

    def close(self) -> None:
        pass


class Spool:
    """Segments of records waiting for the database, oldest first, on disk. Thread-safe
    (one thread appends, another stores and removes)."""

    def __init__(self, folder: Path) -> None:
        """Open (and lock) the spool folder, creating it, and find the segments an earlier
        proxy left.

        Raises:
            SpoolInUse: If another proxy holds it.
        """
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._lock: IO[str] | None = (folder / ".lock").open("a")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            self._lock = None
            raise SpoolInUse(
                f"usage spool {folder} is in use by another proxy; give each proxy its own"
            ) from None
        self._segments = [
            Segment(path, _count_lines(path), path.stat().st_mtime, inherited=True)
            for path in sorted(folder.glob(f"*{_SUFFIX}"))
        ]
        self._next = 1 + max((int(s.path.stem) for s in self._segments if s.path), default=0)
        self._guard = threading.Lock()
        self._kept: dict[Segment, Sequence[Record]] = {}
        """Records this spool wrote, kept (up to ``_KEPT_MAX``) so that storing them does
        not decode what was just encoded; the file is what survives a crash."""
        self._kept_records = 0

    @property
    def depth(self) -> int:
        """Records in the spool."""
        return sum(s.records for s in list(self._segments))

    def oldest_age_s(self, now: float | None = None) -> float:
        """Seconds since the oldest segment was written; 0 when the spool is empty."""
        if not self._segments:
            return 0.0
        return max(0.0, (time.time() if now is None else now) - self._segments[0].written_at)

    def oldest(self) -> Segment | None:
        return self._segments[0] if self._segments else None

    def append(self, records: Sequence[Record]) -> Segment:
        """Write records as a new segment, durably (file and folder fsync'd)."""
        path = self.folder / f"{self._next:012d}{_SUFFIX}"
        self._next += 1
        with path.open("w", encoding="utf-8") as stream:
            write_jsonl(stream, records)
            stream.flush()
            os.fsync(stream.fileno())
        _fsync_folder(self.folder)
        segment = Segment(path, len(records), time.time(), inherited=False)
        with self._guard:
            self._segments.append(segment)
            if self._kept_records + len(records) <= _KEPT_MAX:
                self._kept[segment] = list(records)
                self._kept_records += len(records)
        return segment

    def read(self, segment: Segment) -> list[Record]:
        """A segment's records. A last line cut short (a kill while it was written) is
        dropped with a warning: its records were never acknowledged as spooled."""
        assert segment.path is not None
        with self._guard:
            kept = self._kept.get(segment)
        if kept is not None:
            return list(kept)
        records: list[Record] = []
        lines = segment.path.read_text(encoding="utf-8").splitlines(keepends=True)
        for number, line in enumerate(lines, start=1):
            if number == len(lines) and not line.endswith("\n"):
                log.warning("usage spool: %s line %d was cut short; dropped", segment.path, number)
                break
            records.append(record_from_json(json.loads(line)))
        return records

    def remove(self, segment: Segment) -> None:
        """Forget a segment whose records are stored."""
        if segment.path is not None:
            segment.path.unlink(missing_ok=True)
        with self._guard:
            self._segments = [known for known in self._segments if known is not segment]
            kept = self._kept.pop(segment, None)
            if kept is not None:
                self._kept_records -= len(kept)

    def leave(self) -> list[Segment]:
        """Stop tracking every segment, leaving their files for the next proxy; returns
        them."""
        with self._guard:
            left, self._segments = self._segments, []
            self._kept.clear()
            self._kept_records = 0
        return left

    def close(self) -> None:
        """Release the folder (its segments stay for the next proxy)."""
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None


def _count_lines(path: Path) -> int:
    with path.open("rb") as stream:
        return sum(1 for line in stream if line.endswith(b"\n"))


def _fsync_folder(folder: Path) -> None:
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
