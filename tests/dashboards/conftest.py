"""Fixtures for the dashboard tests: a seeded month on the test database."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.auth.service import create_key
from app.deps import session_makers
from app.errors import install_error_handlers
from dashboards.router import router
from tests.dashboards.seed import Seeded, seed_month


@pytest.fixture
def seeded(engine: Engine, tmp_path: Path) -> Seeded:
    """October 2026 billed, metered and allocated for three teams, and one sweep."""
    return seed_month(engine, tmp_path)


def dashboards_app(engine: Engine) -> FastAPI:
    """A small app with only the dashboards router, on the test database (as ``create_app``
    would mount it: the engine and a sessionmaker in the lifespan state)."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[dict[str, Any]]:
        yield {"engine": engine, **session_makers(engine)}

    app = FastAPI(lifespan=lifespan)
    install_error_handlers(app)
    app.include_router(router)
    return app


@dataclass(frozen=True)
class Keys:
    admin: str
    search: str
    ads: str


@pytest.fixture
def keys(engine: Engine) -> Keys:
    """An admin key and keys for the teams ``search`` and ``ads-platform``."""
    with Session(engine) as session, session.begin():
        return Keys(
            admin=create_key(session, team=None, admin=True).secret,
            search=create_key(session, team="search", admin=False).secret,
            ads=create_key(session, team="ads-platform", admin=False).secret,
        )
