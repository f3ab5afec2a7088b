"""Usage-event ingestion (admin) and sessions: what each session did and cost."""

from typing import Annotated

from fastapi import APIRouter

from app.auth.deps import AdminDep, PrincipalDep, team_scope
from app.auth.team_query import TeamQuery
from app.deps import SessionDep, SettingsDep
from app.domain import measures
from app.domain.errors import NotFound
from app.domain.usage import SESSION_ID_MAX
from app.errors import RESPONSES_READ, ErrorBody
from app.kit.http_params import PageDep, WindowDep, name_path
from app.kit.schemas import WindowRead, money
from app.usage import service
from app.usage.schemas import (
    RequestRead,
    SessionDetail,
    SessionPage,
    SessionRead,
    UsageBatch,
    UsageBatchResult,
)

router = APIRouter(tags=["usage"])


@router.post("/usage/events", response_model=UsageBatchResult, responses=RESPONSES_READ)
def post_usage_events(body: UsageBatch, session: SessionDep, _admin: AdminDep) -> UsageBatchResult:
    """Store a batch of usage events; events whose event_id is already stored are skipped,
    so retrying a batch is safe (admin)."""
    events = [event.to_event() for event in body.events]
    inserted = service.ingest_events(session, events)
    return UsageBatchResult(
        received=len(events), inserted=inserted, duplicates=len(events) - inserted
    )


def _session_read(summary: service.SessionSummary) -> SessionRead:
    seconds = summary.session_ns / 1e9
    unit_cost = measures.unit_cost_micros(summary.effective_micros, seconds, 1e3)
    return SessionRead(
        session_id=summary.session_id,
        team=summary.team,
        first_arrival=summary.first_arrival,
        last_finish=summary.last_finish,
        requests=summary.requests,
        deployments=summary.deployments,
        session_seconds=measures.seconds(summary.session_ns),
        gpu_seconds=measures.seconds(summary.gpu_ns),
        prompt_tokens=summary.prompt_tokens,
        completion_tokens=summary.completion_tokens,
        draft_tokens=summary.draft_tokens,
        accepted_tokens=summary.accepted_tokens,
        acceptance_rate=measures.acceptance_rate(summary.accepted_tokens, summary.draft_tokens),
        effective_cost=money(summary.effective_micros),
        billed_cost=money(summary.billed_micros),
        cost_per_1k_session_seconds=None if unit_cost is None else money(unit_cost),
    )


@router.get("/sessions", response_model=SessionPage, responses=RESPONSES_READ)
def list_sessions(
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    window: WindowDep,
    page: PageDep,
    team: TeamQuery = None,
) -> SessionPage:
    """Sessions with requests in the window, by first arrival, with their cost."""
    result = service.list_sessions(
        session,
        window=window,
        team=team_scope(principal, team),
        limit=page.limit,
        offset=page.offset,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    return SessionPage(
        window=WindowRead.of(window),
        items=[_session_read(s) for s in result.items],
        total=result.total,
        limit=page.limit,
        offset=page.offset,
        next_offset=page.next_offset(result.total),
    )


@router.get(
    "/sessions/{session_id}",
    response_model=SessionDetail,
    responses={**RESPONSES_READ, 404: {"model": ErrorBody}},
)
def get_session_detail(
    session_id: Annotated[str, name_path("The session's id.", max_length=SESSION_ID_MAX)],
    session: SessionDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    page: PageDep,
) -> SessionDetail:
    """One session: its totals and its requests, each with its cost."""
    found = service.get_session(
        session,
        session_id,
        team=team_scope(principal, None),
        limit=page.limit,
        offset=page.offset,
        s3_endpoint_url=settings.s3_endpoint_url,
    )
    if found is None:
        raise NotFound("no session with this id is visible to this key")
    return SessionDetail(
        session=_session_read(found.summary),
        total_requests=found.total_requests,
        requests=[
            RequestRead(
                event_id=r.record.event_id,
                deployment=r.record.deployment,
                replica=r.record.replica,
                model=r.record.model,
                spec_method=r.record.spec_method,
                spec_k=r.record.spec_k,
                arrived_at=r.record.arrived_at,
                finished_at=r.record.finished_at,
                prompt_tokens=r.record.prompt_tokens,
                completion_tokens=r.record.completion_tokens,
                draft_tokens=r.record.draft_tokens,
                accepted_tokens=r.record.accepted_tokens,
                gpu_seconds=measures.seconds(r.record.gpu_ns),
                concurrency=r.record.concurrency,
                status=r.record.status,
                effective_cost=money(r.effective_micros),
                billed_cost=money(r.billed_micros),
            )
            for r in found.requests
        ],
    )
