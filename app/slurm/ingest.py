"""``specledger ingest slurm``: job accounting read from a cluster with ``sacct``.

Each read covers a window. Without one, it resumes where the last read of the cluster ended,
or earlier when a job seen then was still running, so a running job is read again until it
has ended. Jobs are stored per (cluster, job, step, start): a requeued job counts once per
run, and reading a window twice changes nothing. A finished job's allocation line becomes
usage records (app.slurm.rules.usage); a running one's accrue up to the end of the window
read and are trued up when it has ended; steps are kept for detail and never charged.
The reads go through the batch usage source interface (:mod:`app.usage.batch`).
"""

import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.errors import Invalid, Unavailable
from app.domain.periods import Month
from app.models import Deployment, Replica, SlurmIngest, SlurmJob
from app.slurm.rules.sacct import SacctError, SacctRecord, parse_sacct, sacct_arguments
from app.slurm.rules.usage import (
    accrued_events,
    accrued_seconds,
    cluster_deployment,
    event_ids,
    is_metered,
    usage_events,
)
from app.usage.batch import UsageBatch, Window, ingest_window, store_read

SACCT_TIMEOUT_S = 300
RESUME_OVERLAP = timedelta(minutes=5)
"""A resumed read starts this much before the last one ended: a job that ended just then
may reach the accounting database late."""


class SlurmUnavailable(Unavailable):
    """The accounting command could not be run or failed."""


class InvalidSacct(Invalid):
    """The accounting output cannot be read (the message names the line and field)."""


@dataclass(frozen=True, slots=True)
class SacctCommand:
    """How to run ``sacct``: locally, or through ssh (``ssh head env TZ=UTC sacct``).

    The command runs with TZ=UTC in its environment; a remote one must set it itself, as
    ``env TZ=UTC`` does above, since sacct prints times in its own local zone."""

    argv: tuple[str, ...] = ("sacct",)

    @classmethod
    def parse(cls, text: str) -> "SacctCommand":
        argv = tuple(shlex.split(text))
        if not argv:
            raise Invalid("the sacct command is empty")
        return cls(argv)

    def run(self, start: datetime, end: datetime) -> str:
        argv = [*self.argv, *sacct_arguments(start=start, end=end)]
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=SACCT_TIMEOUT_S,
                env={**os.environ, "TZ": "UTC"},
                check=False,
            )
        except FileNotFoundError:
            raise SlurmUnavailable(
                f"cannot run {self.argv[0]!r}: not found (install Slurm's client, or pass "
                "--command with the way to reach the cluster, e.g. 'ssh head env TZ=UTC sacct')"
            ) from None
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"sacct did not answer within {SACCT_TIMEOUT_S} s") from None
        if done.returncode != 0:
            detail = done.stderr.strip().splitlines()[-3:]
            raise SlurmUnavailable(
                f"sacct failed (exit {done.returncode}): {' / '.join(detail) or 'no message'}"
            )
        return done.stdout


@dataclass(slots=True)
class SlurmIngestReport:
    cluster: str
    window_start: datetime
    window_end: datetime
    lines: int = 0
    jobs_new: int = 0
    jobs_updated: int = 0
    unchanged: int = 0
    running: int = 0
    """Allocation lines not yet ended: read again next time."""
    never_started: int = 0
    usage_records: int = 0
    gpu_seconds: int = 0
    """Of the jobs metered by this read."""
    accrued: int = 0
    """Running jobs whose GPU-seconds were accrued up to the end of the window read."""
    accrued_gpu_seconds: int = 0
    """Their GPU-seconds from their start to the end of the window read."""
    unregistered_nodes: list[str] = field(default_factory=list)
    """Nodes jobs ran on that are not replicas of the cluster's deployment: their usage is
    recorded, but no bill joins them until they are registered."""

    def to_json(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "window_start": self.window_start.isoformat(),
            "window_end": self.window_end.isoformat(),
            "lines": self.lines,
            "jobs_new": self.jobs_new,
            "jobs_updated": self.jobs_updated,
            "unchanged": self.unchanged,
            "running": self.running,
            "never_started": self.never_started,
            "usage_records": self.usage_records,
            "gpu_seconds": self.gpu_seconds,
            "accrued": self.accrued,
            "accrued_gpu_seconds": self.accrued_gpu_seconds,
            "unregistered_nodes": self.unregistered_nodes,
        }

    def to_text(self) -> str:
        text = (
            f"cluster {self.cluster}, {self.window_start:%Y-%m-%d %H:%M} to "
            f"{self.window_end:%Y-%m-%d %H:%M} UTC: {self.lines} lines; {self.jobs_new} new, "
            f"{self.jobs_updated} updated, {self.unchanged} unchanged; {self.running} still "
            f"running (read again next time), {self.never_started} never started; "
            f"{self.usage_records} usage records, {self.gpu_seconds / 3600:.2f} GPU-hours"
        )
        if self.accrued:
            text += (
                f"; {self.accrued} running jobs accrued to {self.window_end:%Y-%m-%d %H:%M} "
                f"UTC, {self.accrued_gpu_seconds / 3600:.2f} GPU-hours so far"
            )
        if self.unregistered_nodes:
            text += (
                f"\nwarning: nodes not registered as replicas of "
                f"{cluster_deployment(self.cluster)}: {', '.join(self.unregistered_nodes)} "
                "(no bill joins their jobs; `specledger slurm setup COST_MODEL` registers them)"
            )
        return text


