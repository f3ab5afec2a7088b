"""vLLM's request spans, read from an OTLP ``ExportTraceServiceRequest`` (pure, no I/O).

vLLM 0.32 started with ``--otlp-traces-endpoint`` emits one span per finished request
(``vllm/v1/engine/output_processor.py``, ``do_tracing``): name ``llm_request``, kind SERVER,
start = the request's arrival (``arrival_time``), end = when the span was written (just after
the last token), and the attributes of ``vllm.tracing.utils.SpanAttributes``:

* ``gen_ai.request.id`` (the OpenAI request id, or the caller's ``X-Request-Id``),
* ``gen_ai.usage.prompt_tokens``, ``gen_ai.usage.completion_tokens`` (integers),
* ``gen_ai.latency.time_in_queue``, ``.time_to_first_token``, ``.e2e``,
  ``.time_in_model_prefill``, ``.time_in_model_decode``, ``.time_in_model_inference``
  (float seconds),
* ``gen_ai.request.max_tokens`` / ``.temperature`` / ``.top_p`` / ``.n`` when set.

It has no model name, no endpoint and no speculative-decoding counts. It is a child of the
caller's W3C trace context: vLLM forwards only ``traceparent`` and ``tracestate`` (never
``baggage``), and the OpenTelemetry SDK copies the parent's ``tracestate`` into the span's
``trace_state``. So a caller's attribution reaches the collector as a ``tracestate`` entry
``specledger=team:<team>;session:<id>;cost_center:<cc>`` (values percent-encoded), or as
span attributes ``specledger.team`` / ``specledger.session`` / ``specledger.cost_center``
where the platform's own instrumentation (a baggage span processor, say) writes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from urllib.parse import unquote

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from app.domain.usage import SESSION_ID_MAX

__all__ = [
    "REQUEST_SPAN_NAME",
    "TRACESTATE_KEY",
    "CallerContext",
    "MeterStep",
    "Phase",
    "RequestSpan",
    "SpanError",
    "parse_export",
]

REQUEST_SPAN_NAME = "llm_request"
TRACESTATE_KEY = "specledger"
"""The ``tracestate`` list member that carries the caller's attribution."""
ATTRIBUTE_PREFIX = "specledger."

REQUEST_ID = "gen_ai.request.id"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
TIME_IN_QUEUE = "gen_ai.latency.time_in_queue"
TIME_TO_FIRST_TOKEN = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
PREFILL = "gen_ai.latency.time_in_model_prefill"
DECODE = "gen_ai.latency.time_in_model_decode"
RESPONSE_MODEL = "gen_ai.response.model"

_CALLER_FIELDS = ("team", "session", "cost_center")


class SpanError(ValueError):
    """An export that is not valid OTLP, or a request span missing what metering needs;
    the message names the field (``resource_spans[0].scope_spans[0].spans[2]...``)."""


@dataclass(frozen=True, slots=True)
class CallerContext:
    """What the caller said about itself in its trace context (not verified: see README)."""

    team: str | None = None
    session: str | None = None
    cost_center: str | None = None


class Phase(IntEnum):
    """Order of a request's meter steps at one instant."""

    start = 0
    chunk = 1
    finish = 2


@dataclass(frozen=True, slots=True)
class MeterStep:
    """One event of a request for a :class:`~app.domain.gpu_seconds.ReplicaMeter`."""

    at_ns: int
    phase: Phase
    tokens: int = 0


@dataclass(frozen=True, slots=True)
class RequestSpan:
    """One finished request as vLLM traced it; instants are Unix nanoseconds."""

    key: str
    """``trace_id`` + ``span_id`` in hex: unique per span, the same on an OTLP retry."""
    trace_id: str
    replica: str
    """The replica's identity from the resource attributes (see ``parse_export``)."""
    request_id: str | None
    arrived_ns: int
    first_token_ns: int | None
    finished_ns: int
    prompt_tokens: int
    completion_tokens: int
    queue_ns: int | None
    prefill_ns: int | None
    decode_ns: int | None
    model: str | None
    caller: CallerContext

    def meter_steps(self) -> tuple[MeterStep, ...]:
        """The events the proxy's meter would see for this request, were it streamed: start
        at arrival; at the first token, the prompt (prefill) and that token; at the finish,
        the remaining completion tokens. Between them vLLM's span has no finer cut."""
        if self.first_token_ns is None or self.completion_tokens == 0:
            return (
                MeterStep(self.arrived_ns, Phase.start),
                MeterStep(
                    self.finished_ns, Phase.finish, self.prompt_tokens + self.completion_tokens
                ),
            )
        return (
            MeterStep(self.arrived_ns, Phase.start),
            MeterStep(self.first_token_ns, Phase.chunk, self.prompt_tokens + 1),
            MeterStep(self.finished_ns, Phase.finish, self.completion_tokens - 1),
        )


@dataclass(frozen=True, slots=True)
class ParsedExport:
    """The request spans of one export, and how many other spans it held."""

    spans: tuple[RequestSpan, ...]
    other_spans: int


