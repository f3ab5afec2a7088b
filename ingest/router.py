"""Billing ingest from a path or S3 prefix the server can read, and the deliveries it made
(admin)."""

from typing import Annotated

from fastapi import APIRouter, Path, Query

from app.auth.deps import AdminDep
from app.deps import EngineDep, NowDep, SessionDep, SettingsDep
from app.domain.periods import InvalidMonth, Month
from app.errors import RESPONSES_READ, ErrorBody, InvalidParameter
from app.kit.schemas import BIGINT_MAX
from app.ledger.deliveries import get_delivery, list_deliveries, remove_delivery
from app.ledger.schemas import DeliveryRead, DeliveryRemove, DeliveryRemoved
from ingest.errors import IngestError
from ingest.normalize import NormaliseOptions
from ingest.schemas import BillingIngestCreate, BillingIngestRead
from ingest.service import IngestOptions, ingest_billing

router = APIRouter(prefix="/billing", tags=["billing"])


@router.post("/ingest", response_model=BillingIngestRead, responses=RESPONSES_READ)
def post_billing_ingest(
    body: BillingIngestCreate, engine: EngineDep, settings: SettingsDep, _admin: AdminDep
) -> BillingIngestRead:
    """Load FOCUS billing idempotently; bad input writes nothing and names file, row and
    column (admin)."""
    options = IngestOptions(
        normalise=NormaliseOptions(
            focus_version=body.focus_version,
            allow_missing_columns=body.allow_missing_columns,
            lenient=body.lenient,
        ),
        source=body.source,
        force=body.force,
        replace=body.replace,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    try:
        report = ingest_billing(engine, body.location, options)
    except IngestError as exc:  # the problems are in the file the body's location names
        exc.fields = tuple(("body.location", str(problem)) for problem in exc.problems[:50])
        raise
    return BillingIngestRead.model_validate(report.to_json())


DeliveryId = Annotated[int, Path(ge=1, le=BIGINT_MAX, description="The delivery's id.")]


@router.get("/deliveries", response_model=list[DeliveryRead], responses=RESPONSES_READ)
def get_deliveries(
    session: SessionDep,
    _admin: AdminDep,
    month: Annotated[
        str | None,
        Query(description="Only this billing period, YYYY-MM.", max_length=7, examples=["2026-11"]),
    ] = None,
    include_gone: Annotated[
        bool, Query(alias="all", description="Also the replaced and removed deliveries.")
    ] = False,
) -> list[DeliveryRead]:
    """Billing deliveries: source, billing period, files, accounts, rows and totals (admin)."""
    try:
        period = Month.parse(month) if month is not None else None
    except InvalidMonth as exc:
        raise InvalidParameter("query.month", str(exc)) from None
    return [
        DeliveryRead.of(d)
        for d in list_deliveries(session, month=period, include_gone=include_gone)
    ]


@router.get("/deliveries/{delivery_id}", response_model=DeliveryRead, responses=RESPONSES_READ)
def get_delivery_by_id(
    delivery_id: DeliveryId, session: SessionDep, _admin: AdminDep
) -> DeliveryRead:
    """One billing delivery, current, replaced or removed (admin)."""
    return DeliveryRead.of(get_delivery(session, delivery_id))


@router.post(
    "/deliveries/{delivery_id}/remove",
    response_model=DeliveryRemoved,
    responses={
        **RESPONSES_READ,
        409: {
            "model": ErrorBody,
            "description": "Already removed or replaced, or in a closed month without restate.",
        },
    },
)
def post_delivery_remove(
    delivery_id: DeliveryId,
    body: DeliveryRemove,
    session: SessionDep,
    now: NowDep,
    _admin: AdminDep,
) -> DeliveryRemoved:
    """Remove a delivery: its rows are deleted, the delivery stays, marked removed. A closed
    month's delivery only with ``restate`` (booked as adjustments in the first open month
    when it is allocated) (admin)."""
    removal = remove_delivery(session, delivery_id, restate=body.restate, now=now)
    return DeliveryRemoved(
        delivery=DeliveryRead.of(removal.delivery),
        restated=removal.restated,
        booked_in=str(removal.booked_in) if removal.booked_in else None,
    )
