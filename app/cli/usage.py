"""``specledger ingest usage``: load the proxy's JSONL usage logs (mounted with ``register``)."""

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
    store: Annotated[
        str | None,
        typer.Option(
            help="Write the usage records to this Parquet store (a folder or "
            "s3://bucket/prefix) instead of the database; default SPECLEDGER_LEDGER_STORE."
        ),
    ] = None,
    allow_unknown_deployments: Annotated[
        bool,
        typer.Option(
            help="Load records of deployments that are not registered; they stay unpriced "
            "(no billing row reaches them) and `specledger reconcile` lists them."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Load usage records idempotently: records whose event id is already stored are
    skipped, so loading a file twice changes nothing. A bad line, or a record of a
    deployment that is not registered, rejects the input, naming the file, line and field,
    and nothing is written."""
    from sqlalchemy import select

    from app.cli._support import open_engine, open_store, user_errors
    from app.models import Deployment
    from app.settings import get_settings
    from ingest.usage import load_usage

    settings = get_settings()
    with user_errors(), open_engine(settings) as engine, _progress_bar() as progress:
        registered = None
        if not allow_unknown_deployments:
            with engine.connect() as conn:
                registered = set(conn.scalars(select(Deployment.name)))
        report = load_usage(
            engine,
            paths,
            store=open_store(settings, store),
            progress=progress,
            deployments=registered,
        )
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        typer.echo(report.to_text())


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar of the bytes read, on stderr when it is a terminal (else None)."""
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

    console = Console(stderr=True)
    if not console.is_terminal:
        yield None
        return
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("reading usage", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def register(ingest_app: typer.Typer) -> None:
    """Add the ``usage`` command to the ``ingest`` command group."""
    ingest_app.command("usage")(ingest_usage)
