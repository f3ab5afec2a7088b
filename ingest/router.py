"""Billing ingest from a path or S3 prefix the server can read (admin)."""

from fastapi import APIRouter

from app.auth.deps import AdminDep
from app.deps import EngineDep, SettingsDep
from app.errors import RESPONSES_READ
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
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    try:
        report = ingest_billing(engine, body.location, options)
    except IngestError as exc:  # the problems are in the file the body's location names
        exc.fields = tuple(("body.location", str(problem)) for problem in exc.problems[:50])
        raise
    return BillingIngestRead.model_validate(report.to_json())
