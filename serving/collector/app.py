"""``specledger collect``: an OTLP/HTTP trace receiver that meters vLLM without a proxy.

vLLM started with ``--otlp-traces-endpoint http://HOST:PORT/v1/traces`` (and
``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``) posts a span per finished request.
The collector reads them (:mod:`serving.collector.spans`), rebuilds each replica's timeline
(:mod:`serving.collector.timeline`) and writes the same usage and idle records as the proxy,
through the proxy's own :class:`~serving.proxy.sink.UsageSink`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from app.db import make_engine
from app.domain.attribution import ProxyGrant
from serving.collector.attribution import attribute_span
from serving.collector.spans import SpanError, parse_export
from serving.collector.timeline import ReplicaInfo, ReplicaTimeline
from serving.proxy.keyring import KeyRing
from serving.proxy.sink import UsageSink

__all__ = ["CollectorConfig", "CollectorState", "create_collector_app"]

log = logging.getLogger(__name__)

PROTOBUF = "application/x-protobuf"


@dataclass(frozen=True, slots=True)
class CollectorConfig:
    """What the collector meters and where its records go."""

    replicas: Mapping[str, ReplicaInfo] = field(default_factory=dict)
    """Replica identity (the ``replica_keys`` resource attribute values joined by ``/``)
    -> what its records say; an identity not listed is its own deployment on
    ``default_gpus`` GPUs, unless ``strict_replicas``."""
    replica_keys: tuple[str, ...] = ("service.name",)
    default_gpus: int = 1
    strict_replicas: bool = False
    database_url: str | None = None
    jsonl_path: Path | None = None
    spill_path: Path | None = None
    spool_dir: Path | None = None
    require_key: bool = False
    """Refuse exports that present no proxy key (needs the database)."""
    trust_callers: bool = False
    """Take an anonymous caller's team from its trace context (see
    :mod:`serving.collector.attribution`)."""
    lateness_s: float = 60.0
    """Longest request plus export delay: steps older than now minus this are final."""
    idle_window_s: float = 300.0
    tick_interval_s: float = 1.0
    max_body_bytes: int = 32 * 1024 * 1024
    key_refresh_s: float = 0.5


@dataclass(slots=True)
class CollectorState:
    config: CollectorConfig
    sink: UsageSink
    keyring: KeyRing | None
    timelines: dict[str, ReplicaTimeline] = field(default_factory=dict)
    exports: int = 0
    refused_exports: int = 0
    other_spans: int = 0
    overruled_attributions: int = 0

    def timeline(self, identity: str) -> ReplicaTimeline:
        timeline = self.timelines.get(identity)
        if timeline is None:
            info = self.config.replicas.get(identity) or ReplicaInfo(
                deployment=identity, replica=identity, gpus=self.config.default_gpus
            )
            timeline = ReplicaTimeline(
                info=info,
                lateness_ns=round(self.config.lateness_s * 1e9),
                idle_window_ns=round(self.config.idle_window_s * 1e9),
            )
            self.timelines[identity] = timeline
        return timeline

    def tick(self, *, now_ns: int) -> None:
        for timeline in self.timelines.values():
            for record in timeline.advance(now_ns=now_ns):
                self.sink.submit(record)

    def close(self) -> None:
        for timeline in self.timelines.values():
            for record in timeline.close():
                self.sink.submit(record)


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def presented_secret(headers: Mapping[str, str]) -> str | None:
    """``Authorization: Bearer <key>`` or ``X-API-Key`` (what an OTLP exporter sends from
    ``OTEL_EXPORTER_OTLP_TRACES_HEADERS``)."""
    scheme, _, credential = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and credential.strip():
        return credential.strip()
    return headers.get("x-api-key", "").strip() or None


async def _grant(state: CollectorState, headers: Mapping[str, str]) -> ProxyGrant | None:
    secret = presented_secret(headers)
    if secret is None:
        if state.config.require_key:
            raise Refused(401, "missing key: send `Authorization: Bearer <proxy key>`")
        return None
    if state.keyring is None:
        raise Refused(401, "this collector checks no keys (it runs without a database)")
    grant = state.keyring.lookup(secret)
    if grant is None:  # perhaps created since the last poll
        await anyio.to_thread.run_sync(state.keyring.refresh)
        grant = state.keyring.lookup(secret)
    if grant is None:
        raise Refused(401, "invalid or revoked key")
    return grant


async def _body(request: Request, limit: int) -> bytes:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != PROTOBUF:
        raise Refused(
            415,
            f"Content-Type {content_type or '(none)'!r}: this collector reads OTLP/HTTP "
            f"protobuf ({PROTOBUF}); set OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf",
        )
    body = await request.body()
    if len(body) > limit:
        raise Refused(413, f"body: {len(body)} bytes, more than {limit}")
    encoding = request.headers.get("content-encoding", "").strip().lower()
    if encoding == "gzip":
        try:
            with gzip.GzipFile(fileobj=io.BytesIO(body)) as stream:
                body = stream.read(limit + 1)
        except (OSError, EOFError) as exc:
            raise Refused(400, f"body: not valid gzip ({exc})") from None
        if len(body) > limit:
            raise Refused(413, f"body: more than {limit} bytes once decompressed")
    elif encoding not in ("", "identity"):
        raise Refused(415, f"Content-Encoding {encoding!r}: only gzip is read")
    return body


async def ingest(state: CollectorState, request: Request) -> int:
    """Read one export into the timelines; the number of request spans queued.

    Raises:
        Refused: With nothing queued, for a bad key, body or span.
    """
    grant = await _grant(state, request.headers)
    body = await _body(request, state.config.max_body_bytes)
    try:
        parsed = parse_export(body, replica_keys=state.config.replica_keys)
    except SpanError as exc:
        raise Refused(400, str(exc)) from None
    if state.config.strict_replicas:
        for span in parsed.spans:
            if span.replica not in state.config.replicas:
                raise Refused(400, f"resource: unknown replica {span.replica!r}")
    queued = 0
    for span in parsed.spans:
        attribution, overruled = attribute_span(
            span.caller,
            trace_id=span.trace_id,
            grant=grant,
            trust_callers=state.config.trust_callers,
        )
        state.overruled_attributions += overruled
        queued += state.timeline(span.replica).add(span, attribution)
    state.other_spans += parsed.other_spans
    state.exports += 1
    return queued


def create_collector_app(config: CollectorConfig) -> FastAPI:
    """Build the collector app; its lifespan opens the sink (and the key ring with a
    database) and on shutdown meters everything queued and writes it out."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(config.database_url) if config.database_url else None
        if config.require_key and engine is None:
            raise RuntimeError("require_key needs a database to check keys against")
        sink = UsageSink(
            engine=engine,
            jsonl_path=config.jsonl_path,
            spill_path=config.spill_path,
            spool_dir=config.spool_dir,
        )
        sink.start()
        keyring = KeyRing(engine) if engine is not None else None
        if keyring is not None:
            await anyio.to_thread.run_sync(keyring.refresh)
        state = CollectorState(config=config, sink=sink, keyring=keyring)
        app.state.collector = state
        tasks = [asyncio.create_task(_tick_forever(state))]
        if keyring is not None:
            tasks.append(asyncio.create_task(_refresh_forever(keyring, config.key_refresh_s)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            state.close()
            await anyio.to_thread.run_sync(sink.close)
            if engine is not None:
                engine.dispose()

    app = FastAPI(title="specledger collect", lifespan=lifespan, docs_url=None, redoc_url=None)

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:
        """OTLP/HTTP trace export (protobuf): vLLM's request spans, metered."""
        state: CollectorState = request.app.state.collector
        try:
            await ingest(state, request)
        except Refused as exc:
            state.refused_exports += 1
            log.warning("refused a trace export: %s", exc.message)
            return JSONResponse({"error": {"message": exc.message}}, status_code=exc.status)
        return Response(ExportTraceServiceResponse().SerializeToString(), media_type=PROTOBUF)

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        """What the collector has metered so far, per replica."""
        state: CollectorState = request.app.state.collector
        return JSONResponse(
            {
                "exports": state.exports,
                "refused_exports": state.refused_exports,
                "other_spans": state.other_spans,
                "overruled_attributions": state.overruled_attributions,
                "replicas": {
                    identity: {
                        "deployment": t.info.deployment,
                        "replica": t.info.replica,
                        **asdict(t.stats),
                    }
                    for identity, t in state.timelines.items()
                },
            }
        )

    return app


async def _tick_forever(state: CollectorState) -> None:
    while True:
        await asyncio.sleep(state.config.tick_interval_s)
        try:
            state.tick(now_ns=time.time_ns())
        except Exception:
            log.exception("metering tick failed")


async def _refresh_forever(keyring: KeyRing, every_s: float) -> None:
    while True:
        await asyncio.sleep(every_s)
        try:
            await anyio.to_thread.run_sync(keyring.refresh)
        except Exception:
            log.exception("reloading keys failed")
