"""Allocation queries (any window, aggregate and step) and allocation runs (admin)."""

from datetime import UTC
from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.allocation import service
from app.allocation.engine import PlanEngine
from app.allocation.query import AllocationQuery, CostMetric, IdlePolicy, query_allocation
from app.allocation.schemas import (
    AllocationItem,
    AllocationPage,
    AllocationRunCreate,
    AllocationRunRead,
)
from app.allocation.windowing import Window
from app.auth.deps import AdminDep, PrincipalDep, team_scope
from app.auth.team_query import TeamQuery
from app.deps import SessionDep, SettingsDep
from app.domain import measures
from app.domain.periods import Month
from app.domain.windows import Step
from app.errors import RESPONSES_READ, ErrorBody, InvalidParameter
from app.kit.http_params import PageDep, WindowDep, parse_dimensions
from app.kit.responses import Format, csv_download
from app.kit.schemas import WindowRead, money
from app.storage.dataset_store import DatasetStore

router = APIRouter(prefix="/allocation", tags=["allocation"])

AggregateQuery = Annotated[
    str,
    Query(
        description="Comma-separated dimensions: team, session, deployment, model, method, "
        "cost_center or tag:KEY.",
        examples=["team", "team,deployment", "tag:app"],
        max_length=400,
    ),
]


@router.get(
    "",
    response_model=AllocationPage,
    responses={**RESPONSES_READ, 200: {"content": {"text/csv": {}}}},
)
def get_allocation(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    window: WindowDep,
    page: PageDep,
    aggregate: AggregateQuery = "team",
    step: Annotated[
        Step | None,
        Query(description="Cut the window into hours, days or months; omit for one bucket."),
    ] = None,
    cost_metric: Annotated[
        CostMetric, Query(description="effective (amortised) or billed (cash).")
    ] = CostMetric.effective,
    idle: Annotated[
        IdlePolicy,
        Query(
            description="Keep idle GPU cost as its own line, or "
            "share it to requests by GPU-seconds."
        ),
    ] = IdlePolicy.separate,
    team: TeamQuery = None,
    format: Annotated[Format, Query(description="json or csv.")] = Format.json,
) -> Any:
    """Allocated cost per aggregate and step over a window, from the ledger."""
    dimensions = parse_dimensions(aggregate, "query.aggregate")
    query = AllocationQuery(
        window=window,
        aggregate=dimensions,
        step=step,
        cost_metric=cost_metric,
        idle=idle,
        team=team_scope(principal, team),
    )
    result = query_allocation(session, query, s3_endpoint_url=settings.s3_endpoint_url)
    items = page.slice(result.lines)
    if format is Format.csv:
        columns = ["start", "end", *dimensions, "currency", "cost", "idle_cost", "gpu_seconds"]
        rows = [
            {
                "start": line.start.isoformat(),
                "end": line.end.isoformat(),
                **line.properties,
                "currency": line.currency,
                "cost": money(line.cost_micros),
                "idle_cost": money(line.idle_micros),
                "gpu_seconds": measures.seconds(line.gpu_ns),
            }
            for line in items
        ]
        return csv_download(columns, rows, filename="allocation.csv")
    return AllocationPage(
        window=WindowRead.of(window),
        aggregate=list(dimensions),
        step=step,
        cost_metric=cost_metric,
        idle=idle,
        totals={currency: money(amount) for currency, amount in result.totals.items()},
        items=[AllocationItem.of(line) for line in items],
        total=len(result.lines),
        limit=page.limit,
        offset=page.offset,
        next_offset=page.next_offset(len(result.lines)),
    )


@router.post(
    "/runs",
    response_model=AllocationRunRead,
    status_code=201,
    responses={**RESPONSES_READ, 409: {"model": ErrorBody, "description": "The month is closed."}},
)
def create_run(
    body: AllocationRunCreate, session: SessionDep, settings: SettingsDep, _admin: AdminDep
) -> AllocationRunRead:
    """Allocate a month (or an ad-hoc window) and replace its previous run (admin)."""
    if body.month:
        window = Window.of_month(Month.parse(body.month))
    elif body.start is not None and body.end is not None:
        window = Window(body.start.astimezone(UTC), body.end.astimezone(UTC))
    else:  # the schema's validator already refuses this
        raise InvalidParameter("body", "give month, or start and end")
    summary = service.run_allocation(
        session,
        window,
        share_idle=body.share_idle,
        tag_key=settings.billing_tag_key,
        engine=PlanEngine.of(settings),
        store=DatasetStore.named(settings.ledger_store, s3_endpoint_url=settings.s3_endpoint_url),
    )
    return AllocationRunRead(
        run_id=summary.run_id,
        month=str(window.month) if window.month else None,
        window=WindowRead(start=window.start, end=window.end),
        share_idle=summary.share_idle,
        billing_rows=summary.rows,
        entries=summary.entries,
        replaced_run_id=summary.replaced_run_id,
        adjusted_months=[str(m) for m in summary.adjusted_months],
        effective_cost_by_kind={
            currency: {kind: money(v) for kind, v in kinds.items()}
            for currency, kinds in summary.totals.items()
        },
    )
