"""The HTTP application: ``create_app(settings)``; run it with ``specledger serve`` or
``uvicorn --factory app.main:create_app``. Nothing happens at import time."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TypedDict

from fastapi import APIRouter, Depends, FastAPI
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from app import __version__, migrate
from app.allocation.router import router as allocation_router
from app.anomalies.router import router as anomalies_router
from app.auth.deps import get_principal
from app.auth.router import router as auth_router
from app.breakeven.router import router as breakeven_router
from app.breakeven.router import tiers_router
from app.budgets.router import router as budgets_router
from app.db import make_engine
from app.deployments.router import router as deployments_router
from app.deps import session_makers
from app.errors import install_error_handlers
from app.ledger.prices import PriceBook
from app.ledger.router import router as ledger_router
from app.ops import MetricsMiddleware, RequestMetrics, redact_keys_in_access_log
from app.ops import router as ops_router
from app.settings import Settings, get_settings
from app.slurm.router import router as slurm_router
from app.speculation.router import router as speculation_router
from app.usage.router import router as usage_router
from app.waste.router import router as waste_router
from dashboards.router import router as dashboards_router
from ingest.router import router as billing_router

API_PREFIX = "/v1"

DESCRIPTION = """\
What speculative LLM serving costs, per session, team and deployment, reconciled to the cloud
bill; when speculation pays off; where money is wasted.

Every `/v1` endpoint needs an API key (`Authorization: Bearer slk_...` or `X-API-Key`), made
with `specledger keys create --team TEAM` or `--admin`. A team key reads only its own team's
rows; an admin key reads everything and may ingest, allocate and close months.

Money is a decimal string with six places. Times are UTC, windows half-open `[start, end)`.
Errors are `{"error": {"code": ..., "message": ...}}` with a stable `code`.
"""

V1_ROUTERS: tuple[APIRouter, ...] = (
    auth_router,
    allocation_router,
    ledger_router,
    usage_router,
    breakeven_router,
    tiers_router,
    waste_router,
    deployments_router,
    billing_router,
    budgets_router,
    anomalies_router,
    slurm_router,
    speculation_router,
)


class State(TypedDict):
    settings: Settings
    engine: Engine
    sessionmaker: sessionmaker[Session]
    read_sessionmaker: sessionmaker[Session]
    head_revision: str | None


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app; the engine is created when it starts and disposed when it stops."""
    settings = settings or get_settings()
    redact_keys_in_access_log()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[State]:
        engine = make_engine(settings.database_url, pool_pre_ping=True)
        makers = session_makers(engine)
        try:
            yield {
                "settings": settings,
                "engine": engine,
                "sessionmaker": makers["sessionmaker"],
                "read_sessionmaker": makers["read_sessionmaker"],
                "head_revision": migrate.head_revision(settings.database_url),
            }
        finally:
            engine.dispose()

    app = FastAPI(
        title="SpecLedger",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        debug=False,
    )
    install_error_handlers(app)
    app.state.request_metrics = RequestMetrics()
    app.state.price_book = PriceBook()
    app.add_middleware(
        MetricsMiddleware, metrics=app.state.request_metrics, routes=lambda: app.routes
    )
    app.include_router(ops_router)
    # Pages authenticate themselves (a key in a header, ?key= or a cookie), so they are not
    # behind the /v1 header-only dependency.
    app.include_router(dashboards_router)
    for router in V1_ROUTERS:
        # Every endpoint also names the principal it needs; this makes a forgotten one
        # impossible (the dependency runs once per request either way).
        app.include_router(router, prefix=API_PREFIX, dependencies=[Depends(get_principal)])
    return app
