"""`specledger probe schedule`: the exact crontab line, systemd units and CronJob; the key
is never in them; systemd accepts the units and the YAML parses to the CronJob meant."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from app.cli.probe import probe_app
from app.probe.schedule import (
    Interval,
    InvalidSchedule,
    ProbeCommand,
    ScheduleFormat,
    render_schedule,
)

# A backslash at the end of a line below continues the string (Python drops it and the
# newline); the kubectl line's doubled backslash is a real one.
COMMAND = ProbeCommand(deployment="smol-ngram", proxy_url="http://proxy.internal:8080")
ARGS = [
    "schedule",
    "--deployment",
    "smol-ngram",
    "--proxy-url",
    "http://proxy.internal:8080",
    "--executable",
    "/opt/specledger/bin/specledger",
]

CRON = """\
# SpecLedger acceptance probe of smol-ngram, every 1h; add with `crontab -e`.
# /etc/specledger/probe.env (owned by the probe's user, mode 0600) holds the key and the
# database, one VAR=value a line: SPECLEDGER_PROBE_KEY=slk_... and SPECLEDGER_DATABASE_URL=...
0 * * * * set -a; . /etc/specledger/probe.env; set +a; /opt/specledger/bin/specledger probe run \
--deployment smol-ngram --proxy-url http://proxy.internal:8080
"""

SYSTEMD = """\
# /etc/systemd/system/specledger-probe-smol-ngram.service
# /etc/specledger/probe.env (owned by the probe's user, mode 0600) holds the key and the
# database, one VAR=value a line: SPECLEDGER_PROBE_KEY=slk_... and SPECLEDGER_DATABASE_URL=...
[Unit]
Description=SpecLedger acceptance probe of smol-ngram
Wants=network-online.target
After=network-online.target

[Service]
Type=oneshot
EnvironmentFile=/etc/specledger/probe.env
ExecStart=/opt/specledger/bin/specledger probe run --deployment smol-ngram --proxy-url \
http://proxy.internal:8080 --concurrency 2

# /etc/systemd/system/specledger-probe-smol-ngram.timer
[Unit]
Description=Run the SpecLedger acceptance probe of smol-ngram every 6h

[Timer]
OnCalendar=*-*-* 00/6:00:00
Persistent=true

[Install]
WantedBy=timers.target

# Then: systemctl daemon-reload && systemctl enable --now specledger-probe-smol-ngram.timer
"""

KUBERNETES = """\
# SpecLedger acceptance probe of smol-ngram, every 15m. The Secret holds the probe
# key and the database URL:
#   kubectl create secret generic specledger-probe \\
#     --from-literal=probe-key=slk_... --from-literal=database-url=...
apiVersion: batch/v1
kind: CronJob
metadata:
  name: specledger-probe-smol-ngram
  labels:
    app.kubernetes.io/name: specledger-probe
spec:
  schedule: "*/15 * * * *"
  timeZone: "Etc/UTC"
  concurrencyPolicy: Forbid
  successfulJobsHistoryLimit: 3
  failedJobsHistoryLimit: 3
  jobTemplate:
    spec:
      backoffLimit: 0
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: probe
              image: "registry.example/specledger:0.1.0"
              command: ["specledger", "probe", "run", "--deployment", "smol-ngram", \
"--proxy-url", "http://proxy.internal:8080", "--model", "SmolLM2-135M-Instruct"]
              env:
                - name: SPECLEDGER_PROBE_KEY
                  valueFrom:
                    secretKeyRef:
                      name: "specledger-probe"
                      key: probe-key
                - name: SPECLEDGER_DATABASE_URL
                  valueFrom:
                    secretKeyRef:
                      name: "specledger-probe"
                      key: database-url
