"""The metering proxy: an OpenAI-compatible front for one or more engine replicas (vLLM by
default; TensorRT-LLM and Triton through their adapters, :mod:`serving.engines`).

Every completion passes through unchanged (streams chunk by chunk as they arrive) and leaves
a usage record: who asked (the proxy key decides the team and cost center, see
:mod:`serving.proxy.attribution`; ``X-Session-Id`` and ``X-Tags`` add detail),
tokens, drafted and accepted tokens, timings, and the request's share of its replica's GPU
time from a :class:`~app.domain.gpu_seconds.ReplicaMeter`. Streams are asked for usage on
every chunk (``stream_options.include_usage`` and ``continuous_usage_stats``); what the client
did not ask for is taken out again before it reaches the client.

Records are written once the meter has settled their GPU time, through a
:class:`~serving.proxy.sink.UsageSink`. Each replica's idle GPU time goes to
``replica_idle`` per metering window; a window closes when the replica has been idle at a
tick after ``idle_window_s``, and at shutdown, so requests + idle = GPUs x wall time holds
in the database.

The completion endpoints are served as raw ASGI (:class:`ProxyApp`), the replicas are
reached through a small HTTP/1.1 client (:mod:`serving.proxy.upstream`), and a stream's
usage is read from its bytes (:func:`~serving.proxy.wire.scan_usage`): the proxy's cost
per relayed token stays within a few times a bare relay's. Several proxy processes (``--workers``,
or proxies on several hosts) share one set of meters through a meter service
(:mod:`serving.proxy.meter_service`), so each replica's GPU time is still split by one meter.

Run it with ``specledger proxy`` (see ``app/cli/proxy.py``); :func:`create_proxy_app`
builds the app from a :class:`~serving.proxy.config.ProxyConfig`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from sqlalchemy import Engine
from starlette.types import Receive, Scope, Send

from app.db import make_engine
from app.domain.gpu_seconds import ReplicaMeter
from app.domain.speculation_methods import EngineKind
from app.storage.dataset_store import DatasetStore
from serving.engines import SpecSource, adapter_for
from serving.proxy.attribution import AttributionRefused
from serving.proxy.budget_guard import BudgetGuard
from serving.proxy.config import ProxyConfig, ReplicaSpec
from serving.proxy.iteration_meter import IterationSpecMeter
from serving.proxy.keyring import KeyRing
from serving.proxy.meter_service import MeterClient, meter_token
from serving.proxy.metrics import ProxyMetrics
from serving.proxy.rate_card import RateCard
from serving.proxy.relay import (
    attribution_of,
    drain_iteration_stats,
    error_body,
    forward,
    forward_headers,
    scrape_spec_decode_counters,
    scrape_triton_metrics,
)
from serving.proxy.sink import UsageSink
from serving.proxy.state import Clock, ProxyState, ReplicaState
from serving.proxy.upstream import Http11Upstream, HttpxUpstream, Upstream
from serving.proxy.wire import (
    Endpoint,
)

__all__ = ["ProxyConfig", "ReplicaSpec", "create_proxy_app"]

log = logging.getLogger(__name__)


def create_proxy_app(
    config: ProxyConfig, *, transport: httpx.AsyncBaseTransport | None = None
) -> FastAPI:
    """Build the proxy app. Nothing happens until its lifespan starts.

    Args:
        config: Replicas, database and timeouts.
        transport: httpx transport to the replicas (tests pass a fake one).

    Returns:
        The FastAPI app; its lifespan opens the connection pool, the usage sink and the
        meters, and on shutdown closes the meters and writes everything out.
    """
    metrics = ProxyMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(config.database_url) if config.database_url else None
        # With a meter service (--workers, --meter-url) it meters and writes the records;
        # this process relays and sends it the events.
        link = MeterClient(config.meter_url, token=meter_token()) if config.meter_url else None
        sink = None if link is not None else open_sink(config, engine)
        if sink is not None:
            metrics.watch_sink(sink)
            sink.start()
        timeout = httpx.Timeout(config.read_timeout_s, connect=config.connect_timeout_s)
        limits = httpx.Limits(
            max_connections=config.max_connections, max_keepalive_connections=config.max_connections
        )
        keyring = budgets = rates = None
        if engine is not None:
            keyring = KeyRing(engine)
            budgets = BudgetGuard(
                engine,
                shares=config.budget_shares,
                settle_lag_s=config.budget_settle_lag_s,
                tick_s=config.budget_refresh_s,
            )
            rates = RateCard(engine, s3_endpoint_url=config.s3_endpoint_url)
            try:
                await anyio.to_thread.run_sync(keyring.refresh)
                await anyio.to_thread.run_sync(budgets.refresh)
                await anyio.to_thread.run_sync(rates.refresh)
            except Exception:  # the refreshers keep trying; until then keys are refused
                log.exception("loading proxy keys, budgets or prices failed")
        clock = await link.connect() if link is not None else Clock()
        async with httpx.AsyncClient(timeout=timeout, limits=limits, transport=transport) as client:
            # Completions go through our own HTTP/1.1 client; a test's fake transport
            # serves them through httpx instead.
            upstream: Upstream = (
                HttpxUpstream(client)
                if transport is not None
                else Http11Upstream(
                    connect_timeout_s=config.connect_timeout_s,
                    read_timeout_s=config.read_timeout_s,
                )
            )
            state = ProxyState(config=config, client=client, metrics=metrics, sink=sink,
                               clock=clock, upstream=upstream, meter_link=link,
                               replicas=replica_states(config, clock), keyring=keyring,
                               budgets=budgets, rates=rates)  # fmt: skip
            app.state.proxy = state
            tasks = [asyncio.create_task(_tick_forever(state))]
            if link is None:
                tasks.append(asyncio.create_task(_check_counters_forever(state)))
            if link is None and any(replica.iterations is not None for replica in state.replicas):
                tasks.append(asyncio.create_task(_drain_iterations_forever(state)))
            if keyring is not None:
                tasks.append(
                    asyncio.create_task(
                        _refresh_forever(keyring.refresh, config.key_refresh_s, "proxy keys")
                    )
                )
            if budgets is not None:
                tasks.append(
                    asyncio.create_task(
                        _refresh_forever(
                            budgets.refresh, config.budget_refresh_s, "budgets", on_ticks=True
                        )
                    )
                )
            if rates is not None:
                tasks.append(
                    asyncio.create_task(
                        _refresh_forever(rates.refresh, config.budget_refresh_s, "prices")
                    )
                )
            try:
                yield
            finally:
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                await upstream.aclose()
                if link is not None:
                    for replica in state.replicas:  # still open at shutdown: end them
                        for request in list(replica.live.values()):
                            if request is not None:
                                state.close_request(request)
                    await link.aclose()
                else:
                    for replica in state.replicas:
                        state.close_window(replica, reopen=False)
                if sink is not None:
                    await anyio.to_thread.run_sync(sink.close)
                if engine is not None:
                    engine.dispose()

    app = ProxyApp(title="specledger proxy", lifespan=lifespan, docs_url=None, redoc_url=None)

    def state_of(request: Request) -> ProxyState:
        proxy: ProxyState = request.app.state.proxy
        return proxy

    # ProxyApp serves these before routing; the routes document them (and serve them
    # should a request reach the router).
    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        """OpenAI completions, forwarded to a replica and metered."""
        return _Forwarded(state_of(request), Endpoint.completions)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """OpenAI chat completions, forwarded to a replica and metered."""
        return _Forwarded(state_of(request), Endpoint.chat_completions)

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        """The models the replicas serve (merged)."""
        return await _models(state_of(request), request)

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        """200 when at least one replica answers its health check, else 503."""
        return await _healthz(state_of(request))

    @app.get("/metrics")
    async def prometheus(request: Request) -> Response:
        """Prometheus metrics of the proxy."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


