"""CLI commands for the registry, allocation and the ledger (mounted by app.cli)."""

import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli._support import (
    STORE_HELP,
    UserError,
    as_utc,
    err,
    open_engine,
    open_store,
    parse_month,
    progress_bar,
    user_errors,
)
from app.domain.ledger import Dimension, SharedPolicy
from app.domain.money import format_micros, format_picos
from app.domain.periods import Month

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.allocation.windowing import Window
    from app.ledger.reconcile import Reconciliation

deployments_app = typer.Typer(
    help="Register deployments and replicas (GPUs, billing link).", no_args_is_help=True
)


def month_window(month: str) -> "Window":
    """The calendar month YYYY-MM as a half-open UTC window."""
    from app.allocation.windowing import Window

    return Window.of_month(parse_month(month))


def window_from(month: str | None, start: datetime | None, end: datetime | None) -> "Window":
    from app.allocation.windowing import Window

    if month and (start or end):
        raise typer.BadParameter("give --month or --start/--end, not both")
    if month:
        return month_window(month)
    if not (start and end):
        raise typer.BadParameter("give --month YYYY-MM, or --start and --end")
    start, end = as_utc(start), as_utc(end)
    if end <= start:
        raise typer.BadParameter("--end must be after --start (windows are half-open)")
    return Window(start, end)


@deployments_app.command("add")
def deployments_add(
    name: Annotated[str, typer.Argument(help="Deployment name, as the proxy records it.")],
    tag_value: Annotated[
        str | None,
        typer.Option(help="Value of the billing tag on this deployment's rows (default: NAME)."),
    ] = None,
    tier: Annotated[str | None, typer.Option(help="prototype, scaled or enterprise.")] = None,
    shared_policy: Annotated[
        SharedPolicy,
        typer.Option(
            help="How shared rows (networking, storage) "
            "are split: proportional (to GPU-seconds), "
            "even (across active teams) or team."
        ),
    ] = SharedPolicy.proportional,
    shared_team: Annotated[
        str | None, typer.Option(help="The team for --shared-policy team.")
    ] = None,
) -> None:
    """Register a deployment. Billing rows tagged SPECLEDGER_BILLING_TAG_KEY=TAG_VALUE (or
    whose ResourceId is one of its replicas') are allocated to its requests."""
    from app.db import unit_of_work
    from app.deployments import service as registry
    from app.settings import get_settings

    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        unit_of_work(engine) as session,
    ):
        registry.add_deployment(
            session,
            name=name,
            tag_value=tag_value,
            tier=tier,
            shared_policy=shared_policy,
            shared_team=shared_team,
        )
    typer.echo(f"deployment {name} registered")


@deployments_app.command("add-replica")
def deployments_add_replica(
    deployment: Annotated[str, typer.Argument(help="The deployment.")],
    name: Annotated[str, typer.Argument(help="Replica name, as the proxy records it.")],
    gpus: Annotated[int, typer.Option(help="GPUs in this replica.")],
    resource_id: Annotated[
        str | None, typer.Option(help="Billing ResourceId of its instance.")
    ] = None,
    url: Annotated[str | None, typer.Option(help="Base URL of its vLLM server.")] = None,
) -> None:
    """Register a replica: its GPUs set the deployment's capacity (GPU-seconds per hour)."""
    from app.db import unit_of_work
    from app.deployments import service as registry
    from app.settings import get_settings

    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        unit_of_work(engine) as session,
    ):
        registry.add_replica(
            session,
            deployment=deployment,
            name=name,
            gpus=gpus,
            resource_id=resource_id,
            base_url=url,
        )
    typer.echo(f"replica {deployment}/{name} registered ({gpus} GPUs)")


@deployments_app.command("list")
def deployments_list() -> None:
    """List deployments with their replicas."""
    from app.db import read_session
    from app.deployments import service as registry
    from app.settings import get_settings

    with open_engine(get_settings()) as engine, read_session(engine) as session:
        for deployment, replicas in registry.list_deployments(session):
            typer.echo(
                f"{deployment.name}  tag={deployment.tag_value}  tier={deployment.tier}  "
                f"shared={deployment.shared_cost_policy}"
            )
            for r in replicas:
                typer.echo(f"  {r.name}  gpus={r.gpus}  resource_id={r.resource_id}")


