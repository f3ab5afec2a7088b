"""The dashboards as HTML pages of the API app:
``/dashboards/{cost,breakeven,speculation,tiers,budgets}``.

Mount with ``app.include_router(router)``. Pages need the app's engine (``request.state.engine``,
as :func:`app.deps.get_engine` reads it) and an API key, like every other route:

* ``Authorization: Bearer <key>`` or ``X-API-Key: <key>`` (scripts, proxies), or
* ``?key=<key>`` once in a browser: the response stores it in an HttpOnly cookie scoped to
  ``/dashboards``, so the navigation links work without it.

A team key sees its own team's view only; an admin key sees every team, or one with ``?team=``.
Embedders can replace the whole rule with
``app.dependency_overrides[get_dashboard_team] = lambda: "some-team"`` (or ``None`` for all);
the team picker is then hidden, since it shows only for an admin key.
"""

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Security
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from app.auth.deps import team_scope
from app.auth.service import authenticate
from app.deps import EngineDep, SessionDep
from app.domain.errors import Unauthorized
from app.domain.periods import InvalidMonth, Month
from app.kit.http_params import id_query, name_query
from app.kit.schemas import STORABLE
from dashboards import breakeven_data, data, pages

KEY_COOKIE = "specledger_key"
"""Cookie holding the API key a browser presented once with ``?key=``."""
ASSETS_PATH = "assets/" + pages.PLOTLY_JS_NAME

_bearer = HTTPBearer(auto_error=False)
_header = APIKeyHeader(name="X-API-Key", auto_error=False)
_cookie = APIKeyCookie(name=KEY_COOKIE, auto_error=False)


def get_dashboard_team(
    request: Request,
    response: Response,
    session: SessionDep,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
    header: Annotated[str | None, Security(_header)],
    cookie: Annotated[str | None, Security(_cookie)],
    key: Annotated[
        str | None,
        Query(
            description="An API key, for a browser's first visit; "
            "it is kept in a cookie afterwards.",
            max_length=256,
            pattern=STORABLE,
        ),
    ] = None,
    team: Annotated[str | None, name_query("Admin keys: show this team's view.")] = None,
) -> str | None:
    """The team whose data a dashboard request may show; None means every team.

    The key comes from the bearer header, ``X-API-Key``, ``?key=`` or the ``specledger_key``
    cookie (set from ``?key=``, HttpOnly, path ``/dashboards``). A team key is limited to its
    own team; an admin key may pick one with ``?team=``.

    Raises:
        Unauthorized: No key, or an unknown or revoked one.
        Forbidden: A team key asked for another team.
    """
    secret = (bearer.credentials if bearer is not None else header or key or cookie or "").strip()
    if not secret:
        raise Unauthorized(
            "missing API key: open the dashboard once with ?key=<key>, or send "
            "`Authorization: Bearer <key>`"
        )
    principal = authenticate(session, secret)
    if principal is None:
        raise Unauthorized("invalid or revoked API key")
    scope = team_scope(principal, team or None)
    request.state.dashboard_admin = principal.is_admin
    if key is not None and secret == key.strip():
        response.set_cookie(
            KEY_COOKIE, secret, httponly=True, samesite="strict", path="/dashboards"
        )
    return scope


DashboardTeam = Annotated[str | None, Depends(get_dashboard_team)]


router = APIRouter(prefix="/dashboards", tags=["dashboards"], include_in_schema=False)


def _month(engine: EngineDep, month: str | None) -> str:
    if not month:
        return data.default_month(engine)
    try:
        return str(Month.parse(month))
    except InvalidMonth as exc:
        raise HTTPException(422, str(exc)) from None


def _context(request: Request, month: str, team: str | None, admin_view: bool) -> pages.PageContext:
    keep = {k: v for k, v in request.query_params.items() if k in ("month", "team") and v}

    def href(page: str) -> str:
        return f"{router.prefix}/{page}" + (f"?{urlencode(keep)}" if keep else "")

    script = pages.plotly_script_tag(f"{router.prefix}/{ASSETS_PATH}?v={pages.plotly_version()}")
    return pages.PageContext(
        month=month, team=team, href=href, plotly_script=script, team_choice=admin_view
    )


def _is_admin_view(request: Request) -> bool:
    """Whether the viewer holds an admin key, and so may choose a team."""
    return bool(getattr(request.state, "dashboard_admin", False))


def _s3_endpoint_url(request: Request) -> str | None:
    """The app's S3 endpoint for ledgers kept in a Parquet store (None: AWS, or an app
    without settings in its state, as the tests' small dashboards app)."""
    settings = getattr(request.state, "settings", None)
    return getattr(settings, "s3_endpoint_url", None)


