"""Unit costs, reconciliation, chargeback downloads and month closing."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from app.auth.deps import AdminDep, PrincipalDep, team_scope
from app.auth.team_query import TeamQuery
from app.deps import SessionDep, SettingsDep
from app.domain.periods import Month
from app.errors import RESPONSES_READ, ErrorBody
from app.kit.http_params import MonthDep, OptionalMonthDep, PageDep, parse_dimensions
from app.kit.responses import Format, csv_download, download
from app.ledger import downloads
from app.ledger.costs import unit_costs
from app.ledger.prices import PriceBook, price_month
from app.ledger.reconcile import reconcile
from app.ledger.schemas import (
    ClosureCreate,
    ClosureRead,
    CostLineRead,
    CostPage,
    PriceRead,
    PricesRead,
    ReconciliationRead,
)
from app.ledger.service import close_month, closed_months
from app.storage.run_repository import month_currency

router = APIRouter(tags=["ledger"])


@router.get(
    "/costs",
    response_model=CostPage,
    responses={**RESPONSES_READ, 200: {"content": {"text/csv": {}}}},
)
def get_costs(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    month: MonthDep,
    page: PageDep,
    by: Annotated[
        str,
        Query(
            description="Comma-separated: team, session, deployment, model, "
            "method, cost_center or tag:KEY.",
            max_length=400,
        ),
    ] = "team",
    team: TeamQuery = None,
    format: Annotated[Format, Query(description="json or csv.")] = Format.json,
) -> Any:
    """Unit costs for a month: cost, GPU-seconds, session-seconds, tokens, acceptance, and
    cost per 1K session-seconds, per 1M tokens and per GPU-hour."""
    dimensions = parse_dimensions(by, "query.by")
    lines = unit_costs(
        session,
        month=month,
        by=list(dimensions),
        team=team_scope(principal, team),
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    records = [line.to_json(dimensions) for line in page.slice(lines)]
    if format is Format.csv:
        columns = list(records[0]) if records else [*dimensions, "effective_cost"]
        return csv_download(columns, records, filename=f"costs-{month}.csv")
    return CostPage(
        month=str(month),
        by=list(dimensions),
        currency=month_currency(session, month),
        items=[CostLineRead.of(record, dimensions) for record in records],
        total=len(lines),
        limit=page.limit,
        offset=page.offset,
        next_offset=page.next_offset(len(lines)),
    )


@router.get("/prices", response_model=PricesRead, responses=RESPONSES_READ)
def get_prices(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    _principal: PrincipalDep,
    month: OptionalMonthDep,
) -> PricesRead:
    """Each deployment's cost per 1M input and output tokens, per 1M tokens and per GPU-hour,
    from a month's ledger (default: the newest allocated month): everything the ledger books
    to the deployment (requests, shared rows, idle GPUs) over its requests' tokens and GPU
    time; input and output split by the streamed requests' prefill and decode GPU time (an
    estimate). Any key: prices, no volumes. Computed once per allocation run of the month."""
    chosen = price_month(session, month)
    if chosen is None:
        return PricesRead(month=None, items=[])
    book: PriceBook = request.app.state.price_book
    prices = book.prices(session, chosen, s3_endpoint_url=settings.s3_endpoint_url)
    return PricesRead(
        month=str(chosen), items=[PriceRead.model_validate(p.to_json()) for p in prices]
    )


@router.get("/reconciliation", response_model=ReconciliationRead, responses=RESPONSES_READ)
def get_reconciliation(
    session: SessionDep, month: MonthDep, _admin: AdminDep
) -> ReconciliationRead:
    """Check that the month's bill equals allocated + idle + unallocated, to the micro
    (admin: it covers the whole bill)."""
    return ReconciliationRead.model_validate(reconcile(session, month).to_json())


@router.get(
    "/chargeback",
    response_class=Response,
    responses={
        **RESPONSES_READ,
        200: {
            "content": {"text/csv": {}, "application/vnd.apache.parquet": {}},
            "description": "The chargeback file.",
        },
    },
)
def get_chargeback(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    month: MonthDep,
    format: Annotated[
        downloads.ChargebackFormat,
        Query(
            description="csv or parquet (lines per team and deployment), or focus-csv / "
            "focus-parquet (a FOCUS 1.3 row per allocated share)."
        ),
    ] = downloads.ChargebackFormat.csv,
    by_cost_center: Annotated[
        bool, Query(description="Lines per cost center instead of team.")
    ] = False,
    team: TeamQuery = None,
) -> Response:
    """Download the month's chargeback; totals equal the reconciliation."""
    file = downloads.chargeback_file(
        session,
        month=month,
        fmt=format,
        team=team_scope(principal, team),
        by_cost_center=by_cost_center,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    return download(file.content, filename=file.filename, media_type=file.media_type)


@router.get("/ledger/closures", response_model=list[ClosureRead], responses=RESPONSES_READ)
def get_closures(session: SessionDep, _principal: PrincipalDep) -> list[ClosureRead]:
    """The closed months."""
    return [ClosureRead.model_validate(closure) for closure in closed_months(session)]


@router.post(
    "/ledger/closures",
    response_model=ClosureRead,
    status_code=201,
    responses={
        **RESPONSES_READ,
        409: {"model": ErrorBody, "description": "Already closed, or never allocated."},
    },
)
def create_closure(body: ClosureCreate, session: SessionDep, _admin: AdminDep) -> ClosureRead:
    """Close a month: its ledger can never change again (admin)."""
    closure = close_month(session, Month.parse(body.month))
    return ClosureRead.model_validate(closure)
