"""``specledger probe``: continuous acceptance benchmarking. Run the fixed probe set through
a deployment's metering proxy, list the runs, judge drift against each deployment's
baseline, and print the cron / systemd / Kubernetes schedule that runs it (mounted by
app.cli)."""

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from app.cli._support import open_engine, progress_bar, user_errors
from app.domain.money import format_micros
from app.probe.probe_set import BUNDLED_SHA256, ProbeSet, load_probe_set
from app.probe.rules.defaults import (
    BASELINE_RUNS,
    DEFAULT_TEAM,
    DEFAULT_TIMEOUT_S,
    PROBE_H,
    PROBE_K,
)
from app.probe.schedule import (
    DEFAULT_ENV_FILE,
    DEFAULT_SECRET,
    KEY_ENV,
    ProbeCommand,
    ScheduleFormat,
    render_schedule,
)

if TYPE_CHECKING:
    from app.domain.findings import Finding
    from app.models import ProbeRun
    from app.probe import service

probe_app = typer.Typer(
    help="Continuous acceptance benchmarking: a fixed, versioned probe set sent through each "
    "deployment on a schedule (metered and charged under the probe's own team), and a CUSUM "
    "on each deployment's probe acceptance against its baseline.",
    no_args_is_help=True,
)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
DeploymentOption = Annotated[str, typer.Option("--deployment", help="The deployment probed.")]
ProxyUrlOption = Annotated[
    str, typer.Option("--proxy-url", help="The metering proxy in front of the deployment.")
]
ModelOption = Annotated[
    str | None,
    typer.Option(help="The model to ask for (default: the first the proxy lists for the key)."),
]
ConcurrencyOption = Annotated[int, typer.Option(min=1, max=256, help="Requests in flight.")]
ProbeSetOption = Annotated[
    str | None,
    typer.Option(
        "--probe-set",
        help=f"A bundled probe set ({', '.join(BUNDLED_SHA256)}; default v1) or a JSONL file "
        "of {id, kind, messages, max_tokens} lines.",
    ),
]
TeamOption = Annotated[
    str,
    typer.Option(help="The team the probe key must bill: probe traffic is charged to it."),
]


def _probe_set(value: str | None) -> ProbeSet:
    if value is None or value in BUNDLED_SHA256:
        return load_probe_set(version=value)
    return load_probe_set(Path(value))


def _iso(moment: datetime | None) -> str | None:
    return f"{moment:%Y-%m-%dT%H:%M:%SZ}" if moment else None


def _round(value: float | None, places: int = 4) -> float | None:
    return None if value is None else round(value, places)


def _run_row(run: "ProbeRun") -> dict[str, Any]:
    return {
        "id": run.id,
        "deployment": run.deployment,
        "model": run.model,
        "proxy_url": run.proxy_url,
        "team": run.team,
        "session_id": run.session_id,
        "probe_set": run.probe_set_version,
        "probe_set_sha256": run.probe_set_sha256,
        "concurrency": run.concurrency,
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "requests": run.requests,
        "ok": run.ok,
        "output_tokens": run.output_tokens,
        "num_drafts": run.num_drafts,
        "draft_tokens": run.draft_tokens,
        "accepted_tokens": run.accepted_tokens,
        "acceptance_rate": _round(run.acceptance_rate),
        "acceptance_histogram": list(run.acceptance_histogram),
        "acceptance_per_position": [round(r, 4) for r in run.acceptance_per_position],
        "tokens_per_s": _round(run.tokens_per_s, 2),
        "tpot_p50_ms": _round(run.tpot_p50_ms, 2),
        "tpot_p90_ms": _round(run.tpot_p90_ms, 2),
        "ttft_p50_ms": _round(run.ttft_p50_ms, 2),
        "error": run.error,
    }


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value, fmt)


def _run_line(run: "ProbeRun") -> str:
    positions = " ".join(f"{r:.0%}" for r in run.acceptance_per_position) or "-"
    return (
        f"{run.id:>5}  {_iso(run.started_at)}  {run.deployment:<16} {run.probe_set_version:<4} "
        f"ok {run.ok}/{run.requests}  acceptance {_pct(run.acceptance_rate):>6} "
        f"(per position {positions})  {_num(run.tokens_per_s)} tok/s  "
        f"TPOT p50 {_num(run.tpot_p50_ms)} ms p90 {_num(run.tpot_p90_ms)} ms"
    )


