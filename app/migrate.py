"""Schema migrations (Alembic) as functions the CLI and tests call."""

from importlib import resources

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from app.domain.errors import Unavailable

SCRIPT_LOCATION = str(resources.files("migrations"))
"""The migrations folder, wherever the package is installed (editable or not)."""


class SchemaNotCurrent(Unavailable):
    """The database is not at the newest migration."""

    code = "schema_not_current"


def alembic_config(url: str) -> Config:
    """Alembic's configuration for ``url``, built in code: an installed package has no
    alembic.ini (that file is for developers running ``alembic revision``)."""
    config = Config()
    config.set_main_option("script_location", SCRIPT_LOCATION)
    config.attributes["sqlalchemy.url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def head_revision(url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def ensure_schema(engine: Engine, url: str, *, auto_migrate: bool) -> None:
    """Make sure the schema is current: migrate when allowed, else say what to run.

    Raises:
        SchemaNotCurrent: If the schema is behind and ``auto_migrate`` is False.
    """
    current, head = current_revision(engine), head_revision(url)
    if current == head:
        return
    if auto_migrate:
        upgrade(url)
        return
    raise SchemaNotCurrent(
        f"the database is at migration {current or '(empty)'}, the code needs {head}: "
        "run `specledger db upgrade` first"
    )
