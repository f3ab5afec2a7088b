"""``specledger db``: create and migrate the database schema."""

from typing import Annotated

import typer

from app.cli._support import out

db_app = typer.Typer(help="Create and migrate the database schema.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Migrate the database (SPECLEDGER_DATABASE_URL) up to REVISION (default: newest)."""
    from app import migrate
    from app.db import make_engine
    from app.settings import get_settings

    settings = get_settings()
    make_engine(settings.database_url).dispose()  # creates the SQLite folder if needed
    migrate.upgrade(settings.database_url, revision)
    out.print(
        f"database at {migrate.head_revision(settings.database_url) if revision == 'head' else revision}"
    )


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[
        str, typer.Argument(help="Target revision, or 'base' to drop every table.")
    ],
) -> None:
    """Migrate the database down to REVISION."""
    from app import migrate
    from app.settings import get_settings

    migrate.downgrade(get_settings().database_url, revision)
    out.print(f"database at {revision}")


@db_app.command("current")
def db_current() -> None:
    """Show the database's migration revision and the newest one."""
    from app import migrate
    from app.db import make_engine
    from app.settings import get_settings

    settings = get_settings()
    engine = make_engine(settings.database_url)
    current = migrate.current_revision(engine)
    engine.dispose()
    out.print(
        f"current: {current or '(empty)'}  head: {migrate.head_revision(settings.database_url)}"
    )


def register(app: typer.Typer) -> None:
    app.add_typer(db_app, name="db")