@probe_app.command("run")
def probe_run(
    deployment: DeploymentOption,
    proxy_url: ProxyUrlOption,
    key: Annotated[
        str | None,
        typer.Option(
            envvar=KEY_ENV,
            show_envvar=True,
            help="A proxy key of the probe team limited to the deployment (`specledger keys "
            "create --proxy --team probe --deployments D`). Best from the environment: a key "
            "on the command line shows in the process list.",
        ),
    ] = None,
    model: ModelOption = None,
    concurrency: ConcurrencyOption = 1,
    probe_set: ProbeSetOption = None,
    team: TeamOption = DEFAULT_TEAM,
    timeout: Annotated[
        float, typer.Option(min=1, help="Seconds each request may take.")
    ] = DEFAULT_TIMEOUT_S,
    as_json: JsonOption = False,
) -> None:
    """Send the probe set through the deployment's metering proxy once and store the run:
    acceptance (and per draft position, from vLLM's per-request metrics), tokens/s and TPOT.
    Exit status 1 if a request failed (the run is stored all the same)."""
    if not key:
        raise typer.BadParameter(f"give --key or set {KEY_ENV}", param_hint="--key")
    from sqlalchemy.orm import Session

    from app.probe import service
    from app.settings import get_settings

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine:
        chosen = _probe_set(probe_set)
        with (
            progress_bar(sys.stderr.isatty()) as hook,
            Session(engine, expire_on_commit=False) as session,
        ):
            run = service.run_probe(
                session,
                deployment=deployment,
                proxy_url=proxy_url,
                api_key=key,
                model=model,
                probe_set=chosen,
                concurrency=concurrency,
                now=datetime.now(UTC),
                team=team,
                timeout_s=timeout,
                progress=hook,
            )
            session.commit()
    if as_json:
        typer.echo(json.dumps(_run_row(run), indent=2))
    else:
        typer.echo(_run_line(run))
        if run.error:
            typer.echo(f"       first error: {run.error}")
    if run.ok < run.requests:
        raise typer.Exit(1)


