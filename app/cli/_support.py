"""Shared pieces of the command line: consoles, clean errors, engines, progress bars."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy import Engine

from app import migrate
from app.db import make_engine
from app.settings import Settings
from ingest.errors import IngestError

err = Console(stderr=True)
out = Console()


class UserError(Exception):
    """A problem the user can fix; printed without a traceback."""


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn expected failures into a clear message and exit status 2."""
    try:
        yield
    except (IngestError, UserError, migrate.SchemaNotCurrent) as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False, markup=True, soft_wrap=True)
        raise typer.Exit(2) from None


@contextmanager
def open_engine(settings: Settings) -> Iterator[Engine]:
    """An engine on a current schema, disposed afterwards. The embedded SQLite database is
    migrated on first use; PostgreSQL must be migrated explicitly (`specledger db upgrade`)."""
    engine = make_engine(settings.database_url)
    try:
        migrate.ensure_schema(
            engine, settings.database_url, auto_migrate=engine.dialect.name == "sqlite"
        )
        yield engine
    finally:
        engine.dispose()


ProgressHook = Callable[[str, int, int], None]
"""``hook(description, done, total)``, called as long work advances."""


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressHook | None]:
    """A progress bar on stderr when stdout is a terminal; otherwise silent."""
    if not enabled:
        yield None
        return
    with Progress(
        TextColumn("{task.description:<32}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("starting", total=1)

        def hook(description: str, done: int, total: int) -> None:
            bar.update(task, description=description, completed=done, total=max(total, 1))

        yield hook
