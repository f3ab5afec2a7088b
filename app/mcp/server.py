"""The MCP server: nine read-only tools over the ledger, each the REST route of the same name
(:mod:`app.mcp.tools`), built on the official SDK's ``MCPServer``.

A tool's text content is the JSON body the REST API sends for the same query; its structured
content is that body when it is an object. Arguments are validated against their schema
before a tool runs; a refused call (bad argument, unknown month, another team's data, an
admin-only tool) is a tool error whose text names the argument and says what to give."""

import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field
from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from app import __version__
from app.allocation.query import CostMetric, IdlePolicy
from app.anomalies.service import Granularity
from app.db import read_session
from app.domain.errors import SpecLedgerError
from app.domain.windows import GRAMMAR, Step
from app.kit.http_params import MAX_LIMIT
from app.kit.schemas import BIGINT_MAX, NAME_MAX, STORABLE
from app.mcp import access, tools
from app.settings import Settings

log = logging.getLogger("specledger.mcp")

KeyOf = Callable[[Context], str | None]
"""The API key presented for a call (stdio: the server's own; HTTP: the request's)."""

INSTRUCTIONS = """\
SpecLedger's ledger of what speculative LLM serving costs, read-only. Every tool answers with \
the JSON body of the REST API route it names (GET /v1/...), scoped by the API key of this \
connection: a team key sees its own team only, an admin key every team. Money is a decimal \
string with six places; times are UTC; windows are half-open [start, end)."""

Month = Annotated[str, Field(description="A calendar month, YYYY-MM (UTC).", max_length=7)]
Window = Annotated[
    str, Field(description=f"The time window: {GRAMMAR}.", min_length=1, max_length=80)
]
Team = Annotated[
    str | None,
    Field(
        description="Only this team (admin keys; a team key always sees only its own team).",
        max_length=NAME_MAX,
        pattern=STORABLE,
    ),
]
Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description="Items per page.")]
Offset = Annotated[int, Field(ge=0, le=BIGINT_MAX, description="Items to skip (next_offset).")]
Dimensions = Annotated[
    str,
    Field(
        description="Comma-separated: team, session, deployment, model, method, cost_center "
        "or tag:KEY.",
        max_length=400,
    ),
]
READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)


def describe(exc: SpecLedgerError) -> str:
    """The error as the REST API would word it, with argument names for query fields."""
    if exc.fields:
        detail = "; ".join(
            f"{field.removeprefix('query.').removeprefix('path.')}: {message}"
            for field, message in exc.fields
        )
    else:
        detail = exc.message
    return f"{exc.code}: {detail}"


def result(body: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body, ensure_ascii=False))],
        structured_content=body if isinstance(body, dict) else None,
    )


def presenting(secret: str) -> KeyOf:
    """Every call presents ``secret`` (stdio, and the in-memory client of the tests)."""
    return lambda _ctx: secret


