"""Relaying one request to a replica: forward it, stream the answer back as it arrives, and
meter it (tokens, speculation figures, GPU time) into a usage record.

Pure parsing of what vLLM sends back is in :mod:`serving.proxy.wire`; who pays is in
:mod:`serving.proxy.attribution`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import httpx
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from app.auth.service import KEY_MARK
from app.budgets.rules.budget import BudgetScope, ScopeKind
from app.budgets.rules.steps import BudgetStep, StepAction
from app.budgets.service import HardLimitStanding
from app.domain.attribution import STEP_TAG
from app.domain.money import format_micros
from app.domain.usage import UsageStatus
from serving.engines import adapter_for
from serving.engines.triton_metrics import TritonMetrics, parse_triton
from serving.engines.trtllm_iteration_stats import (
    IterationRecord,
    IterationStatsError,
    parse_iteration_stats,
)
from serving.proxy.attribution import Attribution, AttributionRefused, attribute
from serving.proxy.keyring import looks_like_key
from serving.proxy.rate_card import COST_ESTIMATE_HEADER
from serving.proxy.state import DOWN_FOR_NS, InFlight, ProxyState, ReplicaState
from serving.proxy.upstream import UpstreamError, UpstreamResponse
from serving.proxy.vllm_metrics import parse_spec_decode_counters
from serving.proxy.wire import (
    Endpoint,
    ParsedResponse,
    StreamRelay,
    StreamTally,
    TokenUsage,
    parse_response,
    response_tokens,
)

log = logging.getLogger(__name__)
_T = TypeVar("_T")


SESSION_HEADER = "X-Session-Id"
EVENT_HEADER = "X-Event-Id"
"""Response header naming the usage record of the request."""
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "host", "content-length", "accept-encoding",
})  # fmt: skip
_OWN_HEADERS = frozenset({"date", "server", "content-encoding"})
"""Upstream response headers the proxy's server sets itself."""


def error_body(code: str, message: str) -> dict[str, Any]:
    """An error in the OpenAI API's shape."""
    return {"error": {"message": message, "type": code, "param": None, "code": code}}


_CREDENTIAL_HEADERS = frozenset({"authorization", "x-api-key"})


