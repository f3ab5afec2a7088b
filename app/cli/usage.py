"""``specledger ingest usage``: load the proxy's JSONL usage logs (mounted with ``register``)."""

import json
from pathlib import Path
from typing import Annotated

import typer


def ingest_usage(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="JSONL files written by `specledger proxy --jsonl` (or its spill files); "
            ".jsonl.gz works too.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Load usage records idempotently: records whose event id is already stored are
    skipped, so loading a file twice changes nothing. A bad line rejects the input, naming
    the file and line, and nothing is written."""
    from app.cli._support import open_engine, user_errors
    from app.settings import get_settings
    from ingest.usage import load_usage

    with user_errors(), open_engine(get_settings()) as engine:
        report = load_usage(engine, paths)
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(report.to_text())


def register(ingest_app: typer.Typer) -> None:
    """Add the ``usage`` command to the ``ingest`` command group."""
    ingest_app.command("usage")(ingest_usage)
