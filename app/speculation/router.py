"""Speculation health over HTTP: acceptance per draft position per deployment."""

from typing import Annotated

from fastapi import APIRouter

from app.auth.deps import PrincipalDep, team_scope
from app.auth.team_query import TeamQuery
from app.deps import SessionDep, SettingsDep
from app.errors import RESPONSES_READ
from app.kit.http_params import WindowDep, name_query
from app.speculation.positions import positions_report
from app.speculation.schemas import PositionsRead, positions_read

router = APIRouter(prefix="/speculation", tags=["speculation"])


@router.get("/positions", response_model=PositionsRead, responses=RESPONSES_READ)
def get_positions(
    session: SessionDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    window: WindowDep,
    team: TeamQuery = None,
    deployment: Annotated[str | None, name_query("Only this deployment.")] = None,
) -> PositionsRead:
    """Acceptance of each draft position per deployment (from vLLM's per-request
    acceptance histograms), the positions that pay and the num_speculative_tokens to set;
    a team key sees its own team's requests only."""
    report = positions_report(
        session,
        window=window,
        team=team_scope(principal, team),
        deployment=deployment,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    return positions_read(report)
