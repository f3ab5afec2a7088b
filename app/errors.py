"""Errors that reach HTTP clients, and the handlers that render every error as JSON.

Every error body has the same shape, with a stable machine-readable ``code``::

    {"error": {"code": "month_closed", "message": "2026-10 is closed; ...",
               "fields": [{"field": "query.window", "message": "..."}]}}

``fields`` is present only for input errors. No handler ever returns a traceback.

Every error SpecLedger raises on purpose derives from ``app.domain.errors.SpecLedgerError``,
which carries its status and code; this module renders it, and the errors of FastAPI,
Starlette and SQLAlchemy, in that shape:

* SpecLedgerError [its status and code]; see app.domain.errors for the hierarchy
  - InvalidParameter [422 invalid_parameter]  a parameter that parsed but makes no sense
  - NotReady [503 not_ready]                  database unreachable or schema not current
* RequestValidationError [422 validation_error]   FastAPI's own input validation
* starlette HTTPException [its status: not_found, method_not_allowed, ...]
* sqlalchemy OperationalError [503 database_unavailable]   connection lost, database locked
* anything else [500 internal_error]        logged with its traceback, never sent
"""

import logging
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import OperationalError
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.domain.errors import Invalid, SpecLedgerError, Unauthorized, Unavailable

log = logging.getLogger("specledger.api")


class FieldError(BaseModel):
    field: str
    """Where the bad input is: ``query.window``, ``body.events.0.event_id``..."""
    message: str


class ErrorDetail(BaseModel):
    code: str
    """Stable identifier of the error, for programs."""
    message: str
    """What went wrong, for people."""
    fields: list[FieldError] | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail


class InvalidParameter(Invalid):
    """A request parameter that parsed but makes no sense."""

    code = "invalid_parameter"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", fields=[(field, message)])


class NotReady(Unavailable):
    """The database is unreachable or its schema is not current."""

    code = "not_ready"


_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    413: "payload_too_large",
    415: "unsupported_media_type",
    429: "too_many_requests",
}

RESPONSES_READ: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "No API key, or an unknown or revoked one."},
    403: {"model": ErrorBody, "description": "The key's scope does not allow this."},
    422: {"model": ErrorBody, "description": "Invalid parameters; `fields` names them."},
}
"""The error responses every authenticated endpoint can give (for the OpenAPI document)."""


def error_response(
    status_code: int,
    code: str,
    message: str,
    fields: Sequence[FieldError] = (),
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = ErrorBody(error=ErrorDetail(code=code, message=message, fields=list(fields) or None))
    return JSONResponse(
        body.model_dump(exclude_none=True), status_code=status_code, headers=headers
    )


def _location(loc: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in loc)


def validation_fields(errors: Sequence[Any]) -> list[FieldError]:
    """FastAPI's validation errors as field errors (input values are not echoed)."""
    return [
        FieldError(
            field=_location(error.get("loc", ())) or "request",
            message=str(error.get("msg", "invalid value")),
        )
        for error in errors
    ]


def install_error_handlers(app: FastAPI) -> None:
    """Render every error as an :class:`ErrorBody`."""

    @app.exception_handler(SpecLedgerError)
    async def _app_error(request: Request, exc: SpecLedgerError) -> JSONResponse:
        if exc.status >= 500:
            log.error("%s %s failed: %s", request.method, request.url.path, exc.message)
        fields = [FieldError(field=field, message=message) for field, message in exc.fields]
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, Unauthorized) else None
        return error_response(exc.status, exc.code, exc.message, fields, headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        fields = validation_fields(exc.errors())
        message = "; ".join(f"{f.field}: {f.message}" for f in fields) or "invalid request"
        return error_response(422, "validation_error", message, fields)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(
            exc.status_code, "internal_error" if exc.status_code >= 500 else "http_error"
        )
        message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, code, message, headers=headers)

    @app.exception_handler(OperationalError)
    async def _database(request: Request, exc: OperationalError) -> JSONResponse:
        log.error(
            "database unavailable in %s %s: %s",
            request.method,
            request.url.path,
            type(exc.orig).__name__,
        )
        return error_response(
            503,
            "database_unavailable",
            "the database is unavailable; retry shortly",
            headers={"Retry-After": "5"},
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in %s %s", request.method, request.url.path)
        return error_response(
            500, "internal_error", "internal error; the server log has the details"
        )
