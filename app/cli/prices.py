"""``specledger prices``: each deployment's cost per 1M input and output tokens and per
GPU-hour, the same as GET /v1/prices."""

import json
from typing import Annotated

import typer

from app.cli._support import open_engine, parse_month, user_errors
from app.domain.periods import Month


def prices(
    month: Annotated[
        Month | None,
        typer.Option(
            parser=parse_month,
            metavar="YYYY-MM",
            help="The month whose ledger prices come from (default: the newest allocated).",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the JSON of GET /v1/prices.")
    ] = False,
) -> None:
    """What each deployment's tokens and GPU-hours cost, from a month's ledger: everything
    booked to the deployment (its requests, shared rows and idle GPUs) over its requests'
    tokens and GPU time. Input and output prices split that cost by the streamed requests'
    prefill and decode GPU time (an estimate). A gateway in front of SpecLedger can price
    self-hosted models with them."""
    from app.db import read_session
    from app.ledger.prices import deployment_prices, price_month
    from app.settings import get_settings

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, read_session(engine) as session:
        chosen = price_month(session, month)
        found = (
            []
            if chosen is None
            else deployment_prices(session, chosen, s3_endpoint_url=settings.s3_endpoint_url)
        )
    rows = [price.to_json() for price in found]
    if as_json:
        typer.echo(json.dumps({"month": chosen and str(chosen), "items": rows}, indent=2))
        return
    if chosen is None:
        typer.echo("no month is allocated yet: run `specledger allocate --month YYYY-MM`")
        return
    _print_table(str(chosen), rows)


def _print_table(month: str, rows: list[dict[str, object]]) -> None:
    from rich.console import Console
    from rich.table import Table

    out = Console()
    if not rows:
        out.print(f"no requests in {month}: no prices", highlight=False)
        return
    currency = next((row["currency"] for row in rows if row["currency"]), None)
    title = f"Prices from {month}" + (f", in {currency}" if currency else "")
    table = Table(title=title, title_justify="left")
    columns = {
        "deployment": "deployment",
        "cost_per_1m_input_tokens": "per 1M input",
        "cost_per_1m_output_tokens": "per 1M output",
        "cost_per_1m_tokens": "per 1M tokens",
        "cost_per_gpu_hour": "per GPU-hour",
        "prefill_share": "prefill share",
    }
    for name, title in columns.items():
        table.add_column(title, justify="left" if name == "deployment" else "right")
    for row in rows:
        table.add_row(*("-" if row[name] is None else str(row[name]) for name in columns))
    out.print(table)


def register(app: typer.Typer) -> None:
    app.command("prices")(prices)
