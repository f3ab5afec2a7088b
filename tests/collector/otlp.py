"""OTLP trace exports shaped like vLLM 0.32's, built in the tests (see serving.collector.spans)."""

from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

T0 = 1_780_000_000_000_000_000
"""A Unix-nanosecond instant in 2026."""


def value(v: Any) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    return AnyValue(string_value=str(v))


def attributes(items: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=value(v)) for k, v in items.items()]


def request_span(
    n: int,
    *,
    start_ns: int = T0,
    ttft_s: float | None = 0.05,
    e2e_s: float = 0.5,
    prompt: int = 10,
    completion: int = 20,
    trace_state: str = "",
    extra: dict[str, Any] | None = None,
    drop: tuple[str, ...] = (),
) -> Span:
    """A span as vLLM's ``do_tracing`` writes it (name, kind SERVER, attributes)."""
    attrs: dict[str, Any] = {
        "gen_ai.latency.e2e": e2e_s,
        "gen_ai.latency.time_in_queue": 0.001,
        "gen_ai.usage.prompt_tokens": prompt,
        "gen_ai.usage.completion_tokens": completion,
        "gen_ai.latency.time_in_model_prefill": 0.01,
        "gen_ai.latency.time_in_model_decode": 0.3,
        "gen_ai.latency.time_in_model_inference": 0.31,
        "gen_ai.request.id": f"cmpl-{n}",
        "gen_ai.request.max_tokens": 32,
    }
    if ttft_s is not None:
        attrs["gen_ai.latency.time_to_first_token"] = ttft_s
    attrs.update(extra or {})
    for name in drop:
        attrs.pop(name, None)
    return Span(
        trace_id=n.to_bytes(16, "big") or b"\x00" * 16,
        span_id=(n + 1).to_bytes(8, "big"),
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + round(e2e_s * 1e9) + 1000,
        trace_state=trace_state,
        attributes=attributes(attrs),
    )


def export(*spans: Span, service: str = "replica-a", **resource: str) -> bytes:
    """An ``ExportTraceServiceRequest`` of ``spans`` from one resource."""
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=attributes({"service.name": service, **resource})),
                scope_spans=[ScopeSpans(spans=list(spans))],
            )
        ]
    ).SerializeToString()
