"""Load sweeps, breakeven fits and the maturity tiers: when speculation pays off, and which
tier fits a load."""

from typing import Annotated, Any

from fastapi import APIRouter, Query

from app.auth.deps import PrincipalDep
from app.breakeven import recommendation, service, tiers
from app.breakeven.schemas import (
    FitRead,
    SweepDetail,
    SweepPointRead,
    SweepRead,
    TierRecommendationRead,
    TiersRead,
)
from app.deps import SessionDep
from app.errors import RESPONSES_READ, ErrorBody
from app.kit.http_params import id_path, id_query, name_query
from app.kit.schemas import BIGINT_MAX

router = APIRouter(prefix="/breakeven", tags=["breakeven"])
tiers_router = APIRouter(prefix="/tiers", tags=["tiers"])

SweepQuery = Annotated[
    int | None,
    id_query(
        "Take acceptance and the TPOT tail from this fitted sweep (default: the catalog's "
        "assumptions)."
    ),
]
SweepId = Annotated[int, id_path("The sweep's id.")]


def _read(summary: service.SweepSummary) -> SweepRead:
    sweep = summary.sweep
    crossing = (sweep.fit or {}).get("breakeven_concurrency")
    return SweepRead(
        id=sweep.id,
        name=sweep.name,
        deployment=sweep.deployment,
        created_at=sweep.created_at,
        points=summary.points,
        fitted=bool(sweep.fit),
        breakeven_concurrency=crossing if isinstance(crossing, int | float) else None,
    )


@router.get("/sweeps", response_model=list[SweepRead], responses=RESPONSES_READ)
def list_sweeps(
    session: SessionDep,
    _principal: PrincipalDep,
    deployment: Annotated[str | None, name_query("Only this deployment's sweeps.")] = None,
) -> list[SweepRead]:
    """Load sweeps, newest first."""
    return [_read(s) for s in service.list_sweeps(session, deployment=deployment)]


@router.get(
    "/sweeps/{sweep_id}",
    response_model=SweepDetail,
    responses={**RESPONSES_READ, 404: {"model": ErrorBody}},
)
def get_sweep(sweep_id: SweepId, session: SessionDep, _principal: PrincipalDep) -> SweepDetail:
    """One sweep with its measured points."""
    sweep, points = service.get_sweep(session, sweep_id)
    return SweepDetail(
        **_read(service.SweepSummary(sweep, len(points))).model_dump(),
        settings=sweep.settings or {},
        point_list=[SweepPointRead.model_validate(p) for p in points],
    )


@router.get(
    "/sweeps/{sweep_id}/fit",
    response_model=FitRead,
    responses={**RESPONSES_READ, 404: {"model": ErrorBody}},
)
def get_fit(
    sweep_id: SweepId,
    session: SessionDep,
    _principal: PrincipalDep,
    refit: Annotated[
        bool, Query(description="Fit now even if a fit is stored (the result is not stored).")
    ] = False,
    bootstrap: Annotated[
        int, Query(ge=0, le=2000, description="Bootstrap replicates for the interval of a refit.")
    ] = 200,
    seed: Annotated[
        int, Query(ge=0, le=BIGINT_MAX, description="Seed of a refit's bootstrap.")
    ] = 0,
) -> FitRead:
    """The sweep's breakeven fit: the breakeven concurrency with its interval, the
    inflection, and the k schedule for vLLM."""
    body, computed = service.sweep_fit(
        session, sweep_id, refit=refit, bootstrap_samples=bootstrap, seed=seed
    )
    fit = service.read_stored_fit(body, f"sweep {sweep_id}")
    return FitRead(
        sweep_id=sweep_id,
        computed_now=computed,
        config=fit.config,
        breakeven_concurrency=fit.breakeven_concurrency,
        breakeven_ci=None if fit.breakeven_ci is None else list(fit.breakeven_ci),
        schedule=[list(band) for band in fit.schedule],
        inflection_concurrency=fit.inflection_concurrency,
        fit=body,
    )


@tiers_router.get("", response_model=TiersRead, responses=RESPONSES_READ)
def get_tiers(session: SessionDep, _principal: PrincipalDep, sweep: SweepQuery = None) -> Any:
    """The three maturity tiers: price, modelled replica, cost per 1K session-seconds and per
    1M tokens with and without speculation across each tier's session range, and the brief's
    quoted figures beside the computed ones, each flagged within, below or above."""
    return tiers.tiers_report(session, sweep_id=sweep)


@tiers_router.get(
    "/recommendation", response_model=TierRecommendationRead, responses=RESPONSES_READ
)
def get_tier_recommendation(
    session: SessionDep,
    _principal: PrincipalDep,
    concurrency: Annotated[
        int, Query(ge=1, le=1_000_000, description="Concurrent sessions to serve.")
    ],
    tpot_p90: Annotated[
        float, Query(gt=0, le=60, description="Target p90 time per output token, seconds.")
    ],
    sweep: SweepQuery = None,
) -> Any:
    """The cheapest tier that meets a TPOT p90 target at a concurrency, with the speculation
    mode to run and the reasoning for every tier."""
    return recommendation.tier_recommendation(
        session, concurrency=concurrency, tpot_p90_s=tpot_p90, sweep_id=sweep
    )