def allocate(
    month: Annotated[
        str | None,
        typer.Option(
            help="Calendar month YYYY-MM (follows the invoice: rows by BillingPeriodStart)."
        ),
    ] = None,
    start: Annotated[datetime | None, typer.Option(help="Start of an ad-hoc window (UTC).")] = None,
    end: Annotated[datetime | None, typer.Option(help="End of the window (exclusive).")] = None,
    share_idle: Annotated[
        bool,
        typer.Option(
            help="Share idle GPU cost back to the requests in "
            "proportion to their GPU-seconds, instead of an "
            "idle line."
        ),
    ] = False,
    store: Annotated[str | None, typer.Option(help=STORE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Allocate billing to requests, idle time and teams, and write the ledger.

    GPU instance rows are split by GPU-seconds per charge period; shared rows by each
    deployment's policy; rows that match no deployment stay unallocated. Re-running an open
    month replaces its previous run atomically; a closed month is refused. With a store,
    usage is read from it and the entries are written to it; the database keeps the run,
    its rollups and the checksums of its files.
    """
    from app.allocation.engine import PlanEngine
    from app.allocation.service import run_allocation
    from app.db import unit_of_work
    from app.settings import get_settings

    window = window_from(month, start, end)
    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, unit_of_work(engine) as session:
        summary = run_allocation(
            session,
            window,
            share_idle=share_idle,
            tag_key=settings.billing_tag_key,
            engine=PlanEngine.of(settings),
            store=open_store(settings, store),
        )
    totals = {
        c: {k: format_micros(v) for k, v in kinds.items()} for c, kinds in summary.totals.items()
    }
    label = (
        str(window.month)
        if window.month
        else f"{window.start:%Y-%m-%dT%H:%MZ}..{window.end:%Y-%m-%dT%H:%MZ}"
    )
    if not summary.rows:
        err.print(
            f"[bold yellow]warning:[/] no bill for {label}: no billing rows to allocate, "
            "so no cost reaches any team; load the bill (`specledger ingest billing PATH`) "
            "and allocate again (`specledger reconcile` says NO BILL until then)",
            highlight=False,
            soft_wrap=True,
        )
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "run_id": summary.run_id,
                    "month": str(window.month) if window.month else None,
                    "rows": summary.rows,
                    "entries": summary.entries,
                    "replaced_run_id": summary.replaced_run_id,
                    "effective_cost_by_kind": totals,
                },
                indent=2,
            )
        )
        return
    typer.echo(
        f"run {summary.run_id} for {label}: {summary.rows} billing rows -> "
        f"{summary.entries} ledger entries"
        + (f" (replaced run {summary.replaced_run_id})" if summary.replaced_run_id else "")
    )
    for currency, kinds in totals.items():
        typer.echo(f"  {currency}: " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))


ledger_app = typer.Typer(help="Close months and inspect the ledger.", no_args_is_help=True)


@ledger_app.command("close")
def ledger_close(
    month: Annotated[
        Month, typer.Argument(help="The month to close, YYYY-MM.", parser=parse_month)
    ],
    yes: Annotated[
        bool,
        typer.Option(
            "--yes", "-y", help="Close without asking (needed when stdin is not a terminal)."
        ),
    ] = False,
) -> None:
    """Freeze a month: its ledger entries can never be updated or deleted again (the database
    refuses it). Billing that changes a closed month later becomes adjusting entries in the
    first open month, naming the month they correct.

    First shows the month's bill with what stays idle and unallocated (billing rows that
    matched no deployment), then asks; --yes closes without asking."""
    from app.db import read_session, unit_of_work
    from app.ledger.reconcile import reconcile
    from app.ledger.service import close_month
    from app.settings import get_settings

    with user_errors(), open_engine(get_settings()) as engine:
        with read_session(engine) as session:
            summary = reconcile(session, month)
        for line in close_summary(summary):
            err.print(line, highlight=False, soft_wrap=True)
        if not yes:
            if not _interactive():
                raise UserError(
                    f"closing {month} is permanent: run again with --yes to confirm "
                    "(stdin is not a terminal, so there is no one to ask)"
                )
            if not typer.confirm(f"Close {month} for good?", default=False, err=True):
                err.print(f"{month} left open")
                raise typer.Exit(1)
        with unit_of_work(engine) as session:
            closure = close_month(session, month)
    typer.echo(f"{month} closed (run {closure.run_id})")


def _interactive() -> bool:
    return sys.stdin.isatty()


def _share(part: int, whole: int) -> str:
    return f" ({100 * part / whole:.1f}%)" if whole else ""


def close_summary(summary: "Reconciliation") -> list[str]:
    """What a close freezes, per currency: the bill, and how much of it stays idle or
    unallocated (with the unallocated rows' count), so nobody closes a month by mistake."""
    from app.domain.ledger import EntryKind

    lines = []
    sums = summary.by_currency()
    for currency in sorted(set(summary.bill) | set(sums)):
        bill = summary.bill.get(currency)
        kinds = sums.get(currency, {})
        billed = bill.effective if bill else 0
        idle = kinds[EntryKind.idle].effective if EntryKind.idle in kinds else 0
        unallocated = (
            kinds[EntryKind.unallocated].effective if EntryKind.unallocated in kinds else 0
        )
        lines.append(
            f"{summary.month} {currency}: bill {format_picos(billed)}, idle "
            f"{format_picos(idle)}{_share(idle, billed)}, unallocated "
            f"{format_picos(unallocated)}{_share(unallocated, billed)}"
        )
    if summary.unallocated_rows:
        lines.append(
            f"{len(summary.unallocated_rows)} billing rows matched no deployment "
            f"(`specledger reconcile --month {summary.month}` lists them)"
        )
    if summary.pending_rows:
        lines.append(
            f"{summary.pending_rows} billing rows arrived after the allocation run: "
            f"run `specledger allocate --month {summary.month}` before closing"
        )
    for duplicate in summary.duplicates:
        lines.append(
            f"deliveries #{duplicate.other_id} and #{duplicate.delivery_id} hold "
            f"{duplicate.charges} of the same charges: remove one "
            "(`specledger billing deliveries remove ID`) and allocate again before closing"
        )
    if not sums and not summary.bill:
        lines.append(f"{summary.month}: no bill and no ledger entries")
    return lines


@ledger_app.command("verify")
def ledger_verify(
    month: Annotated[Month, typer.Argument(help="A closed month, YYYY-MM.", parser=parse_month)],
) -> None:
    """Prove a closed month's entry files in the Parquet store unchanged: every file the
    closure recorded is hashed again and compared. Exit status 1 names each file that
    changed or is missing."""
    from app.db import read_session
    from app.ledger.service import verify_closed_month
    from app.settings import get_settings

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        result = verify_closed_month(session, month, s3_endpoint_url=settings.s3_endpoint_url)
    for path in result.changed:
        typer.echo(f"changed: {path}")
    for path in result.missing:
        typer.echo(f"missing: {path}")
    if not result.ok:
        raise typer.Exit(1)
    typer.echo(f"{month}: {result.files} files in {result.store_uri} unchanged since the close")


@ledger_app.command("store-usage")
def ledger_store_usage(
    month: Annotated[
        Month, typer.Argument(help="Month of the requests to copy, YYYY-MM.", parser=parse_month)
    ],
    store: Annotated[str | None, typer.Option(help=STORE_HELP)] = None,
) -> None:
    """Copy a month's usage records from the database to the Parquet store (by arrival), for
    moving a ledger to a store; the records keep their database ids as their tie-break
    order, so both stores allocate them identically. Copying twice stores them twice; the
    allocation reads each event id once."""
    from sqlalchemy.orm import Session

    from app.settings import get_settings
    from app.storage.usage_store import copy_from_database

    settings = get_settings()
    with (
        user_errors(),
        open_engine(settings) as engine,
        Session(engine) as session,
        progress_bar(sys.stderr.isatty()) as hook,
    ):
        target = open_store(settings, store)
        if target is None:
            raise UserError("name the store: --store DIR|s3://bucket/prefix")
        copied = copy_from_database(session, target, month.start, month.end, hook)
    typer.echo(f"{copied} usage records of {month} copied to {target.uri}")


@ledger_app.command("closed")
def ledger_closed() -> None:
    """List the closed months."""
    from app.db import read_session
    from app.ledger.service import closed_months
    from app.settings import get_settings

    with open_engine(get_settings()) as engine, read_session(engine) as session:
        for closure in closed_months(session):
            typer.echo(
                f"{closure.month}  closed {closure.closed_at:%Y-%m-%d %H:%M}Z  run {closure.run_id}"
            )


def costs(
    month: Annotated[Month, typer.Option(help="The month, YYYY-MM.", parser=parse_month)],
    by: Annotated[
        str,
        typer.Option(
            help="Comma-separated: team, session, deployment, model, "
            "method, cost_center or tag:KEY."
        ),
    ] = "team",
    team: Annotated[str | None, typer.Option(help="Only this team's lines.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Unit costs for a month: allocated cost (effective and billed), GPU-seconds,
    session-seconds, tokens, drafted and accepted tokens, acceptance rate and length, cost per
    1K session-seconds, per 1M output tokens, per 1M tokens, per GPU-hour, idle share."""
    from app.db import read_session
    from app.ledger.costs import unit_costs
    from app.settings import get_settings
    from app.storage.run_repository import month_currency

    dimensions = [d.strip() for d in by.split(",") if d.strip()]
    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        check_report_scope(session, month, team, store=settings.ledger_store)
        lines = unit_costs(
            session,
            month=month,
            by=dimensions,
            team=team,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
        currency = month_currency(session, month)
    records = [line.to_json(dimensions) for line in lines]
    if as_json:
        body = {"month": str(month), "by": dimensions, "currency": currency, "lines": records}
        typer.echo(json.dumps(body, indent=2))
        return
    header = [
        *dimensions,
        "requests",
        "effective_cost",
        "gpu_seconds",
        "session_seconds",
        "completion_tokens",
        "acceptance_rate",
        "cost_per_1k_session_seconds",
        "cost_per_1m_output_tokens",
    ]
    typer.echo("  ".join(f"{h:>16}" for h in header))
    for record in records:
        typer.echo("  ".join(f"{record[h]!s:>16}" for h in header))
    if currency is not None:
        typer.echo(f"Amounts in {currency}, the month's bill's currency.")


def check_report_scope(
    session: "Session", month: Month, team: str | None, *, store: str | None
) -> None:
    """A report of a month never allocated, or of a team nobody knows, is an error with the
    known names, not an empty table (teams are checked against the database's usage, so
    not when usage lives in a Parquet store)."""
    from app.auth.teams import check_team
    from app.ledger.service import check_allocated

    check_allocated(session, month)
    if team is not None and store is None:
        check_team(session, team)


def reconcile_cmd(
    month: Annotated[Month, typer.Option(help="The month, YYYY-MM.", parser=parse_month)],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Check that the month's bill = allocated + idle + unallocated, to the micro, per currency
    and deployment; list the unallocated rows. Exits 1 when it does not balance."""
    from app.db import read_session
    from app.ledger.reconcile import reconcile, reconciliation_text
    from app.settings import get_settings

    with open_engine(get_settings()) as engine, read_session(engine) as session:
        result = reconcile(session, month)
    typer.echo(json.dumps(result.to_json(), indent=2) if as_json else reconciliation_text(result))
    if not result.balanced:
        raise typer.Exit(1)


export_app = typer.Typer(help="Export chargeback data.", no_args_is_help=True)


@export_app.command("chargeback")
def export_chargeback(
    month: Annotated[Month, typer.Option(help="The month, YYYY-MM.", parser=parse_month)],
    out_path: Annotated[Path, typer.Option("--out", help="Output file.")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="csv, parquet or focus (a FOCUS 1.3 "
            "dataset, written as Parquet, or CSV when --out ends in "
            ".csv).",
        ),
    ] = "csv",
    team: Annotated[str | None, typer.Option(help="Only this team.")] = None,
    by_cost_center: Annotated[
        bool, typer.Option(help="Lines per cost center instead of team.")
    ] = False,
) -> None:
    """Write the month's chargeback: one line per team (or cost center) and deployment with
    its costs and unit costs, plus idle and unallocated lines, so the totals equal the
    reconciliation. --format focus writes every allocated share as a FOCUS 1.3 row."""
    from app.db import read_session
    from app.ledger.costs import unit_costs
    from app.ledger.export import chargeback_table, write_table
    from app.ledger.focus_export import write_focus_allocation
    from app.settings import get_settings
    from app.storage.run_repository import month_currency

    if fmt not in ("csv", "parquet", "focus"):
        raise typer.BadParameter("--format must be csv, parquet or focus")
    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        check_report_scope(session, month, team, store=settings.ledger_store)
        if fmt == "focus":
            file_format = "csv" if out_path.name.endswith(".csv") else "parquet"
            written = write_focus_allocation(
                session,
                month,
                out_path,
                file_format,
                team=team,
                s3_endpoint_url=settings.s3_endpoint_url,
            )
        else:
            by = [Dimension.cost_center if by_cost_center else Dimension.team, Dimension.deployment]
            lines = unit_costs(
                session, month=month, by=by, team=team, s3_endpoint_url=settings.s3_endpoint_url
            )
            table = chargeback_table(lines, by, month, month_currency(session, month))
            write_table(table, out_path, fmt)
            written = table.num_rows
    typer.echo(f"wrote {written} rows to {out_path}")


def register(app: typer.Typer) -> None:
    app.add_typer(deployments_app, name="deployments")
    app.add_typer(ledger_app, name="ledger")
    app.add_typer(export_app, name="export")
    app.command("allocate")(allocate)
    app.command("costs")(costs)
    app.command("reconcile")(reconcile_cmd)
