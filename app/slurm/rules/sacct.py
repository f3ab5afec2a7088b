"""Slurm job accounting: ``sacct --parsable2`` output to typed records (pure).

The caller runs ``sacct`` with :func:`sacct_arguments` and ``TZ=UTC`` and hands the text to
:func:`parse_sacct`. One :class:`SacctRecord` comes back per line: the allocation line of a
job (``step is None``) and one per step (``42.batch``, ``42.extern``, ``42.0``).

Rules, where sacct leaves a choice:

* **Columns.** The header names the columns, in any order and letter case. JobID, State,
  Start, End, ElapsedRaw and AllocTRES are required; Cluster is required unless
  ``cluster=`` is passed. A few columns sacct prints that the record does not keep (ReqTRES,
  the other TRESUsage* statistics, ...) are accepted and ignored; any other name is an error,
  since it means the ``--format`` was not ours.
* **Skipped lines.** Blank lines, and the pending array placeholder (``42_[4-9]``, one line
  for the tasks not started yet) when it never ran (State PENDING or no Start): it holds no
  resources. A placeholder with a start time is an error.
* **TRES strings.** See :func:`parse_tres`: memory in bytes, CPU time in whole seconds
  (fractions dropped, as Slurm itself keeps TRES CPU time in whole seconds), counts as is.
* **Finished.** A line is finished when it has an End and its state is not one of
  :data:`IN_PROGRESS_STATES`. REQUEUED (and REQUEUE_HOLD, REQUEUE_FED, SPECIAL_EXIT) with an
  End is an earlier run of a requeued job, listed because of ``--duplicates``: that run is
  over, so it is finished; the job's current run has its own line.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal
from itertools import product
from types import MappingProxyType

__all__ = [
    "IN_PROGRESS_STATES",
    "SACCT_FIELDS",
    "SacctError",
    "SacctRecord",
    "TresValue",
    "allocation_lines",
    "expand_hostlist",
    "gpu_count",
    "gpu_types",
    "hourly_gpu_seconds",
    "parse_sacct",
    "parse_tres",
    "sacct_arguments",
    "split_per_node",
]

SACCT_FIELDS: tuple[str, ...] = (
    "Cluster", "JobID", "JobIDRaw", "JobName", "Account", "User", "Partition", "QOS", "State",
    "Submit", "Start", "End", "ElapsedRaw", "AllocTRES", "TRESUsageInTot", "NodeList",
)  # fmt: skip
"""The columns :func:`sacct_arguments` asks for, in that order."""

_REQUIRED = ("JobID", "State", "Start", "End", "ElapsedRaw", "AllocTRES")
_IGNORED = (
    "ReqTRES", "TRESUsageInAve", "TRESUsageInMax", "TRESUsageInMin", "TRESUsageOutAve",
    "TRESUsageOutMax", "TRESUsageOutMin", "TRESUsageOutTot", "Elapsed", "ExitCode", "NNodes",
    "NCPUS", "AllocCPUS",
)  # fmt: skip
_KNOWN_COLUMNS = {name.lower(): name for name in (*SACCT_FIELDS, *_IGNORED)}

IN_PROGRESS_STATES = frozenset({
    "PENDING", "RUNNING", "SUSPENDED", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING",
    "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD",
})  # fmt: skip
"""Job states (Slurm's ``job_state_string``) whose numbers may still change. All others with
an End (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY,
BOOT_FAIL, DEADLINE, REVOKED, REQUEUED, ...) are over."""

TresValue = int
"""A TRES amount: a count, bytes (memory, disk) or whole seconds (CPU time in usage)."""

_COUNT_FIELDS = frozenset({"AllocTRES", "ReqTRES"})
_USAGE_FIELD = re.compile(r"TRESUsage(In|Out)(Ave|Max|Min|Tot)")
_TRES_KEY = re.compile(r"[^\s=]+")
_UNITS = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4, "P": 5}
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)([KMGTP]?)")
_DURATION = re.compile(
    r"(?:(?:(?P<days>\d+)-)?(?P<hours>\d+):)?(?P<minutes>\d+):(?P<seconds>\d+)(?:\.\d+)?"
)
_JOB_ID = re.compile(
    r"(?P<job>(?P<base>\d+)(?:_(?P<task>\d+)|_(?P<placeholder>\[[^\]]*\])|\+(?P<offset>\d+))?)"
    r"(?:\.(?P<step>[A-Za-z0-9]+(?:\+\d+)?))?"
)
_NO_TIME = frozenset({"", "Unknown", "None"})
_NO_NODES = frozenset({"", "None assigned", "(null)"})
_HOST_PART = re.compile(r"[A-Za-z0-9._-]*")
_MAX_HOSTS = 100_000
_ONE_SECOND = timedelta(seconds=1)
_ONE_MICROSECOND = timedelta(microseconds=1)
_ONE_HOUR = timedelta(hours=1)


class SacctError(ValueError):
    """sacct output that cannot be used: where (source, 1-based line, column) and why.

    ``str(e)`` is ``"{source}, line {line}, field {field}: {message}"``, without the field
    part when the line as a whole is wrong. Values are quoted, cut to 80 characters.
    """

    def __init__(self, source: str, line: int, field: str | None, message: str) -> None:
        where = f"{source}, line {line}" + (f", field {field}" if field else "")
        super().__init__(f"{where}: {message}")
        self.source = source
        self.line = line
        self.field = field
        self.message = message


def _quote(value: str) -> str:
    return repr(value[:80]) + ("..." if len(value) > 80 else "")


def sacct_arguments(*, start: datetime, end: datetime | None, all_users: bool = True) -> list[str]:
    """The arguments, after the program name, of a ``sacct`` run for ``[start, end]``.

    ``-S``/``-E`` without ``--state`` select jobs in any state during the window, so a job
    that spans a boundary appears in both windows it touches. ``--duplicates`` lists every
    run of a requeued job. The times are written in UTC: run sacct with ``TZ=UTC``. Start is
    rounded down and end up to the second, so the window is never narrowed.

    Raises:
        ValueError: A naive time, or ``end`` before ``start``.
    """
    args = ["--parsable2"]
    if all_users:
        args.append("--allusers")
    args += ["--duplicates", f"--format={','.join(SACCT_FIELDS)}"]
    args += ["--starttime", _sacct_time(start, round_up=False)]
    if end is not None:
        if end < start:
            raise ValueError("sacct window ends before it starts")
        args += ["--endtime", _sacct_time(end, round_up=True)]
    return args


def _sacct_time(instant: datetime, *, round_up: bool) -> str:
    if instant.utcoffset() is None:
        raise ValueError(f"{instant.isoformat()} has no time zone")
    instant = instant.astimezone(UTC)
    if round_up and instant.microsecond:
        instant += _ONE_SECOND
    return instant.strftime("%Y-%m-%dT%H:%M:%S")


def parse_tres(text: str, *, field: str = "AllocTRES") -> dict[str, int]:
    """Parse a TRES string such as ``cpu=1,gres/gpu:h100=8,mem=4000M`` into integers.

    Keys are kept as printed (they may hold ``/`` and ``:``). What a value means depends on
    the column it came from, ``field``:

    * AllocTRES, ReqTRES: counts, except memory (``mem``, ``gres/gpumem``, ``bb/*``), which
      is an amount with a binary unit (K, M, G, T, P; bare means M, Slurm's unit) returned
      in bytes. ``cpu`` is a number of CPUs.
    * TRESUsageIn*/TRESUsageOut* (Ave, Max, Min, Tot): ``cpu`` is CPU time, ``[D-]HH:MM:SS``,
      ``MM:SS`` or either with ``.mmm``, returned in whole seconds (a fraction is dropped).
      Every other value is a raw amount that sacct may shorten with a binary unit
      (``mem=219656K``, ``pages=2K``): returned times 1024 per unit step, so memory and
      disk in bytes, ``gres/gpuutil`` (a percentage) and ``energy`` as counts.

    A decimal amount is accepted only with a unit (what ``sacct --units`` prints) and rounded
    half up. A value printed ``NONE`` (no amount) leaves the key out. ``""`` gives ``{}``.

    Raises:
        ValueError: Naming the key, for an item without ``key=``, a repeated key or a value
            that is not of its kind; or for a ``field`` not listed above.
    """
    if field in _COUNT_FIELDS:
        usage = False
    elif _USAGE_FIELD.fullmatch(field):
        usage = True
    else:
        raise ValueError(f"{field} is not a TRES column this parser knows")
    result: dict[str, int] = {}
    if not text:
        return result
    for item in text.split(","):
        key, sep, value = item.partition("=")
        if not sep or not _TRES_KEY.fullmatch(key):
            raise ValueError(f"TRES item {_quote(item)} is not key=value")
        if key in result:
            raise ValueError(f"TRES {key!r} appears twice")
        if value == "NONE":
            continue
        if usage and key == "cpu":
            result[key] = _duration_seconds(key, value)
        elif usage or _is_memory(key):
            result[key] = _amount(key, value, bare_unit="" if usage else "M")
        elif _is_digits(value):
            result[key] = int(value)
        else:
            raise ValueError(f"TRES {key!r}: {_quote(value)} is not a whole number")
    return result


def _is_memory(key: str) -> bool:
    return key in ("mem", "gres/gpumem") or key.startswith("bb/")


def _amount(key: str, value: str, *, bare_unit: str) -> int:
    match = _AMOUNT.fullmatch(value)
    if match is None or ("." in match[1] and not match[2]):
        raise ValueError(f"TRES {key!r}: {_quote(value)} is not an amount (e.g. 512, 4000M)")
    scale = 1024 ** _UNITS[match[2] or bare_unit]
    return int((Decimal(match[1]) * scale).to_integral_value(ROUND_HALF_UP))


def _duration_seconds(key: str, value: str) -> int:
    match = _DURATION.fullmatch(value)
    if match is not None:
        days, hours, minutes, seconds = (
            int(match[name] or 0) for name in ("days", "hours", "minutes", "seconds")
        )
        if (
            seconds < 60
            and (match["hours"] is None or minutes < 60)
            and (match["days"] is None or hours < 24)
        ):
            return ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    raise ValueError(f"TRES {key!r}: {_quote(value)} is not a time such as 1-02:03:04")


def gpu_count(tres: Mapping[str, int]) -> int:
    """GPUs in a TRES map: ``gres/gpu`` when present (Slurm's total), else the sum of the
    typed ``gres/gpu:<type>`` entries, else 0. ``gres/gpumem``, ``gres/gpuutil`` are not GPUs."""
    if "gres/gpu" in tres:
        return tres["gres/gpu"]
    return sum(gpu_types(tres).values())


def gpu_types(tres: Mapping[str, int]) -> dict[str, int]:
    """The typed GPU entries, by type: ``{"h100": 8}`` from ``gres/gpu:h100=8``. Typed entries
    appear only for types listed in the cluster's ``AccountingStorageTRES``."""
    return {key[9:]: n for key, n in tres.items() if key.startswith("gres/gpu:")}


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Expand a Slurm hostlist: ``gpu[01-03,05]`` -> gpu01, gpu02, gpu03, gpu05.

    Patterns are separated by commas outside brackets (``a[1-2],b3``); several bracket groups
    in one pattern give every combination, the first group varying slowest
    (``rack[1-2]-n[01-02]``). A range keeps the zero padding of its lower bound. The order is
    that of the text. ``""`` and ``"None assigned"`` (a job that never ran) give ``()``.

    Raises:
        ValueError: Unbalanced or nested brackets, an empty pattern or range, a range that
            runs backwards, a character a hostname cannot hold, or over 100,000 hosts.
    """
    text = text.strip()
    if text in _NO_NODES:
        return ()
    hosts: list[str] = []
    for pattern in _split_patterns(text):
        groups: list[list[str]] = []
        for index, part in enumerate(re.split(r"\[([^\]]*)\]", pattern)):
            if index % 2:
                groups.append(_expand_ranges(part, text))
            elif _HOST_PART.fullmatch(part):
                groups.append([part])
            else:
                raise ValueError(f"hostlist {_quote(text)}: {_quote(part)} is not a host name")
        hosts.extend("".join(names) for names in product(*groups))
        if len(hosts) > _MAX_HOSTS:
            raise ValueError(f"hostlist {_quote(text)} names over {_MAX_HOSTS} hosts")
    return tuple(hosts)


def _split_patterns(text: str) -> list[str]:
    patterns, depth, begin = [], 0, 0
    for index, char in enumerate(text):
        if char == "[":
            depth += 1
        elif char == "]":
            depth -= 1
        elif char == "," and depth == 0:
            patterns.append(text[begin:index])
            begin = index + 1
        if depth not in (0, 1):
            raise ValueError(f"hostlist {_quote(text)} has unbalanced or nested brackets")
    patterns.append(text[begin:])
    if depth:
        raise ValueError(f"hostlist {_quote(text)} has unbalanced or nested brackets")
    if not all(patterns):
        raise ValueError(f"hostlist {_quote(text)} has an empty host")
    return patterns


def _expand_ranges(ranges: str, text: str) -> list[str]:
    numbers: list[str] = []
    for item in ranges.split(","):
        low, dash, high = item.partition("-")
        high = high if dash else low
        if not (_is_digits(low) and _is_digits(high)) or int(high) < int(low):
            raise ValueError(f"hostlist {_quote(text)}: [{ranges}] is not a list of ranges")
        if int(high) - int(low) >= _MAX_HOSTS:
            raise ValueError(f"hostlist {_quote(text)} names over {_MAX_HOSTS} hosts")
        numbers += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return numbers


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def split_per_node(gpus: int, nodes: Sequence[str]) -> dict[str, int]:
    """Split ``gpus`` evenly over ``nodes``, the remainder one each to the first nodes.

    The parts sum to ``gpus``. Slurm does not record how a job's GPUs were spread, so an even
    split is an estimate. No nodes and no GPUs gives ``{}``.

    Raises:
        ValueError: Negative ``gpus``, GPUs but no nodes, or a node named twice.
    """
    if gpus < 0:
        raise ValueError(f"negative GPU count {gpus}")
    if len(set(nodes)) != len(nodes):
        raise ValueError("a node is named twice")
    if not nodes:
        if gpus:
            raise ValueError(f"{gpus} GPUs but no nodes to put them on")
        return {}
    share, remainder = divmod(gpus, len(nodes))
    return {node: share + (index < remainder) for index, node in enumerate(nodes)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SacctRecord:
    """One line of sacct output: a job allocation (``step is None``) or one of its steps.

    ``job`` is the allocation's id as printed, without the step (``42``, ``42_3``, ``42+1``);
    ``job_id_raw`` the number Slurm keys the job by (an array task or het component has its
    own). With ``--duplicates`` an allocation id repeats, once per run of a requeued job.
    """

    cluster: str
    job_id: str
    job_id_raw: str
    job: str
    step: str | None
    array_job_id: str | None
    array_task_id: str | None
    het_job_id: str | None
    het_offset: int | None
    name: str
    account: str | None
    user: str | None
    partition: str | None
    qos: str | None
    state: str
    state_reason: str | None
    submit: datetime | None
    start: datetime | None
    end: datetime | None
    elapsed_s: int
    alloc_tres: Mapping[str, int]
    usage_in_tot: Mapping[str, int]
    nodes: tuple[str, ...]

    @property
    def gpus(self) -> int:
        """GPUs allocated (:func:`gpu_count` of AllocTRES); 0 while pending."""
        return gpu_count(self.alloc_tres)

    @property
    def finished(self) -> bool:
        """Whether this run is over: it has an End and a state not in
        :data:`IN_PROGRESS_STATES`."""
        return self.end is not None and self.state not in IN_PROGRESS_STATES

    def gpu_seconds(self) -> int:
        """GPUs times elapsed seconds (suspended time excluded, as ElapsedRaw excludes it)."""
        return self.gpus * self.elapsed_s


def allocation_lines(records: Iterable[SacctRecord]) -> list[SacctRecord]:
    """The allocation lines only (``step is None``): one per job run, holding AllocTRES."""
    return [record for record in records if record.step is None]


def parse_sacct(
    text: str, *, source: str, tz: tzinfo = UTC, cluster: str | None = None
) -> list[SacctRecord]:
    """Parse ``sacct --parsable2`` output, header line included, into records.

    Args:
        text: The output; ``\\n`` or ``\\r\\n`` line ends.
        source: Names the text in errors (a file name, ``"sacct on research"``).
        tz: The zone sacct printed times in (they carry none); the default fits ``TZ=UTC``.
        cluster: The cluster of the lines whose Cluster column is absent or empty.

    Returns:
        One record per line, in order, skipping blank lines and pending array placeholders
        (see the module docstring). Times are aware UTC; Unknown/None/empty give None.

    Raises:
        SacctError: Naming line and column: no header, an unknown, repeated or missing
            column, a line with the wrong number of fields, or a value that does not parse.
    """
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    header_at = next((i for i, line in enumerate(lines) if line.strip()), None)
    if header_at is None:
        raise SacctError(source, 1, None, "no header line (run sacct without --noheader)")
    columns = _read_header(lines[header_at], source, header_at + 1, has_cluster=cluster is not None)
    records: list[SacctRecord] = []
    for number, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        if not line.strip():
            continue
        values = line.split("|")
        if len(values) != len(columns):
            message = f"{len(values)} fields where the header has {len(columns)}"
            raise SacctError(source, number, None, message)
        record = _record(dict(zip(columns, values, strict=True)), source, number, tz, cluster)
        if record is not None:
            records.append(record)
    return records


def _read_header(line: str, source: str, number: int, *, has_cluster: bool) -> list[str]:
    columns: list[str] = []
    for name in line.split("|"):
        if not name:
            message = "empty column name (output of --parsable? use --parsable2)"
            raise SacctError(source, number, None, message)
        canonical = _KNOWN_COLUMNS.get(name.lower())
        if canonical is None:
            raise SacctError(source, number, name[:80], "unknown column")
        if canonical in columns:
            raise SacctError(source, number, canonical, "column appears twice")
        columns.append(canonical)
    for required in (*_REQUIRED, *(() if has_cluster else ("Cluster",))):
        if required not in columns:
            hint = " (or pass cluster=)" if required == "Cluster" else ""
            raise SacctError(source, number, required, f"required column missing{hint}")
    return columns


def _record(
    row: dict[str, str], source: str, number: int, tz: tzinfo, cluster: str | None
) -> SacctRecord | None:
    def fail(column: str, message: str) -> SacctError:
        return SacctError(source, number, column, message)

    job_id = row["JobID"]
    ids = _JOB_ID.fullmatch(job_id)
    if ids is None:
        raise fail("JobID", f"{_quote(job_id)} is not a job id (42, 42_3, 42+1, 42.batch)")
    state, _, reason = row["State"].strip().partition(" ")
    if not state:
        raise fail("State", "empty")
    times: dict[str, datetime | None] = {}
    for column in ("Submit", "Start", "End"):
        value = row.get(column, "")
        try:
            times[column] = None if value in _NO_TIME else _utc(value, tz)
        except ValueError:
            raise fail(column, f"{_quote(value)} is not a time (YYYY-MM-DDTHH:MM:SS)") from None
    if ids["placeholder"]:
        if state == "PENDING" or times["Start"] is None:
            return None
        raise fail("JobID", f"array placeholder {_quote(job_id)} has a start time")
    elapsed = row["ElapsedRaw"]
    if not _is_digits(elapsed):
        raise fail("ElapsedRaw", f"{_quote(elapsed)} is not a whole number of seconds")
    tres: dict[str, dict[str, int]] = {}
    for column in ("AllocTRES", "TRESUsageInTot"):
        try:
            tres[column] = parse_tres(row.get(column, ""), field=column)
        except ValueError as error:
            raise fail(column, str(error)) from None
    try:
        nodes = expand_hostlist(row.get("NodeList", ""))
    except ValueError as error:
        raise fail("NodeList", str(error)) from None
    cluster = row.get("Cluster") or cluster
    if not cluster:
        raise fail("Cluster", "empty (pass cluster= to name it)")
    return SacctRecord(
        cluster=cluster,
        job_id=job_id,
        job_id_raw=row.get("JobIDRaw") or job_id,
        job=ids["job"],
        step=ids["step"],
        array_job_id=ids["base"] if ids["task"] else None,
        array_task_id=ids["task"],
        het_job_id=ids["base"] if ids["offset"] else None,
        het_offset=int(ids["offset"]) if ids["offset"] else None,
        name=row.get("JobName", ""),
        account=row.get("Account") or None,
        user=row.get("User") or None,
        partition=row.get("Partition") or None,
        qos=row.get("QOS") or None,
        state=state,
        state_reason=reason.strip() or None,
        submit=times["Submit"],
        start=times["Start"],
        end=times["End"],
        elapsed_s=int(elapsed),
        alloc_tres=MappingProxyType(tres["AllocTRES"]),
        usage_in_tot=MappingProxyType(tres["TRESUsageInTot"]),
        nodes=nodes,
    )


def _utc(value: str, tz: tzinfo) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=tz).astimezone(UTC)


def hourly_gpu_seconds(start: datetime, end: datetime, gpus: int) -> list[tuple[datetime, int]]:
    """Split ``gpus x`` the whole seconds of ``end - start`` over UTC hours ``[h, h+1h)``.

    The run is taken to last ``floor(end - start)`` whole seconds from ``start``. With ``t(b)``
    the time from ``start`` to an hour boundary ``b`` (capped at that length, in
    microseconds), hour ``h`` gets ``floor(gpus * t(h+1h)) - floor(gpus * t(h))`` (in
    seconds): the parts telescope, so they sum to ``gpus x whole seconds`` exactly, and no
    hour gets more than it holds, rounded up. Returns ``(hour start, GPU-seconds)`` in time
    order, leaving out hours whose part is 0.

    Raises:
        ValueError: A naive time, ``end`` before ``start`` or negative ``gpus``.
    """
    if start.utcoffset() is None or end.utcoffset() is None:
        raise ValueError("start and end need a time zone")
    if end < start or gpus < 0:
        raise ValueError("need start <= end and gpus >= 0")
    start = start.astimezone(UTC)
    length_us = (end - start) // _ONE_SECOND * 1_000_000
    parts: list[tuple[datetime, int]] = []
    hour = start.replace(minute=0, second=0, microsecond=0)
    booked = 0
    while (hour - start) // _ONE_MICROSECOND < length_us:
        hour_end_us = min((hour + _ONE_HOUR - start) // _ONE_MICROSECOND, length_us)
        cumulative = gpus * hour_end_us // 1_000_000
        if cumulative > booked:
            parts.append((hour, cumulative - booked))
        booked = cumulative
        hour += _ONE_HOUR
    return parts
