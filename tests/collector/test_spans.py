import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from serving.collector.spans import CallerContext, MeterStep, Phase, SpanError, parse_export
from tests.collector.otlp import T0, export, request_span

KEYS = ("service.name",)


def test_parse_export_reads_vllms_request_span():
    body = export(request_span(7, ttft_s=0.25, e2e_s=1.5, prompt=11, completion=9))
    (span,) = parse_export(body, replica_keys=KEYS).spans
    assert span.replica == "replica-a"
    assert span.request_id == "cmpl-7"
    assert span.trace_id == f"{7:032x}"
    assert span.key == f"{7:032x}{8:016x}"
    assert (span.arrived_ns, span.first_token_ns, span.finished_ns) == (
        T0,
        T0 + 250_000_000,
        T0 + 1_500_000_000,
    )
    assert (span.prompt_tokens, span.completion_tokens) == (11, 9)
    assert (span.queue_ns, span.prefill_ns, span.decode_ns) == (1_000_000, 10_000_000, 300_000_000)


def test_parse_export_without_e2e_ends_at_the_span_end():
    body = export(request_span(1, e2e_s=0.5, drop=("gen_ai.latency.e2e",)))
    (span,) = parse_export(body, replica_keys=KEYS).spans
    assert span.finished_ns == T0 + 500_000_000 + 1000


def test_parse_export_joins_replica_keys_and_marks_missing_ones():
    body = export(request_span(1), service="vllm", **{"k8s.pod.name": "pod-3"})
    parsed = parse_export(body, replica_keys=("service.name", "k8s.pod.name", "host.name"))
    assert parsed.spans[0].replica == "vllm/pod-3/-"


def test_parse_export_counts_other_spans_without_reading_them():
    other = Span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8, name="load_weights")
    parsed = parse_export(export(other, request_span(1)), replica_keys=KEYS)
    assert (len(parsed.spans), parsed.other_spans) == (1, 1)


def test_caller_context_from_tracestate_and_attributes():
    state = "vendor=x,specledger=team:search;session:a%2Cb;cost_center:cc-1"
    (span,) = parse_export(export(request_span(1, trace_state=state)), replica_keys=KEYS).spans
    assert span.caller == CallerContext(team="search", session="a,b", cost_center="cc-1")
    body = export(request_span(1, trace_state=state, extra={"specledger.team": "ads"}))
    (span,) = parse_export(body, replica_keys=KEYS).spans
    assert span.caller.team == "ads"


def test_caller_context_ignores_values_too_long_to_store():
    state = "specledger=team:" + "t" * 129 + ";session:ok"
    (span,) = parse_export(export(request_span(1, trace_state=state)), replica_keys=KEYS).spans
    assert span.caller == CallerContext(team=None, session="ok")


def test_meter_steps_put_the_prompt_at_the_first_token():
    (span,) = parse_export(
        export(request_span(1, prompt=10, completion=20)), replica_keys=KEYS
    ).spans
    assert span.meter_steps() == (
        MeterStep(T0, Phase.start),
        MeterStep(T0 + 50_000_000, Phase.chunk, 11),
        MeterStep(T0 + 500_000_000, Phase.finish, 19),
    )
    (span,) = parse_export(export(request_span(1, ttft_s=None)), replica_keys=KEYS).spans
    assert span.meter_steps()[-1] == MeterStep(T0 + 500_000_000, Phase.finish, 30)


@pytest.mark.parametrize(
    ("span", "message"),
    [
        (
            request_span(1, extra={"gen_ai.usage.prompt_tokens": "ten"}),
            'spans[0].attributes["gen_ai.usage.prompt_tokens"]: expected a non-negative '
            "int_value, got string_value 'ten'",
        ),
        (
            request_span(1, drop=("gen_ai.usage.completion_tokens",)),
            'spans[0].attributes["gen_ai.usage.completion_tokens"]: expected a non-negative '
            "int_value, got nothing",
        ),
        (
            request_span(1, extra={"gen_ai.usage.completion_tokens": -1}),
            '"gen_ai.usage.completion_tokens"]: expected a non-negative int_value, got int_value -1',
        ),
        (
            request_span(1, extra={"gen_ai.latency.e2e": float("nan")}),
            'spans[0].attributes["gen_ai.latency.e2e"]: expected seconds',
        ),
        (
            request_span(1, extra={"gen_ai.latency.time_to_first_token": "soon"}),
            '"gen_ai.latency.time_to_first_token"]: expected seconds as a non-negative '
            "double_value, got string_value 'soon'",
        ),
        (request_span(1, start_ns=0), "spans[0].start_time_unix_nano: missing"),
    ],
)
def test_parse_export_names_the_bad_field(span, message):
    with pytest.raises(SpanError) as caught:
        parse_export(export(request_span(9), span), replica_keys=KEYS)
    assert "resource_spans[0].scope_spans[0].spans[1]" in str(caught.value)
    assert message.replace("spans[0]", "spans[1]") in str(caught.value)


def test_parse_export_refuses_what_is_not_protobuf():
    with pytest.raises(SpanError, match="body: not an OTLP ExportTraceServiceRequest"):
        parse_export(b'{"resourceSpans": []}', replica_keys=KEYS)


def test_parse_export_refuses_an_end_before_the_start():
    span = request_span(1)
    span.end_time_unix_nano = span.start_time_unix_nano - 1
    with pytest.raises(SpanError, match=r"spans\[0\]\.end_time_unix_nano: before"):
        parse_export(export(span), replica_keys=KEYS)