def build_server(
    engine: Engine,
    settings: Settings,
    key_of: KeyOf,
    *,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> MCPServer:
    """The server, reading ``engine``; ``key_of`` gives each call's API key."""
    server: MCPServer = MCPServer(
        name="specledger",
        version=__version__,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
    )

    def answer(ctx: Context, tool: Callable[..., Any], **arguments: Any) -> CallToolResult:
        try:
            with read_session(engine) as session:
                principal = access.principal(session, key_of(ctx))
                call = tools.Call(session, settings, principal, clock())
                body = tools.to_json(tool(call, **arguments))
        except SpecLedgerError as exc:
            raise ToolError(describe(exc)) from None
        except OperationalError as exc:
            log.error("database unavailable: %s", type(exc.orig).__name__)
            raise ToolError("database_unavailable: the database is unavailable; retry") from None
        return result(body)

    @server.tool(annotations=READ_ONLY)
    def whoami(ctx: Context) -> CallToolResult:
        """The scope of this connection's API key (GET /v1/whoami): its name, its team (null
        for admin keys) and whether it is an admin key."""
        return answer(ctx, tools.who)

    @server.tool(annotations=READ_ONLY)
    def unit_costs(
        ctx: Context,
        month: Month,
        by: Dimensions = "team",
        team: Team = None,
        limit: Limit = 1000,
        offset: Offset = 0,
    ) -> CallToolResult:
        """Unit costs for a month (GET /v1/costs), grouped by team, deployment, session,
        model, method, cost center or a tag: cost, GPU-seconds, session-seconds, tokens,
        acceptance, and cost per 1K session-seconds, per 1M tokens and per GPU-hour."""
        return answer(
            ctx, tools.unit_costs, month=month, by=by, team=team, limit=limit, offset=offset
        )

    @server.tool(annotations=READ_ONLY)
    def sessions(
        ctx: Context,
        window: Window = "month",
        team: Team = None,
        limit: Limit = 1000,
        offset: Offset = 0,
    ) -> CallToolResult:
        """Sessions with requests in a window, by first arrival, each with its cost and its
        cost per 1K session-seconds (GET /v1/sessions)."""
        return answer(ctx, tools.sessions, window=window, team=team, limit=limit, offset=offset)

    @server.tool(annotations=READ_ONLY)
    def allocation(
        ctx: Context,
        window: Window,
        aggregate: Dimensions = "team",
        step: Annotated[
            Step | None, Field(description="Cut the window into hours, days or months.")
        ] = None,
        cost_metric: Annotated[
            CostMetric, Field(description="effective (amortised) or billed (cash).")
        ] = CostMetric.effective,
        idle: Annotated[
            IdlePolicy,
            Field(description="Keep idle GPU cost as its own line, or share it to requests."),
        ] = IdlePolicy.separate,
        team: Team = None,
        limit: Limit = 1000,
        offset: Offset = 0,
    ) -> CallToolResult:
        """Allocated cost per aggregate (and step) over a window, from the ledger
        (GET /v1/allocation)."""
        return answer(
            ctx,
            tools.allocation,
            window=window,
            aggregate=aggregate,
            step=step,
            cost_metric=cost_metric,
            idle=idle,
            team=team,
            limit=limit,
            offset=offset,
        )

    @server.tool(annotations=READ_ONLY)
    def reconciliation(ctx: Context, month: Month) -> CallToolResult:
        """Whether a month's bill equals allocated + idle + unallocated cost, to the micro,
        per currency and cost basis (GET /v1/reconciliation; admin keys only: it covers the
        whole bill)."""
        return answer(ctx, tools.reconciliation, month=month)

    @server.tool(annotations=READ_ONLY)
    def budgets(
        ctx: Context,
        budget: Annotated[
            str | None,
            Field(
                description="One budget by id or name (GET /v1/budgets/{ident}); omit for "
                "every live budget.",
                min_length=1,
                max_length=128,
                pattern=STORABLE,
            ),
        ] = None,
    ) -> CallToolResult:
        """Live budgets with their spend this period, daily burn-down and period-end
        forecast (expected total with its interval, and the day the budget is expected to
        be crossed) (GET /v1/budgets); a team key sees its own team's budgets only."""
        return answer(ctx, tools.budgets, budget=budget)

    @server.tool(annotations=READ_ONLY)
    def anomalies(
        ctx: Context,
        granularity: Annotated[
            Granularity, Field(description="day (weekly season) or hour (daily season).")
        ] = Granularity.day,
        buckets: Annotated[
            int, Field(ge=1, le=400, description="How many recent complete buckets to judge.")
        ] = 14,
    ) -> CallToolResult:
        """Cost anomalies per deployment and team in the recent buckets, newest first, each
        with its drivers in money (team, session, model, method, acceptance, idle share,
        volume) (GET /v1/anomalies)."""
        return answer(ctx, tools.anomalies, granularity=granularity, buckets=buckets)

    @server.tool(annotations=READ_ONLY)
    def waste(
        ctx: Context,
        window: Window = "month",
        acceptance_threshold: Annotated[
            float, Field(gt=0, lt=1, description="Flag acceptance rates confidently below this.")
        ] = 0.5,
        confidence: Annotated[
            float, Field(ge=0.5, lt=1, description="Coverage of the acceptance rate's interval.")
        ] = 0.95,
        min_requests: Annotated[
            int,
            Field(
                ge=1,
                le=100_000,
                description="Groups with fewer speculative requests are not judged.",
            ),
        ] = 5,
        idle_threshold: Annotated[
            float,
            Field(
                gt=0,
                lt=1,
                description="Flag deployments whose idle share of GPU cost exceeds this.",
            ),
        ] = 0.3,
        team: Team = None,
    ) -> CallToolResult:
        """Where money is wasted (GET /v1/waste): idle GPUs, low acceptance, speculation above
        the breakeven, draft memory; each finding with its cost in the window, its estimated
        monthly cost and the action to take."""
        return answer(
            ctx,
            tools.waste,
            window=window,
            acceptance_threshold=acceptance_threshold,
            confidence=confidence,
            min_requests=min_requests,
            idle_threshold=idle_threshold,
            team=team,
        )

    @server.tool(annotations=READ_ONLY)
    def breakeven(
        ctx: Context,
        deployment: Annotated[
            str | None,
            Field(
                description="A registered deployment: the fit of its newest fitted sweep.",
                min_length=1,
                max_length=NAME_MAX,
                pattern=STORABLE,
            ),
        ] = None,
        sweep_id: Annotated[
            int | None, Field(ge=1, le=BIGINT_MAX, description="A sweep's id, instead.")
        ] = None,
    ) -> CallToolResult:
        """The breakeven of a deployment (GET /v1/breakeven/sweeps/{id}/fit of its newest
        fitted sweep): the concurrency at which speculation stops paying off, with its
        interval, the inflection, and the k schedule for vLLM. Give deployment or sweep_id."""
        return answer(ctx, tools.breakeven, deployment=deployment, sweep_id=sweep_id)

    return server
