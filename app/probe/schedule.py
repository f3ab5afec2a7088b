"""``specledger probe schedule``: the crontab line, systemd unit pair or Kubernetes CronJob
that runs ``specledger probe run`` for one deployment on a fixed interval. Pure text.

The proxy key never appears in what is printed: cron and systemd read it (and the
database URL) from an environment file readable by the probe's user only, Kubernetes from
a Secret. Intervals are those both cron and systemd calendars express exactly: minutes
that divide an hour, hours that divide a day, or one day.
"""

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from app.domain.errors import Invalid

KEY_ENV = "SPECLEDGER_PROBE_KEY"
DATABASE_ENV = "SPECLEDGER_DATABASE_URL"
DEFAULT_ENV_FILE = "/etc/specledger/probe.env"
DEFAULT_SECRET = "specledger-probe"
SECRET_KEYS = {KEY_ENV: "probe-key", DATABASE_ENV: "database-url"}
"""Environment variable -> key in the Kubernetes Secret."""


class ScheduleFormat(StrEnum):
    cron = "cron"
    systemd = "systemd"
    kubernetes = "kubernetes"


class InvalidSchedule(Invalid):
    code = "invalid_schedule"


@dataclass(frozen=True, slots=True)
class Interval:
    count: int
    unit: str
    """``m``, ``h`` or ``d``."""

    @classmethod
    def parse(cls, text: str) -> "Interval":
        """``15m``, ``1h``, ``6h``, ``1d``...

        Raises:
            InvalidSchedule: For anything cron and systemd cannot both run exactly.
        """
        found = re.fullmatch(r"\s*(\d+)\s*([mhd])\s*", text)
        count = int(found.group(1)) if found else 0
        unit = found.group(2) if found else ""
        exact = (
            (unit == "m" and 0 < count < 60 and 60 % count == 0)
            or (unit == "h" and 0 < count <= 24 and 24 % count == 0)
            or (unit == "d" and count == 1)
        )
        if not exact:
            raise InvalidSchedule(
                f"--every {text!r}: give minutes that divide an hour (5m, 15m, 30m), hours "
                "that divide a day (1h, 2h, 6h, 12h) or 1d"
            )
        if unit == "h" and count == 24:
            return cls(1, "d")
        return cls(count, unit)

    def __str__(self) -> str:
        return f"{self.count}{self.unit}"

    @property
    def cron(self) -> str:
        if self.unit == "m":
            return "* * * * *" if self.count == 1 else f"*/{self.count} * * * *"
        if self.unit == "h":
            return "0 * * * *" if self.count == 1 else f"0 */{self.count} * * *"
        return "0 0 * * *"

    @property
    def on_calendar(self) -> str:
        if self.unit == "m":
            return "*-*-* *:*:00" if self.count == 1 else f"*-*-* *:00/{self.count}:00"
        if self.unit == "h":
            return "*-*-* *:00:00" if self.count == 1 else f"*-*-* 00/{self.count}:00:00"
        return "*-*-* 00:00:00"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeCommand:
    """What each scheduled run does: ``specledger probe run`` with these options."""

    deployment: str
    proxy_url: str
    model: str | None = None
    concurrency: int = 1
    probe_set: str | None = None
    team: str | None = None

    def args(self) -> list[str]:
        args = ["probe", "run", "--deployment", self.deployment, "--proxy-url", self.proxy_url]
        if self.model:
            args += ["--model", self.model]
        if self.concurrency != 1:
            args += ["--concurrency", str(self.concurrency)]
        if self.probe_set:
            args += ["--probe-set", self.probe_set]
        if self.team:
            args += ["--team", self.team]
        return args


def _slug(text: str, allowed: str) -> str:
    return re.sub(f"[^{allowed}]+", "-", text).strip("-") or "deployment"


def unit_name(deployment: str) -> str:
    """``specledger-probe-<deployment>``, in the characters unit names allow."""
    return f"specledger-probe-{_slug(deployment, 'A-Za-z0-9_.')}"


def cronjob_name(deployment: str) -> str:
    """A DNS-1123 name of at most 52 characters (a CronJob's limit)."""
    return f"specledger-probe-{_slug(deployment.lower(), 'a-z0-9')}"[:52].rstrip("-")