"""


def _cli(*args: str) -> str:
    result = CliRunner().invoke(probe_app, [*ARGS, *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_cron_line_exactly():
    assert _cli("--every", "1h") == CRON
    assert _cli() == CRON  # every hour by default, cron by default


def test_systemd_units_exactly():
    assert _cli("--every", "6h", "--format", "systemd", "--concurrency", "2") == SYSTEMD


def test_kubernetes_cronjob_exactly():
    text = _cli(
        "--every",
        "15m",
        "--format",
        "kubernetes",
        "--image",
        "registry.example/specledger:0.1.0",
        "--model",
        "SmolLM2-135M-Instruct",
    )
    assert text == KUBERNETES
    job = yaml.safe_load(text)
    container = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:3] == ["specledger", "probe", "run"]
    assert {e["name"]: e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"]} == {
        "SPECLEDGER_PROBE_KEY": "probe-key",
        "SPECLEDGER_DATABASE_URL": "database-url",
    }
    assert job["spec"]["schedule"] == "*/15 * * * *"


@pytest.mark.parametrize(
    ("every", "cron", "calendar"),
    [
        ("1m", "* * * * *", "*-*-* *:*:00"),
        ("15m", "*/15 * * * *", "*-*-* *:00/15:00"),
        ("1h", "0 * * * *", "*-*-* *:00:00"),
        ("12h", "0 */12 * * *", "*-*-* 00/12:00:00"),
        ("24h", "0 0 * * *", "*-*-* 00:00:00"),
        ("1d", "0 0 * * *", "*-*-* 00:00:00"),
    ],
)
def test_intervals_cron_and_systemd_both_run_exactly(every, cron, calendar):
    interval = Interval.parse(every)
    assert (interval.cron, interval.on_calendar) == (cron, calendar)


@pytest.mark.parametrize("every", ["7m", "90m", "5h", "2d", "0h", "1w", "hourly", ""])
def test_intervals_that_do_not_divide_evenly_are_refused(every):
    with pytest.raises(InvalidSchedule, match="divide"):
        Interval.parse(every)
    result = CliRunner().invoke(probe_app, [*ARGS, "--every", every])
    assert result.exit_code == 2
    assert "divide" in result.output


def test_kubernetes_needs_an_image_and_the_key_is_never_printed(monkeypatch):
    monkeypatch.setenv("SPECLEDGER_PROBE_KEY", "slk_" + "s" * 43)
    result = CliRunner().invoke(probe_app, [*ARGS, "--format", "kubernetes"])
    assert result.exit_code == 2
    assert "--image" in result.output
    for fmt in ("cron", "systemd"):
        assert "slk_s" not in _cli("--format", fmt)


def test_odd_characters_are_quoted_for_each_reader():
    command = ProbeCommand(deployment="team a/b", proxy_url="http://p:1/v1?x=%41&y=$HOME")
    cron = render_schedule(ScheduleFormat.cron, command, every="1h", executable="/x/specledger")
    assert "'http://p:1/v1?x=\\%41&y=$HOME'" in cron  # shell-quoted; % escaped for cron
    systemd = render_schedule(
        ScheduleFormat.systemd, command, every="1h", executable="/x/specledger"
    )
    assert "specledger-probe-team-a-b.service" in systemd
    assert "'http://p:1/v1?x=%%41&y=$$HOME'" in systemd
    job = render_schedule(ScheduleFormat.kubernetes, command, every="1h", image="i")
    assert yaml.safe_load(job)["metadata"]["name"] == "specledger-probe-team-a-b"


def test_systemd_accepts_the_units(tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (an optional check)")
    text = render_schedule(
        ScheduleFormat.systemd, COMMAND, every="15m", executable=shutil.which("true") or "/bin/true"
    )
    service, timer = text.split("\n\n# /etc/systemd/system/")
    (tmp_path / "specledger-probe-smol-ngram.service").write_text(service + "\n")
    (tmp_path / "specledger-probe-smol-ngram.timer").write_text(
        timer.split("\n", 1)[1].rsplit("\n# Then:", 1)[0] + "\n"
    )
    result = subprocess.run(
        [analyze, "verify", *(str(p) for p in sorted(tmp_path.iterdir()))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr
