"""The proxy's byte-level stream paths agree with the JSON paths they stand in for:
:func:`scan_usage` and the cut of the usage member against :func:`parse_event`,
:meth:`StreamTally.observe` and :func:`without_usage`; :class:`SseSplitter`'s split against
the event-end pattern; :class:`StreamRelay` against the event-by-event relay it replaced."""

import json
import re
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from serving.proxy.wire import (
    SseSplitter,
    StreamRelay,
    StreamTally,
    parse_event,
    scan_usage,
    without_usage,
)

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"
_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")

_keys = st.sampled_from(["usage", "choices", "error", "id", "delta", "x", "usage\\", "u"])
_text = st.lists(
    st.sampled_from([*'ab "{}[]:,\\\n\r', '"usage":', '"choices":[{', "é", "\x01"]), max_size=8
).map("".join)
_scalars = st.none() | st.booleans() | st.integers(-3, 10**6) | _text
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys | _text, inner, max_size=3),
    max_leaves=8,
)
_usage = st.fixed_dictionaries(
    {"prompt_tokens": st.integers(0, 5000), "total_tokens": st.integers(0, 9000)},
    optional={
        "completion_tokens": st.integers(-2, 4000),
        "completion_tokens_details": st.none()
        | st.fixed_dictionaries({"reasoning_tokens": st.integers(0, 9)}),
        "prompt_tokens_details": st.none()
        | st.fixed_dictionaries({"cached_tokens": st.integers(0, 99)}),
    },
)


@st.composite
def chunks(draw: st.DrawFn) -> dict[str, Any]:
    """Payloads shaped like vLLM's chunks, and many that are not."""
    payload: dict[str, Any] = draw(st.dictionaries(_keys | _text, _values, max_size=4))
    if draw(st.booleans()):
        payload["choices"] = draw(
            st.lists(st.dictionaries(_keys, _values, max_size=3), max_size=2)
            | st.just([{"index": 0, "delta": {"content": "hi"}}])
        )
    if draw(st.booleans()):
        payload.pop("usage", None)
        payload["usage"] = draw(_usage | _values)  # last, as vLLM puts it
    return payload


def _encode(payload: dict[str, Any], *, compact: bool, ascii_only: bool) -> bytes:
    separators = (",", ":") if compact else (", ", ": ")
    text = json.dumps(payload, ensure_ascii=ascii_only, separators=separators)
    return b"data: " + text.encode() + b"\n\n"


@settings(max_examples=600)
@given(chunks(), st.booleans(), st.booleans())
def test_the_usage_scan_agrees_with_decoding_the_chunk(payload, compact, ascii_only):
    event = _encode(payload, compact=compact, ascii_only=ascii_only)
    scanned = scan_usage(event)
    parsed = parse_event(event)
    if scanned is None:
        return  # the relay decodes it whole
    assert parsed.payload is not None
    assert "usage" in parsed.payload
    assert not parsed.usage_only
    prompt, completion, cached, cut = scanned
    fast, slow = StreamTally(), StreamTally()
    assert fast.observe_usage(prompt, completion, cached) == slow.observe(parsed)
    assert fast == slow
    stripped = event[:cut] + b"}\n\n"
    assert json.loads(stripped[6:]) == {k: v for k, v in payload.items() if k != "usage"}
    if compact and not ascii_only:  # vLLM's own form: the JSON path gives the same bytes
        assert stripped == without_usage(parsed)


def test_the_scan_reads_vllm_chunks_and_leaves_the_rest():
    head = b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    choice = b'"choices":[{"index":0,"delta":{"content":" w"},"finish_reason":null}]'
    usage = b'"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3}'
    cached = (
        b'"usage":{"prompt_tokens":7,"total_tokens":10,"completion_tokens":3,'
        b'"prompt_tokens_details":{"cached_tokens":4}}'
    )
    assert scan_usage(head + choice + b"," + usage + b"}\n\n") == (7, 3, 0, len(head + choice))
    assert scan_usage(head + choice + b"," + cached + b"}\n\n") == (7, 3, 4, len(head + choice))
    details = usage[:-1] + b',"completion_tokens_details":null}'  # vLLM 0.32's chat chunks
    assert scan_usage(head + choice + b"," + details + b"}\n\n") == (7, 3, 0, len(head + choice))
    # usage-only final chunk, usage null, nested usage, no usage: decoded whole
    assert scan_usage(head + b'"choices":[],' + usage + b"}\n\n") is None
    assert scan_usage(head + choice + b',"usage":null}\n\n') is None
    assert scan_usage(head + choice + b',"x":{' + usage + b"}}\n\n") is None
    assert scan_usage(head + choice + b"}\n\n") is None
    assert scan_usage(b"data: [DONE]\n\n") is None


def _split_by_pattern(buffer: bytes) -> tuple[list[bytes], bytes]:
    events, start = [], 0
    for match in _EVENT_END.finditer(buffer):
        events.append(buffer[start : match.end()])
        start = match.end()
    return events, buffer[start:]


@given(st.lists(st.binary(max_size=12) | st.sampled_from([b"\n", b"\n\n", b"\r", b"data: x"])))
def test_the_splitter_cuts_like_the_event_end_pattern(pieces):
    splitter, events = SseSplitter(), []
    for piece in pieces:
        events += splitter.feed(piece)
    expected, rest = _split_by_pattern(b"".join(pieces))
    assert events == expected
    assert splitter.pending == rest


def _relay_event_by_event(raw_events: list[bytes], wants_usage: bool, wants_every: bool):
    """What the proxy did before the byte paths: decode every event."""
    tally, out, tokens = StreamTally(), [], 0
    for raw in raw_events:
        event = parse_event(raw)
        tokens += tally.observe(event)
        if event.payload is None or "usage" not in event.payload:
            out.append(raw)
        elif event.usage_only:
            if wants_usage:
                out.append(raw)
        else:
            out.append(raw if wants_every else without_usage(event))
    return b"".join(out), tokens, tally


@settings(max_examples=200)
@given(
    st.lists(chunks(), max_size=6),
    st.booleans(),
    st.booleans(),
    st.lists(st.integers(1, 400), max_size=4),
)
def test_the_relay_passes_on_and_meters_what_decoding_every_event_did(
    payloads, wants_usage, wants_every, cuts
):
    stream = b"".join(_encode(p, compact=True, ascii_only=False) for p in payloads) + (
        b"data: [DONE]\n\n"
    )
    relay = StreamRelay(wants_usage=wants_usage, wants_every=wants_every)
    out, tokens, start = [], 0, 0
    for cut in [*sorted(cuts), len(stream)]:
        data, carried = relay.feed(stream[start:cut])
        out.append(data)
        tokens += carried
        start = max(start, cut)
    events, _ = _split_by_pattern(stream)
    expected_out, expected_tokens, tally = _relay_event_by_event(events, wants_usage, wants_every)
    assert tokens == expected_tokens
    assert relay.tally == tally
    assert json_events(b"".join(out)) == json_events(expected_out)


def json_events(raw: bytes) -> list[Any]:
    events = []
    for event in _split_by_pattern(raw)[0]:
        parsed = parse_event(event)
        events.append(parsed.payload if parsed.payload is not None else event)
    return events


def test_a_recorded_vllm_stream_relays_as_before():
    for name in ("stream_chat.txt", "stream_chat_plain.txt", "stream_completions.txt"):
        stream = (FIXTURES / name).read_bytes()
        for wants_usage, wants_every in ((False, False), (True, False), (True, True)):
            relay = StreamRelay(wants_usage=wants_usage, wants_every=wants_every)
            out, tokens = relay.feed(stream)
            events, _ = _split_by_pattern(stream)
            expected_out, expected_tokens, _ = _relay_event_by_event(
                events, wants_usage, wants_every
            )
            assert (out, tokens) == (expected_out, expected_tokens)


def test_the_generated_chunks_reach_the_scan():
    """The property above is not vacuous: vLLM-shaped chunks take the byte path."""
    found = []

    @settings(max_examples=300)
    @given(chunks())
    def probe(payload):
        found.append(scan_usage(_encode(payload, compact=True, ascii_only=False)) is not None)

    probe()
    assert sum(found) >= 10
