"""The ``specledger`` command tree: one root that mounts every command group. Each
subcommand's --help explains it."""

import typer

from app.cli import (
    INGEST_HELP,
    ROOT_OPTIONS,
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
    probe,
    proxy,
    slurm,
    speculation,
    usage,
)

app = typer.Typer(**ROOT_OPTIONS)
ingest_app = typer.Typer(help=INGEST_HELP, no_args_is_help=True)
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
