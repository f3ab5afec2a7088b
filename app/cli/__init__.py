"""The ``specledger`` command line (:mod:`app.cli.root` mounts every command group).

The whole tree imports every group's libraries (SciPy, Ibis, ...: seconds of CPU), so
``specledger ingest usage``, which a cron job or the proxy's spill runs once per log file,
starts on a tree of that one command instead: same names, options and help.
"""

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import typer

    app: typer.Typer

ROOT_OPTIONS: dict[str, Any] = {
    "help": "SpecLedger: what speculative LLM serving costs, per session and team, reconciled "
    "to the cloud bill; when speculation pays off; where money is wasted.",
    "no_args_is_help": True,
    "add_completion": False,
    "pretty_exceptions_enable": False,
}
INGEST_HELP = "Load billing (FOCUS) and usage data."


def __getattr__(name: str) -> Any:
    if name == "app":
        from app.cli.root import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    if sys.argv[1:3] == ["ingest", "usage"]:
        _ingest_usage_only()()
    else:
        from app.cli.root import app

        app()


def _ingest_usage_only() -> "typer.Typer":
    import typer

    from app.cli import usage

    root = typer.Typer(**ROOT_OPTIONS)
    ingest_app = typer.Typer(help=INGEST_HELP, no_args_is_help=True)
    root.add_typer(ingest_app, name="ingest")
    usage.register(ingest_app)
    return root