@probe_app.command("list")
def probe_list(
    deployment: Annotated[str | None, typer.Option(help="Only this deployment's runs.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 50,
    as_json: JsonOption = False,
) -> None:
    """Probe runs, newest first."""
    from app.db import read_session
    from app.probe import service
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        runs = service.list_runs(session, deployment=deployment, limit=limit)
    if as_json:
        typer.echo(json.dumps([_run_row(r) for r in runs], indent=2))
        return
    if not runs:
        typer.echo("no probe runs; run one with `specledger probe run`")
    for run in runs:
        typer.echo(_run_line(run))


def _series_row(series: "service.ProbeSeries", now: datetime) -> dict[str, Any]:
    from app.probe import service

    drift = series.drift
    return {
        "deployment": series.deployment,
        "model": series.model,
        "probe_set": series.probe_set_version,
        "probe_set_sha256": series.probe_set_sha256,
        "concurrency": series.concurrency,
        "runs": series.runs,
        "baseline_runs": series.baseline_runs,
        "baseline_rate": _round(series.baseline_rate),
        "latest_rate": _round(series.latest_rate),
        "latest_at": _iso(series.latest_at),
        "drift": None
        if drift is None
        else {
            "change_at": _iso(drift.change_at),
            "alarm_at": _iso(drift.alarm_at),
            "change_run_id": drift.change_run_id,
            "baseline_rate": round(drift.baseline_rate, 4),
            "recent_rate": round(drift.recent_rate, 4),
            "baseline_per_position": [round(r, 4) for r in drift.baseline_positions],
            "recent_per_position": [round(r, 4) for r in drift.recent_positions],
            "runs_since_change": drift.runs_since_change,
            "statistic": round(drift.statistic, 2),
            "cost": _money(drift.cost_micros),
            "currency": drift.currency,
            "finding": _finding_row(service.drift_finding(drift, now=now)),
        },
    }


def _money(micros: int) -> str:
    return format_micros(micros)


def _finding_row(finding: "Finding") -> dict[str, Any]:
    return {
        "kind": str(finding.kind),
        "scope": str(finding.scope),
        "key": finding.key,
        "window_cost": _money(finding.window_cost_micros),
        "estimated_monthly_cost": _money(finding.monthly_cost_micros),
        "action": finding.action,
        "detail": finding.detail,
    }


@probe_app.command("drift")
def probe_drift(
    deployment: Annotated[str | None, typer.Option(help="Only this deployment.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Each deployment's probe acceptance against its baseline: Page's CUSUM (downward) on
    the runs of one probe set, model and concurrency, the baseline being their first
    {baseline} runs (median and MAD), k = {k}, h = {h}. A drift is dated at the first run of
    the lower acceptance and costed as the deployment's spend since then times the extra
    verification work. `specledger alerts check` alerts on it."""
    from app.db import read_session
    from app.probe import service
    from app.settings import get_settings

    settings = get_settings()
    now = datetime.now(UTC)
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        found = service.probe_drift(
            session, deployment, now=now, currency=settings.default_currency
        )
    rows = [_series_row(series, now) for series in found]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no probe runs; run one with `specledger probe run`")
    for series, row in zip(found, rows, strict=True):
        head = (
            f"{series.deployment:<16} {series.probe_set_version:<4} c={series.concurrency:<3} "
            f"{series.runs:>4} runs  baseline {_pct(series.baseline_rate)}  "
            f"latest {_pct(series.latest_rate)}"
        )
        drift = series.drift
        if series.baseline_runs < BASELINE_RUNS:
            typer.echo(f"{head}  collecting the baseline ({series.baseline_runs}/{BASELINE_RUNS})")
        elif drift is None:
            typer.echo(f"{head}  steady")
        else:
            typer.echo(
                f"{head}  DRIFT since {row['drift']['change_at']} (alarm at "
                f"{row['drift']['alarm_at']}): {drift.baseline_rate:.1%} -> "
                f"{drift.recent_rate:.1%}, about {row['drift']['cost']} {drift.currency} since"
            )


probe_drift.__doc__ = (probe_drift.__doc__ or "").format(
    baseline=BASELINE_RUNS, k=PROBE_K, h=PROBE_H
)


@probe_app.command("schedule")
def probe_schedule(
    deployment: DeploymentOption,
    proxy_url: ProxyUrlOption,
    every: Annotated[
        str,
        typer.Option(
            help="How often: minutes that divide an hour (15m), hours that divide a day (1h, "
            "6h) or 1d."
        ),
    ] = "1h",
    fmt: Annotated[
        ScheduleFormat,
        typer.Option(
            "--format",
            help="cron: a crontab line; systemd: a .service and .timer pair; kubernetes: a "
            "CronJob manifest.",
        ),
    ] = ScheduleFormat.cron,
    model: ModelOption = None,
    concurrency: ConcurrencyOption = 1,
    probe_set: ProbeSetOption = None,
    team: Annotated[
        str | None, typer.Option(help="The probe team, if not the default 'probe'.")
    ] = None,
    executable: Annotated[
        str | None,
        typer.Option(
            help="The specledger script cron or systemd runs (default: this one's absolute path)."
        ),
    ] = None,
    env_file: Annotated[
        str,
        typer.Option(
            help=f"cron, systemd: the file holding {KEY_ENV} and SPECLEDGER_DATABASE_URL."
        ),
    ] = DEFAULT_ENV_FILE,
    image: Annotated[
        str | None, typer.Option(help="kubernetes: an image with SpecLedger installed.")
    ] = None,
    secret: Annotated[
        str, typer.Option(help="kubernetes: the Secret holding the key and the database URL.")
    ] = DEFAULT_SECRET,
) -> None:
    """Print what runs `specledger probe run` for a deployment on a schedule: a crontab
    line, a systemd service and timer, or a Kubernetes CronJob. The key is never part of it:
    it comes from an environment file or a Secret."""
    command = ProbeCommand(
        deployment=deployment,
        proxy_url=proxy_url,
        model=model,
        concurrency=concurrency,
        probe_set=probe_set,
        team=team if team and team != DEFAULT_TEAM else None,
    )
    with user_errors():
        text = render_schedule(
            fmt,
            command,
            every=every,
            executable=executable or shutil.which("specledger") or "specledger",
            env_file=env_file,
            image=image,
            secret=secret,
        )
    typer.echo(text, nl=False)


def register(app: typer.Typer) -> None:
    app.add_typer(probe_app, name="probe")
