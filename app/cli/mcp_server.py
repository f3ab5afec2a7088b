"""``specledger mcp``: the ledger as an MCP server (stdio, or streamable HTTP with --http)."""

from pathlib import Path
from typing import Annotated

import typer

from app.cli._support import err, open_engine, user_errors


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise typer.BadParameter("give HOST:PORT, e.g. 127.0.0.1:8765", param_hint="--http")
    return host.strip("[]"), int(port)


def mcp(
    http: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; each request "
            "presents its API key in `Authorization: Bearer <key>`.",
        ),
    ] = None,
    key_file: Annotated[
        Path | None,
        typer.Option(
            help="stdio: a file whose first line is the API key to present (default: the "
            "SPECLEDGER_MCP_KEY environment variable).",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Serve the ledger to AI agents over the Model Context Protocol, read-only.

    Nine tools, each the JSON body of a REST route for the same query: whoami, unit_costs
    (GET /v1/costs), sessions, allocation, reconciliation (admin keys), budgets (with their
    forecasts), anomalies (with their drivers), waste and breakeven (a deployment's fitted
    breakeven). They are scoped by an API key as the REST API is: a team key sees its own
    team only.

    Over stdio (the default, for a desktop host that starts the command) the key comes from
    SPECLEDGER_MCP_KEY or --key-file, never from the command line. With --http the key comes
    with each request; a request without a live key is answered 401. Exit status 2 when no
    usable key is given (stdio) or the database cannot be opened."""
    address = _address(http) if http is not None else None
    if address is not None and key_file is not None:
        raise typer.BadParameter("--key-file is for stdio; over HTTP each request sends its key")
    from app.mcp import access
    from app.settings import get_settings

    settings = get_settings()
    with user_errors():
        secret = access.stdio_key(key_file) if address is None else None
        with open_engine(settings) as engine:
            from app.mcp import run

            if secret is not None:
                run.check_key(engine, secret)
                run.serve_stdio(engine, settings, secret)
            else:
                assert address is not None
                host, port = address
                err.print(f"SpecLedger MCP server on http://{host}:{port}{run.MCP_PATH}")
                run.serve_http(engine, settings, host, port)


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
