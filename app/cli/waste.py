"""``specledger waste``: where money is wasted, the same report as GET /v1/waste."""

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated

import typer

from app.cli._support import open_engine, user_errors

if TYPE_CHECKING:
    from app.waste.schemas import WasteRead


def waste(
    window: Annotated[
        str,
        typer.Option(
            help="The time window: YYYY-MM, month, lastmonth, 7d, START,END ... "
            "(the API's window grammar)."
        ),
    ] = "month",
    team: Annotated[
        str | None, typer.Option(help="Only findings from this team's traffic.")
    ] = None,
    acceptance_threshold: Annotated[
        float,
        typer.Option(
            min=0, max=1, help="Flag acceptance rates confidently below this (0-1, exclusive)."
        ),
    ] = 0.5,
    confidence: Annotated[
        float,
        typer.Option(min=0.5, max=0.999, help="Coverage of the acceptance rate's interval."),
    ] = 0.95,
    min_requests: Annotated[
        int, typer.Option(min=1, help="Groups with fewer speculative requests are not judged.")
    ] = 5,
    idle_threshold: Annotated[
        float,
        typer.Option(
            min=0, max=1, help="Flag deployments whose idle share of GPU cost exceeds this."
        ),
    ] = 0.3,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the JSON of GET /v1/waste.")
    ] = False,
) -> None:
    """Where money is wasted: idle GPUs, low acceptance, speculation above the breakeven,
    unpaid draft positions, draft memory. Each finding comes with its cost in the window,
    the estimated cost over a month and the action to take. Exit status 0 with or without
    findings."""
    from app.auth.teams import check_team
    from app.db import read_session
    from app.domain.findings import Thresholds
    from app.domain.windows import InvalidWindow, parse_window
    from app.settings import get_settings
    from app.waste.schemas import waste_read
    from app.waste.service import find_waste

    now = datetime.now(UTC)
    try:
        span = parse_window(window, now=now)
    except InvalidWindow as exc:
        raise typer.BadParameter(str(exc), param_hint="--window") from None
    for name, value in (
        ("--acceptance-threshold", acceptance_threshold),
        ("--idle-threshold", idle_threshold),
    ):
        if not 0 < value < 1:
            raise typer.BadParameter("must be between 0 and 1, exclusive", param_hint=name)
    thresholds = Thresholds(
        acceptance=acceptance_threshold,
        confidence=confidence,
        min_requests=min_requests,
        idle_share=idle_threshold,
    )
    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        if team is not None and settings.ledger_store is None:
            check_team(session, team)
        report = find_waste(
            session,
            window=span,
            team=team,
            thresholds=thresholds,
            now=now,
            default_currency=settings.default_currency,
            s3_endpoint_url=settings.s3_endpoint_url,
        )
        body = waste_read(report, span, thresholds)
    if as_json:
        typer.echo(json.dumps(body.model_dump(mode="json"), indent=2))
        return
    _print_table(body)


def _print_table(body: "WasteRead") -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()  # sized by the terminal (or COLUMNS) now, not when imported

    span = f"{body.window.start:%Y-%m-%d %H:%M}Z..{body.window.end:%Y-%m-%d %H:%M}Z"
    if not body.findings:
        out.print(f"no waste found in {span}", highlight=False)
        return
    table = Table(title=f"Waste in {span} ({body.currency})", title_justify="left")
    for column in ("kind", "scope", "key", "in window", "per month", "action"):
        table.add_column(column, justify="right" if column.startswith(("in", "per")) else "left")
    for f in body.findings:
        table.add_row(
            f.kind,
            f.scope,
            f.key,
            f"{f.window_cost:,.2f}",
            f"{f.estimated_monthly_cost:,.2f}",
            f.action,
        )
    out.print(table)
    out.print(
        f"estimated monthly total: {body.estimated_monthly_total:,.2f} {body.currency} "
        "(deployment findings; team and session findings break the same waste down)",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("waste")(waste)