_MonthQuery = Annotated[
    str | None,
    Query(pattern=r"^\d{4}-\d{2}$", description="Month YYYY-MM; default: newest allocated."),
]


@router.get("", response_class=RedirectResponse)
def index(request: Request, team: DashboardTeam) -> RedirectResponse:
    """The dashboards start at the cost page."""
    # The key is in the cookie by now: not in the next URL (nor in history or logs).
    query = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "key"])
    return RedirectResponse(f"{router.prefix}/cost" + (f"?{query}" if query else ""), 303)


@router.get("/" + ASSETS_PATH)
def plotly_asset(team: DashboardTeam) -> Response:
    """plotly.js from the installed plotly package (the service runs without a CDN)."""
    return Response(
        pages.plotly_js(),
        media_type="application/javascript",
        headers={"Cache-Control": "private, max-age=86400"},
    )


@router.get("/cost", response_class=HTMLResponse)
def cost(
    request: Request, engine: EngineDep, team: DashboardTeam, month: _MonthQuery = None
) -> str:
    """Cost by team over time, unit costs, idle share, the reconciliation tile and the month's
    waste findings; the Slurm clusters' GPU-hours and cost by account and partition when jobs
    ran in the month."""
    chosen = _month(engine, month)
    ctx = _context(request, chosen, team, _is_admin_view(request))
    return pages.cost_page(
        ctx,
        ledger=data.ledger_by_hour(engine, month=chosen, team=team),
        usage=data.usage_by_hour(engine, month=chosen, team=team),
        sessions=data.session_seconds_by_hour(engine, month=chosen, team=team),
        reconciliation=data.reconciliation_frame(engine, month=chosen, team=team),
        slurm=data.slurm_usage_frame(
            engine, month=chosen, team=team, s3_endpoint_url=_s3_endpoint_url(request)
        ),
        waste=data.waste_frame(
            engine,
            month=chosen,
            team=team,
            s3_endpoint_url=_s3_endpoint_url(request),
            default_currency=getattr(
                getattr(request.state, "settings", None), "default_currency", "USD"
            ),
        ),
    )


@router.get("/speculation", response_class=HTMLResponse)
def speculation(
    request: Request, engine: EngineDep, team: DashboardTeam, month: _MonthQuery = None
) -> str:
    """Acceptance rate per deployment and team over time, and mean acceptance length."""
    chosen = _month(engine, month)
    ctx = _context(request, chosen, team, _is_admin_view(request))
    return pages.speculation_page(ctx, usage=data.usage_by_hour(engine, month=chosen, team=team))


@router.get("/breakeven", response_class=HTMLResponse)
def breakeven(
    request: Request,
    engine: EngineDep,
    team: DashboardTeam,
    month: _MonthQuery = None,
    sweep: Annotated[int | None, id_query("Sweep id; default: newest.")] = None,
) -> str:
    """Measured and fitted speedup against concurrency, the breakeven and the k schedule."""
    chosen = _month(engine, month)
    ctx = _context(request, chosen, team, _is_admin_view(request))
    frames = breakeven_data.breakeven_frames(engine, sweep_id=sweep)
    return pages.breakeven_page(
        ctx,
        points=frames.points,
        curve=frames.curve,
        summary=frames.summary,
        schedule=frames.schedule,
        sweep=frames.sweep,
        fit=frames.fit,
        message=frames.message,
    )


@router.get("/tiers", response_class=HTMLResponse)
def tiers(
    request: Request, engine: EngineDep, team: DashboardTeam, month: _MonthQuery = None
) -> str:
    """Cost per 1K session-seconds against concurrency for the three tiers."""
    chosen = _month(engine, month)
    ctx = _context(request, chosen, team, _is_admin_view(request))
    frames = breakeven_data.tier_frames(engine, month=chosen, team=team)
    return pages.tiers_page(
        ctx,
        modelled=frames.modelled,
        quoted=frames.quoted,
        measured=frames.measured,
        catalog_found=frames.catalog_found,
    )


@router.get("/budgets", response_class=HTMLResponse)
def budgets(
    request: Request, engine: EngineDep, team: DashboardTeam, month: _MonthQuery = None
) -> str:
    """Each budget's burn-up with the forecast to its period's end (a team's own only)."""
    chosen = _month(engine, month)
    ctx = _context(request, chosen, team, _is_admin_view(request))
    return pages.budgets_page(ctx, views=data.budget_views(engine, month=chosen, team=team))