def forward_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The request headers to send upstream: no hop-by-hop header, and no credential header
    holding a SpecLedger key in any form (it is the proxy's to check, not the model
    server's to see)."""
    return {
        k: v
        for k, v in headers.items()
        if k.lower() not in _HOP_BY_HOP and not (k.lower() in _CREDENTIAL_HEADERS and KEY_MARK in v)
    }


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The credential a request presents: ``Authorization: Bearer <key>`` or ``X-API-Key``.

    Raises:
        AttributionRefused: 401 when the two headers present different credentials.
    """
    found: set[str] = set()
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "authorization":
            scheme, _, credential = value.strip().partition(" ")
            if scheme.lower() == "bearer" and credential.strip():
                found.add(credential.strip())
        elif lowered == "x-api-key" and value.strip():
            found.add(value.strip())
    if len(found) > 1:
        raise AttributionRefused(
            401, "invalid_api_key", "Authorization and X-API-Key present different keys"
        )
    return next(iter(found), None)


async def attribution_of(state: ProxyState, headers: Mapping[str, str]) -> Attribution:
    """Who pays for a request: its key decides (see :mod:`serving.proxy.attribution`).

    Raises:
        AttributionRefused: For a missing, unknown or revoked key (401), or headers the key
            does not allow.
    """
    secret = presented_key(headers)
    keyring = state.keyring
    grant = None
    if secret is not None and (looks_like_key(secret) or not state.config.allow_anonymous):
        if keyring is None:
            raise AttributionRefused(401, "invalid_api_key", "this proxy checks no keys")
        grant = keyring.lookup(secret)
        if grant is None:  # perhaps created since the last poll
            asked_at = time.monotonic()
            try:  # one check at a time, in a thread of its own: misses cannot starve others
                await anyio.to_thread.run_sync(
                    functools.partial(keyring.refresh, unless_checked_since=asked_at),
                    limiter=keyring.miss_limiter,
                )
            except Exception:
                log.exception("checking an unknown proxy key failed")
                raise AttributionRefused(
                    503, "keys_unavailable", "the proxy cannot check keys right now; retry"
                ) from None
            grant = keyring.lookup(secret)
        if grant is None:
            raise AttributionRefused(401, "invalid_api_key", "invalid or revoked proxy key")
    elif not state.config.allow_anonymous:
        raise AttributionRefused(
            401,
            "invalid_api_key",
            "missing proxy key: send `Authorization: Bearer <key>` (create one with "
            "`specledger keys create --proxy --team T`)",
        )
    return attribute(
        grant,
        protected_tags=keyring.protected_tags if keyring is not None else frozenset(),
        session_id=headers.get(SESSION_HEADER),
        team=headers.get("X-Team"),
        cost_center=headers.get("X-Cost-Center"),
        tags_header=headers.get("X-Tags"),
        new_session_id=uuid.uuid4().hex,
    )


def _response_headers(
    state: ProxyState, upstream: UpstreamResponse, request: InFlight
) -> list[tuple[bytes, bytes]]:
    headers = [(name, value) for name, value in upstream.headers if name not in _NOT_PASSED]
    headers.append((_SESSION_RAW, request.attribution.session_id.encode("latin-1")))
    headers.append((_EVENT_RAW, request.event_id.encode("latin-1")))
    if request.budget_step is not None:
        headers.append((_STEP_RAW, request.budget_step))
    if state.rates is not None:
        headers += state.rates.headers_for(request.replica.spec.deployment)
    if state.budgets is not None:
        headroom = state.budgets.team_headroom(request.attribution)
        if headroom is not None:
            standing, remaining = headroom
            headers.append((_REMAINING_RAW, format_micros(remaining).encode()))
            headers.append((_BUDGET_CURRENCY_RAW, standing.currency.encode("latin-1")))
    return headers


_NOT_PASSED = frozenset(name.encode() for name in _HOP_BY_HOP | _OWN_HEADERS)
_SESSION_RAW = SESSION_HEADER.lower().encode()
_EVENT_RAW = EVENT_HEADER.lower().encode()
BUDGET_REMAINING_HEADER = "X-SpecLedger-Budget-Remaining"
"""What the caller's team may still spend before its tightest hard limit (its spend at the
last budget refresh, less what this proxy has reserved and settled since); with
``X-SpecLedger-Budget-Currency``."""
_REMAINING_RAW = BUDGET_REMAINING_HEADER.lower().encode()
_BUDGET_CURRENCY_RAW = b"x-specledger-budget-currency"
_COST_ESTIMATE_RAW = COST_ESTIMATE_HEADER.lower().encode()


async def send_json(
    send: Send, status: int, body: Any, headers: Mapping[str, str] | None = None
) -> None:
    """A JSON response, as Starlette's ``JSONResponse`` writes it."""
    payload = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    raw = [(b"content-length", str(len(payload)).encode()), (b"content-type", b"application/json")]
    raw += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": payload})


async def _read_body(receive: Receive) -> bytes | None:
    """The request body; None if the client hung up first."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class _Hangup:
    """Watches for the client hanging up while its request is relayed, and then cancels
    the relaying task at the await it is in (the upstream request is aborted at once)."""

    __slots__ = ("done", "fired", "task", "watcher")

    def __init__(self, receive: Receive) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.task = task
        self.fired = False
        self.done = False
        """Set before the last awaits of the response: from then on a hang-up changes
        nothing."""
        self.watcher = asyncio.create_task(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        if not self.done:
            self.fired = True
            self.task.cancel()

    def caught(self) -> bool:
        """Whether a CancelledError being handled is this hang-up's (then it is taken back)."""
        if not self.fired:
            return False
        self.task.uncancel()
        return True

    def stop(self) -> None:
        self.done = True
        self.watcher.cancel()


def _stream_options(
    body: dict[str, Any], metering: Mapping[str, bool]
) -> tuple[dict[str, Any], bool, bool]:
    """The upstream body of a stream (with the ``metering`` stream options the engine's
    adapter asks for), and whether the client asked for the usage chunk and for usage on
    every chunk."""
    options = body.get("stream_options")
    options = dict(options) if isinstance(options, Mapping) else {}
    wants_usage = bool(options.get("include_usage"))
    wants_every = wants_usage and bool(options.get("continuous_usage_stats"))
    options.update(metering)
    return {**body, "stream_options": options}, wants_usage, wants_every


