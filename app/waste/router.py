"""Waste findings: low acceptance, speculation above breakeven, idle GPUs."""

from typing import Annotated

from fastapi import APIRouter, Query

from app.auth.deps import PrincipalDep, team_scope
from app.auth.team_query import TeamQuery
from app.deps import NowDep, SessionDep, SettingsDep
from app.domain.findings import Thresholds
from app.errors import RESPONSES_READ
from app.kit.http_params import WindowDep
from app.waste import service
from app.waste.schemas import WasteRead, waste_read

router = APIRouter(prefix="/waste", tags=["waste"])


@router.get("", response_model=WasteRead, responses=RESPONSES_READ)
def get_waste(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    window: WindowDep,
    now: NowDep,
    acceptance_threshold: Annotated[
        float, Query(gt=0, lt=1, description="Flag acceptance rates confidently below this.")
    ] = 0.5,
    confidence: Annotated[
        float,
        Query(
            ge=0.5,
            lt=1,
            description="Coverage of the acceptance rate's interval (requests as the sampled units).",
        ),
    ] = 0.95,
    min_requests: Annotated[
        int,
        Query(
            ge=1, le=100_000, description="Groups with fewer speculative requests are not judged."
        ),
    ] = 5,
    idle_threshold: Annotated[
        float,
        Query(
            gt=0, lt=1, description="Flag deployments whose idle share of GPU cost exceeds this."
        ),
    ] = 0.3,
    team: TeamQuery = None,
) -> WasteRead:
    """Where money is wasted, each finding with its estimated monthly cost and the action
    to take; a team key sees findings from its own traffic."""
    thresholds = Thresholds(
        acceptance=acceptance_threshold,
        confidence=confidence,
        min_requests=min_requests,
        idle_share=idle_threshold,
    )
    report = service.find_waste(
        session,
        window=window,
        team=team_scope(principal, team),
        thresholds=thresholds,
        now=now,
        default_currency=settings.default_currency,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    return waste_read(report, window, thresholds)