def render_schedule(
    fmt: ScheduleFormat,
    command: ProbeCommand,
    *,
    every: str,
    executable: str = "specledger",
    env_file: str = DEFAULT_ENV_FILE,
    image: str | None = None,
    secret: str = DEFAULT_SECRET,
) -> str:
    """The text to install, ending with a newline.

    Args:
        fmt: Crontab line, systemd service and timer, or Kubernetes CronJob.
        command: The probe run each firing starts.
        every: The interval (:meth:`Interval.parse`).
        executable: The ``specledger`` script (cron, systemd: best an absolute path).
        env_file: Holds ``SPECLEDGER_PROBE_KEY=...`` and ``SPECLEDGER_DATABASE_URL=...``
            (cron, systemd).
        image: A container image with SpecLedger installed (Kubernetes; required).
        secret: The Kubernetes Secret holding the key and the database URL.

    Raises:
        InvalidSchedule: For an interval that cannot be run exactly, or Kubernetes without
            an image.
    """
    interval = Interval.parse(every)
    if fmt is ScheduleFormat.cron:
        return _cron(command, interval, executable=executable, env_file=env_file)
    if fmt is ScheduleFormat.systemd:
        return _systemd(command, interval, executable=executable, env_file=env_file)
    if not image:
        raise InvalidSchedule("a Kubernetes CronJob needs --image: an image with specledger")
    return _kubernetes(command, interval, image=image, secret=secret)


def _env_note(env_file: str, prefix: str = "# ") -> list[str]:
    return [
        f"{prefix}{env_file} (owned by the probe's user, mode 0600) holds the key and the",
        f"{prefix}database, one VAR=value a line: {KEY_ENV}=slk_... and {DATABASE_ENV}=...",
    ]


def _cron(command: ProbeCommand, interval: Interval, *, executable: str, env_file: str) -> str:
    run = shlex.join([executable, *command.args()])
    line = f"{interval.cron} set -a; . {shlex.quote(env_file)}; set +a; {run}"
    return "\n".join(
        [
            f"# SpecLedger acceptance probe of {command.deployment}, every {interval}; "
            "add with `crontab -e`.",
            *_env_note(env_file),
            line.replace("%", "\\%"),  # cron reads a bare % as a newline
            "",
        ]
    )


def _systemd_quote(args: Sequence[str]) -> str:
    # systemd expands %specifiers and $VARIABLES in ExecStart: double them.
    return shlex.join(args).replace("%", "%%").replace("$", "$$")


def _systemd(command: ProbeCommand, interval: Interval, *, executable: str, env_file: str) -> str:
    name = unit_name(command.deployment)
    return "\n".join(
        [
            f"# /etc/systemd/system/{name}.service",
            *_env_note(env_file),
            "[Unit]",
            f"Description=SpecLedger acceptance probe of {command.deployment}",
            "Wants=network-online.target",
            "After=network-online.target",
            "",
            "[Service]",
            "Type=oneshot",
            f"EnvironmentFile={env_file}",
            f"ExecStart={_systemd_quote([executable, *command.args()])}",
            "",
            f"# /etc/systemd/system/{name}.timer",
            "[Unit]",
            f"Description=Run the SpecLedger acceptance probe of {command.deployment} "
            f"every {interval}",
            "",
            "[Timer]",
            f"OnCalendar={interval.on_calendar}",
            "Persistent=true",
            "",
            "[Install]",
            "WantedBy=timers.target",
            "",
            f"# Then: systemctl daemon-reload && systemctl enable --now {name}.timer",
            "",
        ]
    )


def _kubernetes(command: ProbeCommand, interval: Interval, *, image: str, secret: str) -> str:
    def q(text: str) -> str:
        return json.dumps(text)  # a JSON string is a YAML double-quoted scalar

    args = ", ".join(q(a) for a in ["specledger", *command.args()])
    key_literal, database_literal = SECRET_KEYS.values()
    lines = [
        f"# SpecLedger acceptance probe of {command.deployment}, every {interval}. The Secret "
        "holds the probe",
        "# key and the database URL:",
        f"#   kubectl create secret generic {secret} \\",
        f"#     --from-literal={key_literal}=slk_... --from-literal={database_literal}=...",
        "apiVersion: batch/v1",
        "kind: CronJob",
        "metadata:",
        f"  name: {cronjob_name(command.deployment)}",
        "  labels:",
        "    app.kubernetes.io/name: specledger-probe",
        "spec:",
        f"  schedule: {q(interval.cron)}",
        '  timeZone: "Etc/UTC"',
        "  concurrencyPolicy: Forbid",
        "  successfulJobsHistoryLimit: 3",
        "  failedJobsHistoryLimit: 3",
        "  jobTemplate:",
        "    spec:",
        "      backoffLimit: 0",
        "      template:",
        "        spec:",
        "          restartPolicy: Never",
        "          containers:",
        "            - name: probe",
        f"              image: {q(image)}",
        f"              command: [{args}]",
        "              env:",
    ]
    for variable, key in SECRET_KEYS.items():
        lines += [
            f"                - name: {variable}",
            "                  valueFrom:",
            "                    secretKeyRef:",
            f"                      name: {q(secret)}",
            f"                      key: {key}",
        ]
    return "\n".join([*lines, ""])
