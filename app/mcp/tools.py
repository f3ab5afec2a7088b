"""What each MCP tool answers: the body of the REST route for the same query, computed by
calling that route's function with the caller's principal, so the two cannot drift apart.

Nothing here knows MCP: :mod:`app.mcp.server` registers these as tools. Every function
takes a :class:`Call` (a read-only session, the settings, the principal and the instant)
and returns the JSON value the REST API would send."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy.orm import Session

from app.allocation.query import CostMetric, IdlePolicy
from app.allocation.router import get_allocation
from app.anomalies.router import list_anomalies
from app.anomalies.service import Granularity
from app.auth.deps import require_admin
from app.auth.router import whoami
from app.auth.service import Principal
from app.breakeven import repository
from app.breakeven.router import get_fit
from app.budgets.router import get_budget, list_budgets
from app.deployments.service import get_deployment
from app.domain.errors import NotFound
from app.domain.windows import Step
from app.errors import InvalidParameter
from app.kit.http_params import month_param, page_param, window_param
from app.kit.responses import Format
from app.ledger.router import get_costs, get_reconciliation
from app.settings import Settings
from app.usage.router import list_sessions
from app.waste.router import get_waste


@dataclass(frozen=True, slots=True)
class Call:
    session: Session
    settings: Settings
    principal: Principal
    now: datetime


def to_json(value: Any) -> Any:
    """A route's return value as FastAPI sends it (its response model, by alias)."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, list):
        return [to_json(item) for item in value]
    return value


def who(call: Call) -> Any:
    return whoami(call.principal)


def unit_costs(
    call: Call, *, month: str, by: str, team: str | None, limit: int, offset: int
) -> Any:
    return get_costs(
        session=call.session,
        settings=call.settings,
        principal=call.principal,
        month=month_param(month),
        page=page_param(limit, offset),
        by=by,
        team=team,
        format=Format.json,
    )


def sessions(call: Call, *, window: str, team: str | None, limit: int, offset: int) -> Any:
    return list_sessions(
        session=call.session,
        settings=call.settings,
        principal=call.principal,
        window=window_param(call.now, window),
        page=page_param(limit, offset),
        team=team,
    )


def allocation(
    call: Call,
    *,
    window: str,
    aggregate: str,
    step: Step | None,
    cost_metric: CostMetric,
    idle: IdlePolicy,
    team: str | None,
    limit: int,
    offset: int,
) -> Any:
    return get_allocation(
        session=call.session,
        settings=call.settings,
        principal=call.principal,
        window=window_param(call.now, window),
        page=page_param(limit, offset),
        aggregate=aggregate,
        step=step,
        cost_metric=cost_metric,
        idle=idle,
        team=team,
        format=Format.json,
    )


def reconciliation(call: Call, *, month: str) -> Any:
    return get_reconciliation(
        session=call.session, month=month_param(month), _admin=require_admin(call.principal)
    )


def budgets(call: Call, *, budget: str | None) -> Any:
    if budget is None:
        return list_budgets(session=call.session, principal=call.principal)
    return get_budget(ident=budget, session=call.session, principal=call.principal)


def anomalies(call: Call, *, granularity: Granularity, buckets: int) -> Any:
    return list_anomalies(
        session=call.session,
        principal=call.principal,
        settings=call.settings,
        now=call.now,
        granularity=granularity,
        buckets=buckets,
    )


def waste(
    call: Call,
    *,
    window: str,
    acceptance_threshold: float,
    confidence: float,
    min_requests: int,
    idle_threshold: float,
    team: str | None,
) -> Any:
    return get_waste(
        session=call.session,
        principal=call.principal,
        settings=call.settings,
        window=window_param(call.now, window),
        now=call.now,
        acceptance_threshold=acceptance_threshold,
        confidence=confidence,
        min_requests=min_requests,
        idle_threshold=idle_threshold,
        team=team,
    )


class NoFittedSweep(NotFound):
    """The deployment has no sweep with a stored fit."""

    code = "no_fitted_sweep"


def breakeven(call: Call, *, deployment: str | None, sweep_id: int | None) -> Any:
    """The fit of ``sweep_id``, or of the deployment's newest fitted sweep (its own only)."""
    if (deployment is None) == (sweep_id is None):
        raise InvalidParameter("deployment", "give exactly one of deployment and sweep_id")
    if sweep_id is None:
        assert deployment is not None
        get_deployment(call.session, deployment)
        sweep = repository.latest_fitted_sweep(call.session, deployment)
        if sweep is None or sweep.deployment != deployment:
            raise NoFittedSweep(
                f"deployment {deployment!r} has no fitted sweep: fit one with "
                f"`specledger breakeven fit --deployment {deployment}`"
            )
        sweep_id = sweep.id
    return get_fit(
        sweep_id=sweep_id,
        session=call.session,
        _principal=call.principal,
        refit=False,
        bootstrap=200,
        seed=0,
    )
