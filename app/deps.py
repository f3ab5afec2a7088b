"""Request dependencies: settings, engine, one session per request, and the clock."""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app.db import for_reading
from app.settings import Settings


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.state.settings
    return settings


def get_engine(request: Request) -> Engine:
    """The app's engine, for services that run their own transaction (allocation, ingest)."""
    engine: Engine = request.state.engine
    return engine


_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def session_makers(engine: Engine) -> dict[str, sessionmaker[Session]]:
    """The lifespan state :func:`get_session` reads: sessions that may write, and sessions
    of GET requests, which only read (see :func:`app.db.for_reading`)."""
    return {
        "sessionmaker": sessionmaker(engine, expire_on_commit=False),
        "read_sessionmaker": sessionmaker(for_reading(engine), expire_on_commit=False),
    }


def read_sessionmaker(request: Request) -> sessionmaker[Session]:
    """Sessions that only read, on the app's database."""
    maker: sessionmaker[Session] = request.state.read_sessionmaker
    return maker


def get_session(request: Request) -> Iterator[Session]:
    """One session per request: commit if the endpoint returned, roll back if it raised.
    A GET only reads: on SQLite its transaction does not take the write lock."""
    makers = request.state
    maker = makers.read_sessionmaker if request.method in _READS else makers.sessionmaker
    with maker() as session:
        try:
            yield session
        except Exception:
            session.rollback()
            raise
        else:
            session.commit()


def get_now() -> datetime:
    """The current instant; overridden in tests that need a fixed clock."""
    return datetime.now(UTC)


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
EngineDep = Annotated[Engine, Depends(get_engine)]
# scope="function": commit before the response is sent, so a client that reads its own
# write right after the response sees it (FastAPI >= 0.121).
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
NowDep = Annotated[datetime, Depends(get_now)]