class SacctSource:
    """One cluster's ``sacct`` output as a batch usage source
    (:class:`app.usage.batch.BatchUsageSource`); :attr:`report` says what the last read
    found."""

    def __init__(
        self, cluster: str, read_text: Callable[[datetime, datetime], str], *, source: str
    ) -> None:
        self.cluster = cluster
        self.name = source
        self._read_text = read_text
        self._records: list[SacctRecord] = []
        self._report: SlurmIngestReport | None = None

    @property
    def report(self) -> SlurmIngestReport:
        if self._report is None:
            raise RuntimeError("nothing was read")
        return self._report

    def resume_point(self, session: Session, *, now: datetime) -> datetime:
        return resume_point(session, self.cluster, now=now)

    def read(self, session: Session, window: Window, *, now: datetime) -> UsageBatch:
        """Keep the window's jobs (per cluster, job, step and start) and yield the usage of
        those metered now, the accrual of those running, and the records both replace."""
        cluster, source = self.cluster, self.name
        try:
            records = parse_sacct(self._read_text(*window), source=source, cluster=cluster)
        except SacctError as exc:
            raise InvalidSacct(str(exc)) from None
        foreign = sorted({r.cluster for r in records} - {cluster})
        if foreign:
            raise InvalidSacct(
                f"{source}: lines of cluster(s) {', '.join(foreign)}, expected only {cluster!r}"
            )
        report = SlurmIngestReport(cluster, *window, lines=len(records))
        stored = _stored(session, cluster, records)
        metered_now: list[SacctRecord] = []
        accruing: list[tuple[SacctRecord, datetime]] = []
        for record in records:
            if record.start is None:
                report.never_started += 1
                continue
            key = (record.job, record.step or "", record.start)
            row = stored.get(key)
            if row is not None and row.metered:
                report.unchanged += 1
                continue
            if row is None:
                row = SlurmJob(
                    cluster=cluster, job=record.job, step=record.step or "", metered=False
                )
                session.add(row)
                stored[key] = row
                report.jobs_new += 1
            elif _changed(row, record):
                report.jobs_updated += 1
            else:
                report.unchanged += 1
            _fill(row, record, now)
            if is_metered(record):
                row.metered = True
                row.accrued_until = None
                metered_now.append(record)
            elif record.step is None:
                report.running += 1
                until = max(min(window[1], now), row.accrued_until or window[0])
                if record.gpus and accrued_seconds(record, until) > 0:
                    row.accrued_until = until
                    accruing.append((record, until))
        session.flush()
        report.gpu_seconds = sum(record.gpu_seconds() for record in metered_now)
        report.accrued = len(accruing)
        report.accrued_gpu_seconds = sum(
            record.gpus * accrued_seconds(record, until) for record, until in accruing
        )
        self._records, self._report = records, report
        # The records of a job read running before (accrued) are replaced: by its accrual
        # to this read's end, or by its final records once it has ended (the true-up).
        return UsageBatch(
            final=[event for record in metered_now for event in usage_events(record)],
            provisional=[
                event for record, until in accruing for event in accrued_events(record, until)
            ],
            replaces=[i for r in (*metered_now, *(r for r, _ in accruing)) for i in event_ids(r)],
        )

    def done(self, session: Session, window: Window, *, stored: int, now: datetime) -> None:
        report = self.report
        report.usage_records = stored
        report.unregistered_nodes = _unregistered(session, self.cluster, self._records)
        session.add(
            SlurmIngest(
                cluster=self.cluster,
                window_start=window[0],
                window_end=window[1],
                ran_at=now,
                lines=report.lines,
                jobs_new=report.jobs_new,
                jobs_updated=report.jobs_updated,
                usage_records=report.usage_records,
            )
        )
        session.flush()


