"""The ``specledger`` command line: one root that mounts every command group. Each
subcommand's --help explains it.

Importing it is cheap (tests/test_cli_startup.py): the command modules import their heavy
libraries inside the commands. Help text is reflowed to the terminal's width (app.cli._help).
"""

import typer

from app.cli import (
    advise,
    alerts,
    anomalies,
    api,
    billing,
    breakeven,
    budgets,
    collect,
    dashboards,
    db,
    demo,
    engine,
    health,
    ledger,
    mcp_server,
    prices,
    probe,
    proxy,
    slurm,
    speculation,
    usage,
    waste,
)
from app.cli._help import ReflowingGroup

app = typer.Typer(
    help="SpecLedger: what speculative LLM serving costs, per session and team, reconciled to "
    "the cloud bill; when speculation pays off; where money is wasted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=ReflowingGroup,
)
ingest_app = typer.Typer(help="Load billing (FOCUS) and usage data.", no_args_is_help=True)
app.add_typer(ingest_app, name="ingest")

db.register(app)
billing.register(app, ingest_app=ingest_app)
usage.register(ingest_app)
engine.register(app)
demo.register(app)
ledger.register(app)
api.register(app)
breakeven.register(app)
dashboards.register(app)
proxy.register(app)
collect.register(app)
alerts.register(app)
budgets.register(app)
anomalies.register(app)
slurm.register(app, ingest_app=ingest_app)
probe.register(app)
health.register(app)
speculation.register(app)
advise.register(app)
waste.register(app)
prices.register(app)
mcp_server.register(app)


def main() -> None:
    app()