def open_sink(config: ProxyConfig, engine: Engine | None) -> UsageSink:
    """The usage sink the config asks for (not started)."""
    store = (
        DatasetStore.at(config.store_uri, s3_endpoint_url=config.s3_endpoint_url)
        if config.store_uri
        else None
    )
    return UsageSink(
        engine=engine,
        jsonl_path=config.jsonl_path,
        store=store,
        spill_path=config.spill_path,
        spool_dir=config.spool_dir,
        batch_size=config.sink_batch_size,
        flush_interval_s=config.sink_flush_interval_s,
    )


def replica_states(config: ProxyConfig, clock: Clock) -> list[ReplicaState]:
    """The replicas, each with a meter whose window opens now."""
    start_ns = clock.now_us_ns()
    return [
        ReplicaState(
            spec=spec,
            meter=ReplicaMeter(gpus=spec.gpus, start_ns=start_ns),
            iterations=_iteration_meter(config, spec, start_ns),
        )
        for spec in config.replicas
    ]


_COMPLETIONS = {
    "/v1/completions": Endpoint.completions,
    "/v1/chat/completions": Endpoint.chat_completions,
}


class _Forwarded(Response):
    """A completion request, served by :func:`forward` as an ASGI app."""

    def __init__(self, state: ProxyState, endpoint: Endpoint) -> None:
        super().__init__()
        self.proxy = state
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await forward(self.proxy, scope, receive, send, self.endpoint)


