"""Shared fixtures: every database test runs on SQLite and on PostgreSQL, through migrations."""

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from sqlalchemy import Engine, make_url, text
from sqlalchemy.orm import Session

from app import migrate
from app.db import Base, make_engine
from app.settings import Settings, get_settings
from tests.prereq import require

pytest_plugins = ["pytester", "tests.engine_pool", "tests.timing", "tests.xdist_groups"]

# The machines are shared and noisy: a property test must fail on a wrong answer, never on a
# slow example.
settings.register_profile("specledger", deadline=None)
settings.load_profile("specledger")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"

ENV_PREFIX = "SPECLEDGER_"
KEPT_ENV = frozenset({"SPECLEDGER_TEST_POSTGRES_URL"})
"""The only ``SPECLEDGER_*`` variable of the outer environment that tests may see."""


@pytest.fixture(scope="session", autouse=True)
def isolated_settings() -> Iterator[None]:
    """Tests never read the developer's configuration: every ``SPECLEDGER_*`` variable but
    the test database URL is removed (case-insensitively, as pydantic-settings matches them),
    and :class:`Settings` reads no ``.env`` file, wherever the current directory is. A test
    configures the code under test with ``monkeypatch.setenv`` or ``Settings(...)``.

    The ``.env`` file is switched off on the class rather than by moving the session into a
    temporary directory: tests and the code they run may rely on the current directory
    (``test_demo`` changes into the repository), and a ``.env`` there would still be read.
    Subprocesses that start a fresh interpreter do not see the patch; they do inherit the
    cleaned environment.
    """
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.upper().startswith(ENV_PREFIX) and name.upper() not in KEPT_ENV:
                patch.delenv(name)
        patch.setitem(Settings.model_config, "env_file", None)
        get_settings.cache_clear()
        yield
    get_settings.cache_clear()


def _postgres_url(worker: str) -> str:
    url = os.environ.get("SPECLEDGER_TEST_POSTGRES_URL")
    require(
        bool(url),
        "set SPECLEDGER_TEST_POSTGRES_URL to run the PostgreSQL half "
        "(make test does: scripts/ensure_postgres.sh)",
    )
    assert url is not None
    if worker == "master":
        return url
    # One database per xdist worker, created on demand.
    parsed = make_url(url)
    name = f"{parsed.database}_{worker}"
    admin = make_engine(
        parsed.set(database="postgres").render_as_string(hide_password=False),
        isolation_level="AUTOCOMMIT",
    )
    with admin.connect() as conn:
        if not conn.execute(
            text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name}
        ).first():
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return parsed.set(database=name).render_as_string(hide_password=False)


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "sqlite":
        return f"sqlite+pysqlite:///{tmp_path_factory.mktemp('db') / 'specledger.db'}"
    # Not the ``worker_id`` fixture: it is missing when xdist is disabled (``-p no:xdist``).
    return _postgres_url(os.environ.get("PYTEST_XDIST_WORKER", "master"))


@pytest.fixture(scope="session")
def migrated_engine(db_url: str) -> Iterator[Engine]:
    """A database migrated to head for the session, dropped to base at the end."""
    engine = make_engine(db_url)
    migrate.downgrade(db_url, "base")  # a previous run may have been interrupted
    migrate.upgrade(db_url)
    yield engine
    engine.dispose()
    migrate.downgrade(db_url, "base")


@pytest.fixture
def engine(migrated_engine: Engine, db_url: str) -> Iterator[Engine]:
    """The migrated database, emptied after each test (code under test commits for real)."""
    yield migrated_engine
    with migrated_engine.connect() as conn:
        closed = conn.execute(text("SELECT count(*) FROM ledger_closures")).scalar()
    if closed:
        # Closed months cannot be deleted (triggers refuse it): rebuild the schema instead.
        migrated_engine.dispose()
        migrate.downgrade(db_url, "base")
        migrate.upgrade(db_url)
        return
    with migrated_engine.begin() as conn:
        for table in reversed(Base.metadata.sorted_tables):
            conn.execute(table.delete())


@pytest.fixture
def session(migrated_engine: Engine) -> Iterator[Session]:
    """A session whose work is rolled back after the test, closed months included: the code
    under test takes it as its unit of work (and may commit: that ends a savepoint), so
    nothing reaches the database and no schema has to be rebuilt."""
    with migrated_engine.connect() as connection:
        outer = connection.begin()
        with Session(
            bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
        ) as session:
            yield session
        outer.rollback()


@pytest.fixture
def cli_env(
    engine: Engine, db_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[str]:
    """Point the CLI's settings at the test database."""
    monkeypatch.setenv("SPECLEDGER_DATABASE_URL", db_url)
    monkeypatch.setenv("SPECLEDGER_DATA_DIR", str(tmp_path / "data"))
    get_settings.cache_clear()
    yield db_url
    get_settings.cache_clear()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--readme-screenshot",
        metavar="PATH",
        default=None,
        help="Also write the admin's cost dashboard (SQLite) to PATH, as `make screenshot` "
        "does for docs/screenshot-cost.png; tests/dashboards/test_browser.py.",
    )


def pytest_configure(config: pytest.Config) -> None:
    # xdist registers this marker itself; without xdist (``-p no:xdist``) --strict-markers
    # would reject the tests that carry it.
    config.addinivalue_line("markers", "xdist_group(name): run in one xdist worker")


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server over HTTP on a free local port (boto3 and pyarrow are not patched)."""
    from moto.server import ThreadedMotoServer

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()
