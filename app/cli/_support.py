"""Shared pieces of the command line: consoles, clean errors, engines, progress bars.

Start-up stays fast: this module and the command modules import only typer, rich's console
and light domain modules at top level; SQLAlchemy, Alembic, pydantic, the stores and the
engines are imported inside the functions that use them (tests/test_cli_startup.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.markup import escape

from app.domain.errors import Invalid, SpecLedgerError
from app.domain.periods import InvalidMonth, Month

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from app.settings import Settings
    from app.storage.dataset_store import DatasetStore

err = Console(stderr=True)
out = Console()


class UserError(Invalid):
    """A problem with the command line the user can fix; printed without a traceback."""


@contextmanager
def user_errors() -> Iterator[None]:
    """The CLI's one error edge: every SpecLedgerError becomes its message on stderr and exit
    status 2, never a traceback."""
    try:
        yield
    except SpecLedgerError as exc:
        _print_error(exc.message)
        raise typer.Exit(2) from None
    except Exception as exc:
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        # a config file or options that make an invalid config
        _print_error(f"invalid configuration: {exc}")
        raise typer.Exit(2) from None


def _print_error(message: str) -> None:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def as_utc(value: datetime) -> datetime:
    """A datetime option in UTC; one without a zone is read as UTC (Typer parses none)."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_month(text: str) -> Month:
    """A ``YYYY-MM`` option or argument, parsed once where it comes in (``parser=``)."""
    try:
        return Month.parse(text)
    except InvalidMonth as exc:
        raise typer.BadParameter(str(exc)) from None


@contextmanager
def open_engine(settings: Settings) -> Iterator[Engine]:
    """An engine on a current schema, disposed afterwards. The embedded SQLite database is
    migrated on first use; PostgreSQL must be migrated explicitly (`specledger db upgrade`)."""
    from app import migrate
    from app.db import make_engine

    _say_if_new_database(settings.database_url)
    engine = make_engine(settings.database_url)
    try:
        migrate.ensure_schema(
            engine, settings.database_url, auto_migrate=engine.dialect.name == "sqlite"
        )
        yield engine
    finally:
        engine.dispose()


def _say_if_new_database(url: str) -> None:
    """A note on stderr when this command is about to create the embedded database, so a
    command run with another data folder does not silently answer from an empty one."""
    from pathlib import Path

    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return
    path = Path(parsed.database)
    if not path.exists():
        err.print(
            f"note: creating a new, empty database at {escape(str(path))} "
            "(SPECLEDGER_DATA_DIR or SPECLEDGER_DATABASE_URL choose another)",
            highlight=False,
            soft_wrap=True,
        )


ProgressHook = Callable[[str, int, int], None]
"""``hook(description, done, total)``, called as long work advances."""


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressHook | None]:
    """A progress bar on stderr when stdout is a terminal; otherwise silent."""
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

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


def open_store(settings: Settings, uri: str | None = None) -> DatasetStore | None:
    """The Parquet store an option or SPECLEDGER_LEDGER_STORE names, or None."""
    from app.storage.dataset_store import DatasetStore

    return DatasetStore.named(
        uri or settings.ledger_store, s3_endpoint_url=settings.s3_endpoint_url
    )


STORE_HELP = (
    "A folder or s3://bucket/prefix holding usage and ledger entries as hive-partitioned "
    "Parquet (default: SPECLEDGER_LEDGER_STORE; unset, the database)."
)