def parse_export(body: bytes, *, replica_keys: Sequence[str]) -> ParsedExport:
    """Read the request spans of an OTLP/HTTP protobuf trace export.

    Args:
        body: The ``ExportTraceServiceRequest`` bytes (POST /v1/traces).
        replica_keys: Resource attributes whose values, joined by ``/``, name the replica
            (e.g. ``service.name``); a missing one reads as ``-``.

    Returns:
        Every ``llm_request`` span (spans without ``gen_ai.usage.prompt_tokens`` and of
        another name are counted, not read).

    Raises:
        SpanError: If the body is not the protobuf message, or a request span lacks or
            mistypes a field metering needs; the message names the field.
    """
    try:
        export = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise SpanError(f"body: not an OTLP ExportTraceServiceRequest protobuf ({exc})") from None
    spans: list[RequestSpan] = []
    other = 0
    for r, resource_spans in enumerate(export.resource_spans):
        resource = _attributes(resource_spans.resource.attributes)
        replica = "/".join(_text(resource.get(key)) or "-" for key in replica_keys)
        for s, scope_spans in enumerate(resource_spans.scope_spans):
            for i, span in enumerate(scope_spans.spans):
                attributes = _attributes(span.attributes)
                if span.name != REQUEST_SPAN_NAME and PROMPT_TOKENS not in attributes:
                    other += 1
                    continue
                where = f"resource_spans[{r}].scope_spans[{s}].spans[{i}]"
                spans.append(_request_span(span, attributes, replica=replica, where=where))
    return ParsedExport(spans=tuple(spans), other_spans=other)


def _request_span(
    span: Span, attributes: Mapping[str, AnyValue], *, replica: str, where: str
) -> RequestSpan:
    trace_id, span_id = span.trace_id, span.span_id
    start_ns, end_ns = span.start_time_unix_nano, span.end_time_unix_nano
    if len(trace_id) != 16 or len(span_id) != 8:
        raise SpanError(f"{where}.trace_id/span_id: expected 16 and 8 bytes")
    if start_ns <= 0:
        raise SpanError(f"{where}.start_time_unix_nano: missing")
    if end_ns < start_ns:
        raise SpanError(f"{where}.end_time_unix_nano: before start_time_unix_nano")
    e2e = _seconds_ns(attributes, E2E, where)
    finished_ns = start_ns + e2e if e2e is not None else end_ns
    ttft = _seconds_ns(attributes, TIME_TO_FIRST_TOKEN, where)
    first_token_ns = None if ttft is None else min(start_ns + ttft, finished_ns)
    return RequestSpan(
        key=trace_id.hex() + span_id.hex(),
        trace_id=trace_id.hex(),
        replica=replica,
        request_id=_text(attributes.get(REQUEST_ID)),
        arrived_ns=start_ns,
        first_token_ns=first_token_ns,
        finished_ns=finished_ns,
        prompt_tokens=_count(attributes, PROMPT_TOKENS, where),
        completion_tokens=_count(attributes, COMPLETION_TOKENS, where),
        queue_ns=_seconds_ns(attributes, TIME_IN_QUEUE, where),
        prefill_ns=_seconds_ns(attributes, PREFILL, where),
        decode_ns=_seconds_ns(attributes, DECODE, where),
        model=_text(attributes.get(RESPONSE_MODEL)),
        caller=caller_context(attributes, span.trace_state),
    )


def caller_context(attributes: Mapping[str, AnyValue], trace_state: str) -> CallerContext:
    """The caller's team, session and cost center: ``specledger.*`` span attributes first,
    then the ``specledger`` member of ``tracestate``. Values that are empty or longer than
    the usage record stores are ignored (the caller's mistake must not lose the metering)."""
    found: dict[str, str | None] = dict.fromkeys(_CALLER_FIELDS)
    for member in _tracestate_members(trace_state):
        for item in member.split(";"):
            name, sep, value = item.partition(":")
            if sep and name.strip() in found:
                found[name.strip()] = unquote(value.strip())
    for name in _CALLER_FIELDS:
        given = _text(attributes.get(ATTRIBUTE_PREFIX + name))
        if given is not None:
            found[name] = given
    clean = {k: v if v and len(v) <= SESSION_ID_MAX else None for k, v in found.items()}
    return CallerContext(
        team=clean["team"], session=clean["session"], cost_center=clean["cost_center"]
    )


def _tracestate_members(trace_state: str) -> Iterator[str]:
    for member in trace_state.split(","):
        key, sep, value = member.strip().partition("=")
        if sep and key == TRACESTATE_KEY:
            yield value


def _attributes(items: Sequence[KeyValue]) -> dict[str, AnyValue]:
    return {item.key: item.value for item in items}


def _text(value: AnyValue | None) -> str | None:
    if value is None or value.WhichOneof("value") != "string_value":
        return None
    return value.string_value or None


def _count(attributes: Mapping[str, AnyValue], name: str, where: str) -> int:
    value = attributes.get(name)
    kind = None if value is None else value.WhichOneof("value")
    if value is None or kind != "int_value" or value.int_value < 0:
        got = "nothing" if value is None else f"{kind} {_shown(value)}"
        raise SpanError(
            f'{where}.attributes["{name}"]: expected a non-negative int_value, got {got}'
        )
    return value.int_value


def _seconds_ns(attributes: Mapping[str, AnyValue], name: str, where: str) -> int | None:
    """A latency attribute (float seconds) in whole nanoseconds; None when absent."""
    value = attributes.get(name)
    if value is None:
        return None
    kind = value.WhichOneof("value")
    if kind == "double_value":
        seconds = value.double_value
    elif kind == "int_value":
        seconds = float(value.int_value)
    else:
        seconds = float("nan")
    if not 0 <= seconds < 10**7:  # also refuses NaN; 10**7 s is ~4 months
        raise SpanError(
            f'{where}.attributes["{name}"]: expected seconds as a non-negative double_value, '
            f"got {kind} {_shown(value)}"
        )
    return round(seconds * 1e9)


def _shown(value: AnyValue) -> str:
    kind = value.WhichOneof("value")
    return repr(getattr(value, kind))[:40] if kind else "(empty)"
