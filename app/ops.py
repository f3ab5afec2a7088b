"""Operations endpoints (no key needed): liveness, readiness, Prometheus metrics; and the
request metrics middleware that feeds them."""

import logging
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import iter_route_contexts
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from sqlalchemy import text
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import __version__, migrate
from app.errors import ErrorBody, NotReady
from app.kit.schemas import Schema

router = APIRouter(tags=["operations"])


class Health(Schema):
    status: str
    version: str


class Readiness(Schema):
    status: str
    database: str
    migration: str | None
    expected_migration: str | None


class RequestMetrics:
    """Per-app Prometheus collectors (a registry per app, so several apps can coexist)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "specledger_http_requests",
            "HTTP requests served.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "specledger_http_request_duration_seconds",
            "Time to serve an HTTP request.",
            ["method", "route"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )


def route_templates(routes: Sequence[BaseRoute]) -> dict[int, str]:
    """Full path template (prefixes included) of every route object, by its id."""
    return {
        id(context.original_route): str(context.path_format)
        for context in iter_route_contexts(routes)
        if context.path_format
    }


class MetricsMiddleware:
    """Counts requests and times them by route template (never by raw path, which would
    put session ids in label values)."""

    def __init__(
        self, app: ASGIApp, metrics: RequestMetrics, routes: Callable[[], Sequence[BaseRoute]]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes
        self.templates: dict[int, str] = {}

    def _template(self, route: Any) -> str:
        if route is None:
            return "(unmatched)"
        if id(route) not in self.templates:  # first request, or routes added since
            self.templates = route_templates(self.routes())
        return self.templates.get(id(route)) or str(getattr(route, "path_format", "(unmatched)"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, record_status)
        finally:
            label = self._template(scope.get("route"))
            self.metrics.requests.labels(scope["method"], label, str(status)).inc()
            self.metrics.latency.labels(scope["method"], label).observe(
                time.perf_counter() - started
            )


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    """The process is up."""
    return Health(status="ok", version=__version__)


@router.get("/readyz", response_model=Readiness, responses={503: {"model": ErrorBody}})
def readyz(request: Request) -> Readiness:
    """The database answers and its schema is at the newest migration."""
    engine = request.state.engine
    expected: str | None = request.state.head_revision
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
        current = migrate.current_revision(engine)
    except Exception as exc:
        raise NotReady(f"database unreachable ({type(exc).__name__})") from None
    if current != expected:
        raise NotReady(
            f"database schema at migration {current or '(empty)'}, the code needs "
            f"{expected}: run `specledger db upgrade`"
        )
    return Readiness(
        status="ready", database=engine.dialect.name, migration=current, expected_migration=expected
    )


@router.get(
    "/metrics", response_class=Response, responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}}
)
def metrics(request: Request) -> Response:
    """Prometheus metrics of this process."""
    collectors: RequestMetrics = request.app.state.request_metrics
    return Response(generate_latest(collectors.registry), media_type=CONTENT_TYPE_LATEST)


_KEY_IN_QUERY = re.compile(r"((?:^|[?&])key=)[^&\s]*")


class RedactKeysInAccessLog(logging.Filter):
    """Keeps API keys out of the access log: a dashboard opened with ``?key=slk_...`` is
    logged as ``?key=REDACTED`` (uvicorn logs the whole request line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(
                _KEY_IN_QUERY.sub(r"\1REDACTED", arg) if isinstance(arg, str) else arg
                for arg in record.args
            )
        return True


def redact_keys_in_access_log() -> None:
    """Install :class:`RedactKeysInAccessLog` on uvicorn's access logger (once)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactKeysInAccessLog) for f in access.filters):
        access.addFilter(RedactKeysInAccessLog())