class ProxyApp(FastAPI):
    """The proxy's FastAPI app, whose completion endpoints are served as raw ASGI: a
    streamed answer goes from the upstream socket to the client's with no routing,
    middleware or response classes in between (one ``send`` per read)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            endpoint = _COMPLETIONS.get(scope["path"])
            if endpoint is not None:
                await forward(self.state.proxy, scope, receive, send, endpoint)
                return
        await super().__call__(scope, receive, send)


async def _tick_forever(state: ProxyState) -> None:
    while True:
        await asyncio.sleep(state.config.tick_interval_s)
        try:
            state.tick()
        except Exception:  # a tick must never stop the ticker
            log.exception("metering tick failed")


async def _check_counters_forever(state: ProxyState) -> None:
    while True:
        await asyncio.sleep(state.config.counter_check_s)
        for replica in state.replicas:
            try:
                await check_engine_counters(state, replica)
            except Exception:  # a check must never stop the checker
                log.exception("checking %s's counters failed", replica.spec.replica_name)


def _iteration_meter(
    config: ProxyConfig, spec: ReplicaSpec, start_ns: int
) -> IterationSpecMeter | None:
    """A meter of iteration stats for replicas whose engine reports acceptance only there."""
    if adapter_for(spec.engine).spec_source is not SpecSource.iteration_stats:
        return None
    return IterationSpecMeter(
        drained_at_ns=start_ns, settle_after_ns=int(config.iteration_poll_s * 1e9)
    )


async def _drain_iterations_forever(state: ProxyState) -> None:
    while True:
        await asyncio.sleep(state.config.iteration_poll_s)
        for replica in state.replicas:
            if replica.iterations is None:
                continue
            try:
                await drain_iterations(state, replica)
            except Exception:  # a failed drain must never stop the drainer
                log.exception("draining %s's iteration stats failed", replica.spec.replica_name)


async def drain_iterations(state: ProxyState, replica: ReplicaState) -> None:
    """Read a TensorRT-LLM replica's queued iteration stats, split them over the requests
    in flight while they ran, and write the records they complete."""
    assert replica.iterations is not None
    path = adapter_for(replica.spec.engine).metrics_path
    records = await drain_iteration_stats(replica.spec.base_url, state.client, path=path)
    replica.iterations.drain(records, at_ns=state.clock.now_ns())
    state.release_awaiting(replica)


async def check_engine_counters(state: ProxyState, replica: ReplicaState) -> None:
    """Scrape one replica's spec-decode counters and compare them with the metered sums
    (:class:`~serving.proxy.vllm_metrics.EngineCounterCheck`); a drift is logged and shown
    on ``/metrics`` and ``/healthz``. A Triton replica's metrics are parsed and kept
    (they carry no acceptance to compare); TensorRT-LLM's are drained elsewhere."""
    kind = replica.spec.engine
    if kind == EngineKind.triton:
        path = adapter_for(kind).metrics_path
        try:
            replica.engine_metrics = await scrape_triton_metrics(
                replica.spec.base_url, state.client, path=path
            )
        except httpx.HTTPError:
            state.metrics.counter_check(replica.spec, "unreachable")
        return
    if kind != EngineKind.vllm:
        return
    before = (replica.in_flight, replica.finished)
    try:
        engine = await scrape_spec_decode_counters(replica.spec.base_url, state.client)
    except httpx.HTTPError:
        state.metrics.counter_check(replica.spec, "unreachable")
        return
    quiet = before == (0, replica.finished) and replica.in_flight == 0
    had_baseline = replica.counters.baseline is not None
    drift = replica.counters.observe(engine, quiet=quiet)
    if drift is None:
        state.metrics.counter_check(replica.spec, "busy" if not quiet else "baseline")
        return
    replica.counters_checked_at = state.clock.at(state.clock.now_ns())
    off = {counter: value for counter, value in drift.items() if value}
    state.metrics.counter_check(replica.spec, "drift" if off else "match", drift)
    if off and had_baseline:
        log.warning(
            "replica %s: vLLM's spec-decode counters grew by %s more than the metered "
            "requests (unmetered traffic, or records that lost their figures)",
            replica.spec.replica_name,
            off,
        )