def _outcome(tally: StreamTally) -> tuple[UsageStatus, str | None]:
    """How a stream that the model server ended (or ended with [DONE]) went."""
    if tally.error is not None:
        return UsageStatus.error, tally.error
    if not tally.done:
        return UsageStatus.error, "the model server ended the stream early"
    return UsageStatus.ok, None


async def _relay(
    state: ProxyState,
    request: InFlight,
    upstream: UpstreamResponse,
    send: Send,
    hangup: _Hangup,
    headers: list[tuple[bytes, bytes]],
    *,
    wants_usage: bool,
    wants_every: bool,
) -> None:
    """Pass a stream to the client read by read, metering the tokens each carries."""
    relay = StreamRelay(
        wants_usage=wants_usage,
        wants_every=wants_every,
        estimate=_estimate(state, request.replica.spec.deployment),
    )
    tally = relay.tally
    clock = state.clock
    status = UsageStatus.cancelled
    error: str | None = "the client disconnected before the end"
    tail = b""
    try:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        async for data in upstream.chunks():
            now_ns = clock.now_ns()
            out, tokens = relay.feed(data)
            if tokens:
                if request.first_token_ns is None and tally.completion_tokens:
                    request.first_token_ns = now_ns
                state.chunk(request, tokens=tokens, at_ns=now_ns)
            if tally.done:  # a client that hangs up once it has [DONE] got everything
                status, error = _outcome(tally)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        status, error = _outcome(tally)
        tail = relay.splitter.pending if relay.splitter.pending.strip() else b""
    except UpstreamError as exc:
        status, error = UsageStatus.error, f"upstream stream failed: {exc}"
        failure = error_body("upstream_unavailable", f"the model server failed mid-stream: {exc}")
        tail = b"data: " + json.dumps(failure).encode() + b"\n\ndata: [DONE]\n\n"
    except asyncio.CancelledError:
        if not hangup.caught():
            raise
    finally:
        hangup.done = True
        await upstream.aclose()
        state.finish(
            request,
            status=status,
            usage=tally.usage(),
            spec=tally.spec,
            meter_tokens=tally.final_tokens(),
            http_status=upstream.status_code,
            error=error,
            accepted_hist=tally.acceptance_histogram,
        )
    if not hangup.fired:
        await send({"type": "http.response.body", "body": tail, "more_body": False})


def _estimate(state: ProxyState, deployment: str) -> Callable[[TokenUsage], str | None] | None:
    """The cost estimate of a stream's final usage at the deployment's rate card."""
    rates = state.rates
    if rates is None or rates.price_of(deployment) is None:
        return None
    return lambda usage: rates.estimate(deployment, usage.prompt_tokens, usage.completion_tokens)


BUDGET_STEP_HEADER = "X-SpecLedger-Budget-Step"
"""On a response a brownout step acted on: ``ACTION; at=PERCENT`` and, for the caller's own
team's budget, ``; budget=NAME``, and for a route, ``; to=DEPLOYMENT``."""
_STEP_RAW = BUDGET_STEP_HEADER.lower().encode()


def _brownout(
    state: ProxyState,
    replica: ReplicaState,
    attribution: Attribution,
    acting: tuple[HardLimitStanding, BudgetStep],
    usable: Callable[[str], bool],
) -> tuple[ReplicaState, Attribution, bytes]:
    """What a brownout step does to a request: the replica it goes to (a route step's
    deployment, where this proxy serves it and the key may use it; else the one picked), its
    attribution tagged with the step, and the header that says so."""
    standing, step = acting
    action = step.action
    if action is StepAction.route:
        target = state.pick(None, allowed=lambda name: name == step.route_to and usable(name))
        if target is None:
            log.warning(
                "budget %r: route step to %r, but no usable replica serves it here; warning "
                "instead",
                standing.name,
                step.route_to,
            )
            action = StepAction.warn
        else:
            replica = target
    parts = [str(action), f"at={step.at_percent}"]
    if standing.scope == BudgetScope(ScopeKind.team, attribution.team or ""):
        parts.append(f"budget={standing.name}")
    if action is StepAction.route:
        parts.append(f"to={step.route_to}")
    tags = {**attribution.tags, STEP_TAG: f"{action}:{standing.name}"}
    header = "; ".join(parts).encode("latin-1", errors="replace")
    return replica, dataclasses.replace(attribution, tags=tags), header