def ingest_slurm(
    session: Session,
    *,
    cluster: str,
    command: SacctCommand,
    since: datetime | None,
    until: datetime | None,
    now: datetime,
) -> SlurmIngestReport:
    """Read the cluster's accounting for ``[since, until)`` (defaults in the module
    docstring; a first read starts at the month's start) and store it."""
    source = SacctSource(cluster, command.run, source=f"sacct on {cluster}")
    ingest_window(session, source, since=since, until=until, now=now)
    return source.report


def resume_point(session: Session, cluster: str, *, now: datetime) -> datetime:
    """Where a read without a window starts (see the module docstring)."""
    last_end = session.scalar(
        select(func.max(SlurmIngest.window_end)).where(SlurmIngest.cluster == cluster)
    )
    running_since = session.scalar(
        select(func.min(SlurmJob.start_at)).where(
            SlurmJob.cluster == cluster, SlurmJob.step == "", SlurmJob.end_at.is_(None)
        )
    )
    if last_end is None:
        return Month.of(now).start
    resume: datetime = last_end - RESUME_OVERLAP
    return min(resume, running_since) if running_since is not None else resume


def ingest_sacct_text(
    session: Session,
    text: str,
    *,
    source: str,
    cluster: str,
    window: tuple[datetime, datetime],
    now: datetime,
) -> SlurmIngestReport:
    """Store ``sacct --parsable2`` output (with its header). A bad line rejects the whole
    output, naming the line and field, and nothing is written."""
    read = SacctSource(cluster, lambda start, end: text, source=source)
    store_read(session, read, window, now=now)
    return read.report


def _stored(
    session: Session, cluster: str, records: Sequence[SacctRecord]
) -> dict[tuple[str, str, datetime], SlurmJob]:
    names = sorted({r.job for r in records})
    rows: dict[tuple[str, str, datetime], SlurmJob] = {}
    for first in range(0, len(names), 500):
        chunk = names[first : first + 500]
        for row in session.scalars(
            select(SlurmJob).where(SlurmJob.cluster == cluster, SlurmJob.job.in_(chunk))
        ):
            rows[(row.job, row.step, row.start_at)] = row
    return rows


def _changed(row: SlurmJob, record: SacctRecord) -> bool:
    end = record.end if record.finished else None
    return (row.state, row.end_at, row.elapsed_s) != (record.state, end, record.elapsed_s)


def _fill(row: SlurmJob, record: SacctRecord, now: datetime) -> None:
    row.job_id_raw = record.job_id_raw
    row.array_job_id = record.array_job_id
    row.array_task_id = record.array_task_id
    row.het_job_id = record.het_job_id
    row.het_offset = record.het_offset
    row.name = record.name[:256]
    row.account = record.account
    row.user_name = record.user
    row.partition = record.partition
    row.qos = record.qos
    row.state = record.state
    row.state_reason = (record.state_reason or "")[:128] or None
    row.submit_at = record.submit
    if record.start is not None:
        row.start_at = record.start
    row.end_at = record.end if record.finished else None
    row.elapsed_s = record.elapsed_s
    row.gpus = record.gpus
    row.gpu_seconds = record.gpu_seconds()
    row.nodes = list(record.nodes)
    row.alloc_tres = dict(record.alloc_tres)
    row.usage_in_tot = dict(record.usage_in_tot)
    row.updated_at = now


def _unregistered(session: Session, cluster: str, records: Sequence[SacctRecord]) -> list[str]:
    nodes = {node for r in records if r.step is None and r.gpus for node in r.nodes}
    if not nodes:
        return []
    known = set(
        session.scalars(
            select(Replica.name)
            .join(Deployment, Deployment.id == Replica.deployment_id)
            .where(Deployment.name == cluster_deployment(cluster))
        )
    )
    return sorted(nodes - known)