async def _refresh_forever(
    refresh: Callable[[], object], every_s: float, what: str, *, on_ticks: bool = False
) -> None:
    """Run ``refresh`` every ``every_s``; ``on_ticks``: at the start of each wall-clock tick
    (a multiple of ``every_s``), so every proxy process refreshes at the same instants."""
    while True:
        await asyncio.sleep(every_s - time.time() % every_s if on_ticks else every_s)
        try:
            await anyio.to_thread.run_sync(refresh)
        except Exception:  # a database hiccup must not stop the checks; the old state stands
            log.exception("reloading %s failed", what)


async def _models(state: ProxyState, request: Request) -> Response:
    try:
        grant = (await attribution_of(state, request.headers)).grant
    except AttributionRefused as exc:
        state.metrics.rejected(exc.code)
        return JSONResponse(error_body(exc.code, exc.message), status_code=exc.status)
    headers = forward_headers(request.headers)
    replicas = [r for r in state.replicas if grant is None or grant.may_use(r.spec.deployment)]

    async def fetch(replica: ReplicaState) -> list[dict[str, Any]] | None:
        try:
            response = await state.client.get(replica.spec.base_url + "/v1/models", headers=headers)
            response.raise_for_status()
            data = response.json().get("data")
            return data if isinstance(data, list) else []
        except (httpx.HTTPError, ValueError, AttributeError):
            return None

    answers = await asyncio.gather(*(fetch(r) for r in replicas))
    if answers and all(answer is None for answer in answers):
        return JSONResponse(
            error_body("upstream_unavailable", "no model server answered"), status_code=503
        )
    seen: dict[str, dict[str, Any]] = {}
    for answer in answers:
        for item in answer or []:
            seen.setdefault(str(item.get("id")), item)
    return JSONResponse({"object": "list", "data": list(seen.values())})


async def _healthz(state: ProxyState) -> JSONResponse:
    async def healthy(replica: ReplicaState) -> bool:
        try:
            path = adapter_for(replica.spec.engine).health_path
            response = await state.client.get(replica.spec.base_url + path, timeout=2.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    results = await asyncio.gather(*(healthy(r) for r in state.replicas))
    replicas = [
        {
            "url": r.spec.base_url,
            "deployment": r.spec.deployment,
            "replica": r.spec.replica_name,
            "healthy": ok,
            "in_flight": r.in_flight,
            "engine_counter_drift": r.counters.drift,
            "engine_counters_checked_at": None
            if r.counters_checked_at is None
            else r.counters_checked_at.isoformat(),
        }
        for r, ok in zip(state.replicas, results, strict=True)
    ]
    status = "ok" if all(results) else "degraded" if any(results) else "down"
    body: dict[str, Any] = {"status": status, "replicas": replicas}
    if state.sink is not None:
        sink = state.sink.stats
        body["usage_sink"] = {
            "submitted": sink.submitted,
            "processed": sink.processed,
            "db_failures": sink.db_failures,
            "spilled": sink.spilled,
            "spooled": state.sink.backlog.depth,
            "oldest_spooled_age_s": round(state.sink.backlog.oldest_age_s(), 3),
            "replayed": sink.replayed,
        }
    else:  # the meter service writes the records
        body["meter_service"] = state.config.meter_url
    return JSONResponse(body, status_code=200 if any(results) else 503)