def _expected_cost(
    state: ProxyState, deployment: str, raw: bytes, body: dict[str, Any] | None
) -> int:
    """What a request may cost at the deployment's rate card: its prompt at about four bytes
    a token (the whole body's bytes) and its ``max_tokens`` (``reserve_max_tokens`` when it
    sets none); 0 before the deployment has prices."""
    price = state.rates.price_of(deployment) if state.rates is not None else None
    if price is None:
        return 0
    limit = None
    if body is not None:
        limit = body.get("max_tokens", body.get("max_completion_tokens"))
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        limit = state.config.reserve_max_tokens
    return price.cost_of(-(-len(raw) // 4), limit)


def _over_budget(
    over: HardLimitStanding,
    attribution: Attribution,
    *,
    counted: int | None = None,
    estimate: int | None = None,
) -> JSONResponse:
    """429: the request's scope is over a budget's hard limit until the period ends (or,
    with ``estimate``, the request's expected cost does not fit in what is left).
    ``counted``: the spend, in flight included, the proxy counts against the limit (default:
    the standing's)."""
    period_end = over.period_end.isoformat().replace("+00:00", "Z")
    if over.scope == BudgetScope(ScopeKind.team, attribution.team or ""):
        limit = format_micros(over.hard_limit_micros)
        spent = format_micros(over.spent_micros if counted is None else counted)
        if estimate is None:
            message = (
                f"budget {over.name!r} ({over.scope}) is over its hard limit: spent {spent} "
                f"of {limit} {over.currency} in the period ending {period_end}"
            )
        else:
            message = (
                f"budget {over.name!r} ({over.scope}) would pass its hard limit: spent "
                f"{spent} (requests in flight included) of {limit} {over.currency}, and this "
                f"request may cost {format_micros(estimate)} (its max_tokens at the "
                f"deployment's price); lower max_tokens or wait for the period ending "
                f"{period_end}"
            )
        budget: dict[str, Any] = {
            "id": over.budget_id,
            "name": over.name,
            "scope": str(over.scope),
            "currency": over.currency,
            "hard_limit": limit,
            "spent": spent,
            "period_end": period_end,
        }
    else:  # a budget the caller's team may not read: only that one binds, and until when
        message = (
            f"a {over.scope.kind} budget this request falls under is over its hard limit "
            f"until {period_end}"
        )
        budget = {"scope_kind": str(over.scope.kind), "period_end": period_end}
    body = error_body("budget_exceeded", message)
    body["budget"] = budget
    retry_after = max(1, int((over.period_end - datetime.now(UTC)).total_seconds()))
    return JSONResponse(
        body,
        status_code=429,
        headers={SESSION_HEADER: attribution.session_id, "Retry-After": str(retry_after)},
    )


async def forward(
    state: ProxyState, scope: Scope, receive: Receive, send: Send, endpoint: Endpoint
) -> None:
    """Serve one completion request (raw ASGI): check who pays, pick a replica, relay the
    answer and meter it."""
    arrived_ns = state.clock.now_ns()
    headers = Headers(scope=scope)
    try:
        attribution = await attribution_of(state, headers)
    except AttributionRefused as exc:
        state.metrics.rejected(exc.code)
        await send_json(send, exc.status, error_body(exc.code, exc.message))
        return
    raw = await _read_body(receive)  # only once the key is known good
    if raw is None:
        return
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    body = body if isinstance(body, dict) else None
    model = body.get("model") if body else None
    model = model if isinstance(model, str) else None
    grant = attribution.grant
    guard = state.budgets

    def keyed(deployment: str) -> bool:
        return grant is None or grant.may_use(deployment)

    def usable(deployment: str) -> bool:
        return keyed(deployment) and (
            guard is None or guard.limit_for(attribution, deployment) is None
        )

    replica = state.pick(model, allowed=usable)
    if replica is None and state.pick(model) is not None:
        permitted = state.pick(model, allowed=keyed)
        over = (
            guard.limit_for(attribution, permitted.spec.deployment) if guard and permitted else None
        )
        if over is not None:
            state.metrics.rejected("budget_exceeded")
            counted = guard.counted(over) if guard is not None else over.spent_micros
            await _over_budget(over, attribution, counted=counted)(scope, receive, send)
            return
        state.metrics.rejected("permission_denied")
        await send_json(
            send,
            403,
            error_body(
                "permission_denied",
                f"this key may not use the deployments serving model {model!r}",
            ),
            {SESSION_HEADER: attribution.session_id},
        )
        return
    if replica is None:
        state.metrics.rejected("model_not_found")
        await send_json(
            send,
            404,
            error_body("model_not_found", f"no replica serves model {model!r}"),
            {SESSION_HEADER: attribution.session_id},
        )
        return
    step_header = reservation = None
    if guard is not None and guard.has_limits:
        acting = guard.step_for(attribution, replica.spec.deployment)
        if acting is not None:
            replica, attribution, step_header = _brownout(
                state, replica, attribution, acting, usable
            )
            if replica.spec.model is not None and body is not None and model != replica.spec.model:
                model = replica.spec.model
                body = {**body, "model": model}
                raw = json.dumps(body).encode()
        estimate = _expected_cost(state, replica.spec.deployment, raw, body)
        held = guard.reserve(attribution, replica.spec.deployment, estimate)
        if isinstance(held, HardLimitStanding):
            state.metrics.rejected("budget_exceeded")
            refusal = _over_budget(
                held, attribution, counted=guard.counted(held), estimate=estimate
            )
            await refusal(scope, receive, send)
            return
        reservation = held
    streamed = bool(body and body.get("stream"))
    request = state.begin(
        replica,
        attribution=attribution,
        endpoint=endpoint,
        model=model or replica.spec.model or "",
        streamed=streamed,
        arrived_ns=arrived_ns,
        reservation=reservation,
    )
    request.budget_step = step_header
    wants_usage = wants_every = False
    content = raw
    if streamed and body is not None:
        upstream_body, wants_usage, wants_every = _stream_options(
            body, adapter_for(replica.spec.engine).stream_options
        )
        content = json.dumps(upstream_body).encode()
    path = "/v1/completions" if endpoint is Endpoint.completions else "/v1/chat/completions"
    hangup = _Hangup(receive)
    try:
        assert state.upstream is not None
        upstream = await _from_upstream(
            state.upstream.send(
                "POST", replica.spec.base_url + path, headers=forward_headers(headers),
                content=content,
            ),
            state, request, send, hangup,
            gave_up="the client disconnected before the model server answered",
        )  # fmt: skip
        if upstream is None:
            return
        response_headers = _response_headers(state, upstream, request)
        content_type = upstream.header(b"content-type") or b""
        if (
            streamed
            and upstream.status_code == 200
            and content_type.startswith(b"text/event-stream")
        ):
            await _relay(state, request, upstream, send, hangup, response_headers,
                         wants_usage=wants_usage, wants_every=wants_every)  # fmt: skip
        else:
            await _complete(state, request, upstream, send, hangup, response_headers)
    finally:
        hangup.stop()


async def _from_upstream(
    step: Awaitable[_T],
    state: ProxyState,
    request: InFlight,
    send: Send,
    hangup: _Hangup,
    *,
    gave_up: str,
) -> _T | None:
    """``step``'s result; None when it failed and the request is over: a 503 sent for an
    upstream failure, or the request recorded as abandoned (``gave_up``) when the client
    hung up."""
    try:
        return await step
    except UpstreamError as exc:
        hangup.done = True
        await _unavailable(state, request, exc, send)
        return None
    except asyncio.CancelledError:
        _abandoned(state, request, gave_up)
        if hangup.caught():
            return None
        raise
    except BaseException:
        _abandoned(state, request, gave_up)
        raise


async def _read_whole(upstream: UpstreamResponse) -> bytes:
    try:
        return await upstream.read()
    finally:
        await upstream.aclose()


def _abandoned(state: ProxyState, request: InFlight, error: str) -> None:
    """Record a request the client gave up on before any token reached it."""
    state.finish(
        request,
        status=UsageStatus.cancelled,
        usage=TokenUsage(),
        spec=None,
        meter_tokens=0,
        http_status=None,
        error=error,
    )


async def _complete(
    state: ProxyState,
    request: InFlight,
    upstream: UpstreamResponse,
    send: Send,
    hangup: _Hangup,
    headers: list[tuple[bytes, bytes]],
) -> None:
    """Read a whole response, meter it and hand it on unchanged."""
    payload = await _from_upstream(
        _read_whole(upstream), state, request, send, hangup,
        gave_up="the client disconnected before the response was complete",
    )  # fmt: skip
    if payload is None:
        return
    hangup.done = True
    try:
        parsed = parse_response(json.loads(payload))
    except ValueError:
        parsed = ParsedResponse(
            usage=None, metrics=None, error=payload[:500].decode("utf-8", errors="replace") or None
        )
    ok = upstream.status_code == 200
    metrics = parsed.metrics
    if ok and metrics is not None and metrics.time_to_first_token_ms is not None:
        request.first_token_ns = request.arrived_ns + int(metrics.time_to_first_token_ms * 1e6)
    state.finish(
        request,
        status=UsageStatus.ok if ok else UsageStatus.error,
        usage=parsed.usage or TokenUsage(),
        spec=metrics.spec if metrics else None,
        meter_tokens=response_tokens(parsed) if ok else 0,
        http_status=upstream.status_code,
        error=None if ok else parsed.error or f"HTTP {upstream.status_code}",
        accepted_hist=metrics.acceptance_histogram if metrics else None,
    )
    headers = [*headers, (b"content-length", str(len(payload)).encode())]
    if ok and parsed.usage is not None and state.rates is not None:
        cost = state.rates.estimate(
            request.replica.spec.deployment,
            parsed.usage.prompt_tokens,
            parsed.usage.completion_tokens,
        )
        if cost is not None:
            headers.append((_COST_ESTIMATE_RAW, cost.encode()))
    await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def _unavailable(
    state: ProxyState, request: InFlight, exc: UpstreamError, send: Send
) -> None:
    """A 503 for a replica that is down or timed out, recorded as an error."""
    replica = request.replica
    if exc.kind == "connect":
        replica.down_until_ns = state.clock.now_ns() + DOWN_FOR_NS
    kind = "timed out" if exc.kind == "timeout" else "is unreachable"
    message = f"the model server {replica.spec.replica_name} {kind}: {exc}"
    log.warning("%s", message)
    state.finish(
        request,
        status=UsageStatus.error,
        usage=TokenUsage(),
        spec=None,
        meter_tokens=0,
        http_status=503,
        error=message,
    )
    await send_json(
        send,
        503,
        error_body("upstream_unavailable", message),
        {SESSION_HEADER: request.attribution.session_id, EVENT_HEADER: request.event_id},
    )


async def _get_metrics_page(
    base_url: str, path: str, client: httpx.AsyncClient | None
) -> httpx.Response:
    url = base_url.rstrip("/").removesuffix("/v1") + path
    if client is None:
        async with httpx.AsyncClient(timeout=10.0) as own:
            response = await own.get(url)
    else:
        response = await client.get(url)
    response.raise_for_status()
    return response


async def scrape_spec_decode_counters(
    base_url: str, client: httpx.AsyncClient | None = None
) -> dict[str, int]:
    """vLLM's speculative-decoding counters from a replica's ``/metrics``, summed over its
    engines: ``num_drafts``, ``num_draft_tokens``, ``num_accepted_tokens``.

    Raises:
        httpx.HTTPError: If the page cannot be fetched.
    """
    response = await _get_metrics_page(base_url, "/metrics", client)
    return parse_spec_decode_counters(response.text)


async def drain_iteration_stats(
    base_url: str, client: httpx.AsyncClient | None = None, *, path: str = "/metrics"
) -> list[IterationRecord]:
    """TensorRT-LLM's queued iteration stats from ``trtllm-serve``'s ``/metrics`` (the read
    empties the queue).

    Raises:
        httpx.HTTPError: If the page cannot be fetched.
        IterationStatsError: If it is not a list of iteration records.
    """
    response = await _get_metrics_page(base_url, path, client)
    try:
        document = response.json()
    except ValueError as exc:
        raise IterationStatsError(f"{response.url}: not JSON ({exc})") from None
    return parse_iteration_stats(document, source=str(response.url))


async def scrape_triton_metrics(
    base_url: str, client: httpx.AsyncClient | None = None, *, path: str = "/metrics"
) -> TritonMetrics:
    """Triton's ``nv_inference_*``, ``nv_gpu_*`` and ``nv_trt_llm_*`` figures.

    Raises:
        httpx.HTTPError: If the page cannot be fetched.
        TritonMetricsError: For a malformed page.
    """
    response = await _get_metrics_page(base_url, path, client)
    return parse_triton(response.text, source=str(response.url))
