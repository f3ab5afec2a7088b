"""``specledger budgets``: create, list, show and archive budgets; check them for alerts."""

import json
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

import typer

from app.budgets.rules.budget import BudgetScope, PeriodKind
from app.budgets.rules.steps import BudgetStep
from app.cli._support import as_utc, open_engine, user_errors
from app.domain.money import decimal_to_micros

budgets_app = typer.Typer(
    help="Budgets per team, cost center, deployment or tag: thresholds that alert, an optional "
    "hard limit the metering proxy enforces (429) with brownout steps before it (warn, route "
    "to a cheaper deployment), and a month-end forecast.",
    no_args_is_help=True,
)


def _micros(option: str, text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return decimal_to_micros(Decimal(text))
    except (InvalidOperation, ValueError):
        raise typer.BadParameter(f"{option}: {text!r} is not an amount") from None


@budgets_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="A unique name.")],
    scope: Annotated[
        str,
        typer.Option(
            help="Whose spend: team=NAME, cost_center=NAME, deployment=NAME or tag:KEY=VALUE."
        ),
    ],
    amount: Annotated[str, typer.Option(help="The budget, in the ledger's currency.")],
    currency: Annotated[
        str | None, typer.Option(help="Default: SPECLEDGER_DEFAULT_CURRENCY.")
    ] = None,
    period: Annotated[
        PeriodKind, typer.Option(help="month: every calendar month (UTC); custom: --start/--end.")
    ] = PeriodKind.month,
    start: Annotated[datetime | None, typer.Option(help="Custom period start (a UTC day).")] = None,
    end: Annotated[datetime | None, typer.Option(help="Custom period end, exclusive.")] = None,
    thresholds: Annotated[
        str, typer.Option(help="Percentages of the amount that alert, comma-separated.")
    ] = "50,80,100",
    hard_limit: Annotated[
        str | None,
        typer.Option(help="Spend at which the proxy answers 429 to the scope's new requests."),
    ] = None,
    step: Annotated[
        list[str] | None,
        typer.Option(
            help="A brownout step before the hard limit, repeatable: PERCENT:warn marks the "
            "scope's responses from PERCENT of the hard limit on; PERCENT:route=DEPLOYMENT "
            "sends its requests to that (cheaper) deployment. E.g. --step 75:warn --step "
            "90:route=smol-plain.",
        ),
    ] = None,
) -> None:
    """Create a budget.

    With --hard-limit, the metering proxy refuses the scope's new requests (429) once spend
    reaches it; --step makes it act before that: warn, then route to a cheaper deployment.
    """
    from sqlalchemy.orm import Session

    from app.budgets import service
    from app.settings import get_settings

    try:
        parsed_scope = BudgetScope.parse(scope)
        percents = [int(t) for t in thresholds.split(",") if t.strip()]
        steps = [BudgetStep.parse(text) for text in step or []]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    settings = get_settings()
    new = service.NewBudget(
        name=name,
        scope=parsed_scope,
        amount_micros=_micros("--amount", amount) or 0,
        currency=currency or settings.default_currency,
        period=period,
        start=as_utc(start) if start else None,
        end=as_utc(end) if end else None,
        thresholds=percents,
        hard_limit_micros=_micros("--hard-limit", hard_limit),
        steps=steps,
    )
    with (
        user_errors(),
        open_engine(settings) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        budget = service.create_budget(session, new)
        ident = f"{budget.id} ({budget.name}, {parsed_scope})"
    typer.echo(f"created budget {ident}")


def _reports(ident: str | None) -> list[dict[str, Any]]:
    from app.budgets import service
    from app.budgets.router import read
    from app.db import read_session
    from app.settings import get_settings

    now = datetime.now(UTC)
    with user_errors(), open_engine(get_settings()) as engine, read_session(engine) as session:
        budgets = [service.get_budget(session, ident)] if ident else service.list_budgets(session)
        return [read(service.report(session, b, now=now)).model_dump(mode="json") for b in budgets]


@budgets_app.command("list")
def list_(as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False) -> None:
    """Live budgets with their spend this period and the forecast period total."""
    rows = _reports(None)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for row in rows:
        forecast = row["forecast"]
        ahead = f"  forecast {forecast['expected_total']}" if forecast else ""
        limit = f"  hard limit {row['hard_limit']}" if row["hard_limit"] else ""
        flag = "  OVER HARD LIMIT" if row["over_hard_limit"] else ""
        typer.echo(
            f"{row['id']:>4}  {row['name']:<24} {row['scope']:<24} spent {row['spent']} of "
            f"{row['amount']} {row['currency']} ({row['percent']:.1f}%){ahead}{limit}{flag}"
        )


@budgets_app.command("show")
def show(
    budget: Annotated[str, typer.Argument(help="Budget id or name.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """One budget: spend (ledger and metered estimate), thresholds, forecast, daily burn."""
    (row,) = _reports(budget)
    if as_json:
        typer.echo(json.dumps(row, indent=2))
        return
    typer.echo(
        f"{row['name']} ({row['scope']}), {row['period_start'][:10]} to {row['period_end'][:10]}"
    )
    typer.echo(
        f"  spent {row['spent']} of {row['amount']} {row['currency']} ({row['percent']:.1f}%): "
        f"ledger {row['ledger']} + metered estimate {row['metered']}"
    )
    typer.echo(f"  thresholds {row['thresholds']}, reached {row['reached']}")
    if row["hard_limit"]:
        state = (
            "over it: the proxy refuses new requests" if row["over_hard_limit"] else "not reached"
        )
        typer.echo(f"  hard limit {row['hard_limit']}: {state}")
    for taken in row["steps"]:
        target = f" to {taken['route_to']}" if taken["route_to"] else ""
        since = taken["taken_since"]
        when = f"taken since {since[:16].replace('T', ' ')} UTC" if since else "not reached"
        typer.echo(f"  step at {taken['at_percent']}%: {taken['action']}{target}: {when}")
    if row["unpriced_deployments"]:
        typer.echo(f"  not priced yet (no allocation): {', '.join(row['unpriced_deployments'])}")
    forecast = row["forecast"]
    if forecast:
        typer.echo(
            f"  forecast ({forecast['model']}, {forecast['level']:.0%}): {forecast['expected_total']} "
            f"[{forecast['lower_total']}, {forecast['upper_total']}]"
            + (
                f"; reaches the budget on {forecast['crossing_day']}"
                if forecast["crossing_day"]
                else ""
            )
        )


@budgets_app.command("archive")
def archive(budget: Annotated[str, typer.Argument(help="Budget id or name.")]) -> None:
    """Archive a budget: it stops alerting and limiting."""
    from sqlalchemy.orm import Session

    from app.budgets import service
    from app.settings import get_settings

    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        archived = service.archive_budget(session, budget)
        name = archived.name
    typer.echo(f"archived budget {name}")


@budgets_app.command("check")
def check() -> None:
    """Raise alerts for thresholds reached and forecasts over budget (one per event; run it
    from cron, then `specledger alerts deliver`)."""
    from sqlalchemy.orm import Session

    from app.budgets import service
    from app.settings import get_settings

    now = datetime.now(UTC)
    with (
        user_errors(),
        open_engine(get_settings()) as engine,
        Session(engine) as session,
        session.begin(),
    ):
        created = service.raise_alerts(session, now=now)
    typer.echo(f"{created} new alert deliveries queued")


def register(app: typer.Typer) -> None:
    app.add_typer(budgets_app, name="budgets")
