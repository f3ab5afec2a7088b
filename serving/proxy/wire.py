"""What a request through the proxy used, read from vLLM's responses: pure, no I/O.

vLLM (run with ``--enable-per-request-metrics --per-request-spec-decode-metrics summary``)
reports per request, in a non-streamed body or in the usage-only last chunk of a stream::

    "usage": {"prompt_tokens": 39, "completion_tokens": 16, "total_tokens": 55,
              "prompt_tokens_details": {"cached_tokens": 16} | null, ...},
    "metrics": {"time_to_first_token_ms": 5298.7, "generation_time_ms": 754.8,
                "queue_time_ms": 0.05, "mean_itl_ms": 50.3, "tokens_per_second": 2.6,
                "speculative_decoding": {"num_spec_steps": 3, "num_draft_tokens": 12,
                                         "num_accepted_draft_tokens": 12, "num_spec_tokens": 4,
                                         "mean_acceptance_length": 5.0,
                                         "draft_acceptance_rate": 1.0,
                                         "acceptance_histogram": [0, 0, 0, 0, 3]}}

``metrics`` is null for requests with several sequences (``n > 1`` or a list of prompts) and
``speculative_decoding`` is absent without speculation. With
``stream_options.continuous_usage_stats`` every chunk also carries the cumulative ``usage``,
which the proxy asks for so that it knows the tokens each chunk carries (for the GPU-time
meter) and the tokens produced before a client hung up.

This module turns those bodies and server-sent events into :class:`StreamTally` counts; the
proxy builds a :class:`~app.domain.usage.UsageEvent` (the usage record of DESIGN.md) from them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DONE",
    "Endpoint",
    "ParsedEvent",
    "RequestMetrics",
    "SpecDecodeStats",
    "SseSplitter",
    "StreamRelay",
    "StreamTally",
    "TokenUsage",
    "parse_event",
    "parse_response",
    "scan_usage",
]

DONE = b"[DONE]"
"""The data of the event that ends an OpenAI stream."""

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class Endpoint(StrEnum):
    """The OpenAI endpoints the proxy meters."""

    completions = "completions"
    chat_completions = "chat.completions"


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """OpenAI ``usage``: tokens of the prompt (of which ``cached_tokens`` came from the prefix
    cache) and of the completion."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


@dataclass(frozen=True, slots=True)
class SpecDecodeStats:
    """Speculative-decoding counts of one request, or deltas of a server's counters.

    ``num_drafts`` is vLLM's ``num_spec_steps`` (verification steps that had draft tokens);
    ``draft_tokens`` were proposed and ``accepted_tokens`` of them kept.
    """

    num_drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0

    @property
    def rejected_tokens(self) -> int:
        """Draft tokens computed by the target and thrown away."""
        return max(self.draft_tokens - self.accepted_tokens, 0)

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens; None when nothing was drafted."""
        return self.accepted_tokens / self.draft_tokens if self.draft_tokens else None

    def __add__(self, other: SpecDecodeStats) -> SpecDecodeStats:
        return SpecDecodeStats(
            num_drafts=self.num_drafts + other.num_drafts,
            draft_tokens=self.draft_tokens + other.draft_tokens,
            accepted_tokens=self.accepted_tokens + other.accepted_tokens,
        )

    def __sub__(self, other: SpecDecodeStats) -> SpecDecodeStats:
        return SpecDecodeStats(
            num_drafts=self.num_drafts - other.num_drafts,
            draft_tokens=self.draft_tokens - other.draft_tokens,
            accepted_tokens=self.accepted_tokens - other.accepted_tokens,
        )


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """vLLM's per-request ``metrics`` object (milliseconds, measured inside the engine)."""

    time_to_first_token_ms: float | None = None
    generation_time_ms: float | None = None
    queue_time_ms: float | None = None
    mean_itl_ms: float | None = None
    spec: SpecDecodeStats | None = None
    """None when the server runs without speculation."""
    acceptance_histogram: tuple[int, ...] | None = None
    """``speculative_decoding.acceptance_histogram``: entry ``j`` counts the request's
    verification steps that accepted exactly ``j`` drafted tokens (``k + 1`` entries);
    None when absent or malformed."""


@dataclass(frozen=True, slots=True)
class ParsedResponse:
    """Usage and metrics of a complete (non-streamed) response."""

    usage: TokenUsage | None
    metrics: RequestMetrics | None
    error: str | None = None
    """The message of an OpenAI ``{"error": ...}`` body."""


def parse_response(body: Any) -> ParsedResponse:
    """Read ``usage``, ``metrics`` and ``error`` from a decoded response body.

    Args:
        body: The decoded JSON (anything: a non-object gives empty results).

    Returns:
        What the body reports; missing or malformed parts are None.
    """
    if not isinstance(body, Mapping):
        return ParsedResponse(usage=None, metrics=None)
    return ParsedResponse(
        usage=_usage(body.get("usage")),
        metrics=_metrics(body.get("metrics")),
        error=_error_message(body.get("error")),
    )


def _int(value: Any) -> int:
    """A non-negative count, or 0 for anything else (bool is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return max(int(value), 0)


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _usage(value: Any) -> TokenUsage | None:
    if not isinstance(value, Mapping):
        return None
    details = value.get("prompt_tokens_details")
    cached = _int(details.get("cached_tokens")) if isinstance(details, Mapping) else 0
    return TokenUsage(
        prompt_tokens=_int(value.get("prompt_tokens")),
        completion_tokens=_int(value.get("completion_tokens")),
        cached_tokens=cached,
    )


def _metrics(value: Any) -> RequestMetrics | None:
    if not isinstance(value, Mapping):
        return None
    spec = value.get("speculative_decoding")
    return RequestMetrics(
        time_to_first_token_ms=_float(value.get("time_to_first_token_ms")),
        generation_time_ms=_float(value.get("generation_time_ms")),
        queue_time_ms=_float(value.get("queue_time_ms")),
        mean_itl_ms=_float(value.get("mean_itl_ms")),
        spec=SpecDecodeStats(
            num_drafts=_int(spec.get("num_spec_steps")),
            draft_tokens=_int(spec.get("num_draft_tokens")),
            accepted_tokens=_int(spec.get("num_accepted_draft_tokens")),
        )
        if isinstance(spec, Mapping)
        else None,
        acceptance_histogram=_histogram(spec.get("acceptance_histogram"))
        if isinstance(spec, Mapping)
        else None,
    )


_HISTOGRAM_MAX = 65
"""Entries of the longest histogram kept (``k + 1`` for k up to 64, as usage records hold)."""
_COUNT_MAX = 2**31 - 1


def _histogram(value: Any) -> tuple[int, ...] | None:
    """A list of non-negative integer counts, or None for anything else (a histogram with
    one bad entry says nothing reliable)."""
    if not isinstance(value, list) or not 0 < len(value) <= _HISTOGRAM_MAX:
        return None
    if any(
        isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _COUNT_MAX for v in value
    ):
        return None
    return tuple(value)


def _error_message(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, Mapping):
        return str(value.get("message") or value.get("type") or json.dumps(value))
    return str(value)


# --- server-sent events ---------------------------------------------------------------------


class SseSplitter:
    """Cut a byte stream into complete server-sent events (each with its blank-line end)."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the events completed by them, in order."""
        if self._buffer:
            data = self._buffer + data
        if b"\r" not in data:  # the usual case (vLLM ends events with \n\n): split in C
            *parts, self._buffer = data.split(b"\n\n")
            return [part + b"\n\n" for part in parts]
        self._buffer = data
        events: list[bytes] = []
        start = 0
        for match in _EVENT_END.finditer(self._buffer):
            events.append(self._buffer[start : match.end()])
            start = match.end()
        self._buffer = self._buffer[start:]
        return events

    @property
    def pending(self) -> bytes:
        """Bytes of an incomplete event (what is left if the stream stops here)."""
        return self._buffer


def event_data(event: bytes) -> bytes | None:
    """The ``data:`` field of one event (several data lines joined by a newline), or None."""
    lines = [
        line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:")
    ]
    return b"\n".join(lines) if lines else None


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    """One event of a vLLM stream."""

    done: bool = False
    """The ``[DONE]`` sentinel."""
    payload: dict[str, Any] | None = None
    """The decoded JSON object; None for [DONE], comments and undecodable data."""

    @property
    def usage_only(self) -> bool:
        """The last chunk of an ``include_usage`` stream: usage and no choices."""
        return (
            self.payload is not None and "usage" in self.payload and not self.payload.get("choices")
        )


def parse_event(event: bytes) -> ParsedEvent:
    """Decode one server-sent event of an OpenAI-compatible stream."""
    data = event_data(event)
    if data is None:
        return ParsedEvent()
    if data.strip() == DONE:
        return ParsedEvent(done=True)
    try:
        payload = json.loads(data)
    except ValueError:
        return ParsedEvent()
    return ParsedEvent(payload=payload if isinstance(payload, dict) else None)


def without_usage(event: ParsedEvent) -> bytes:
    """The event re-encoded with its ``usage`` member removed (vLLM's compact JSON form)."""
    assert event.payload is not None
    payload = {key: value for key, value in event.payload.items() if key != "usage"}
    return (
        b"data: "
        + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
        + (b"\n\n")
    )


_USAGE_KEY = b'"usage":'
_CHOICES_KEY = b'"choices":'
_HEAD = b"data: {"
_TAIL = b"}\n\n"
_VLLM_USAGE = re.compile(
    rb',"usage":\{"prompt_tokens":(0|[1-9]\d*),"total_tokens":(?:0|[1-9]\d*),'
    rb'"completion_tokens":(0|[1-9]\d*)'
    rb'(?:,"prompt_tokens_details":(?:null|\{"cached_tokens":(0|[1-9]\d*)\})'
    rb'|,"completion_tokens_details":null)*\}\}\n\n'
)
"""The usage member of vLLM's chunks, as its UsageInfo serialises, to the end of the chunk."""


def scan_usage(event: bytes) -> tuple[int, int, int, int] | None:
    """Read the cumulative usage of a streamed chunk without decoding the chunk.

    Applies to the chunks vLLM sends with ``continuous_usage_stats``: one ``data:`` line of
    compact JSON whose choices are not empty and whose last member is the ``usage`` object.
    Only that object is read. A ``"usage":`` outside a JSON string can only be a key,
    and the text between it and the closing brace of the chunk is one JSON value only if
    it is a member of the outermost object (a nested one would be followed by the
    brackets that close its container); the choices key is the outermost object's when no
    other brace comes before it.

    Returns:
        ``(prompt_tokens, completion_tokens, cached_tokens, cut)``, where ``cut`` is the
        index of the comma that starts the usage member (the chunk without usage is
        ``event[:cut] + b"}\\n\\n"``); None when the chunk is not of that form (decode it
        whole: :func:`parse_event`).
    """
    key = event.find(_USAGE_KEY) - 1
    choices = event.find(_CHOICES_KEY)
    if (
        key < 0
        or event[key] != 0x2C  # compact JSON: a comma right before the member
        or not 0 < choices < key
        or not event.startswith(_HEAD)
        or event.find(_USAGE_KEY, key + 2) >= 0
        or event.find(_CHOICES_KEY, choices + 1) >= 0
        or event.count(b"{", 0, choices) != 1
        or event[choices + 10 : choices + 12] != b"[{"
        or event.find(b"\n", 0, key) >= 0
        or event.find(b"\r") >= 0
        or event.find(b"\\u") >= 0  # an escaped key would hide from the scan
    ):
        return None
    match = _VLLM_USAGE.fullmatch(event, key)
    if match is not None:
        prompt, completion, cached = match.groups()
        return int(prompt), int(completion), int(cached or 0), key
    if not event.endswith(_TAIL) or event.find(b"\n", key, len(event) - 2) >= 0:
        return None
    try:
        value = json.loads(event[key + 9 : len(event) - 3])
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    usage = _usage(value)
    assert usage is not None
    return usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens, key


class StreamRelay:
    """One metered stream, read by read: what the client gets and the tokens each read
    carries (pure). Continuous usage is taken out where the client did not ask for it."""

    __slots__ = ("estimate", "splitter", "tally", "wants_every", "wants_usage")

    def __init__(
        self,
        *,
        wants_usage: bool,
        wants_every: bool,
        estimate: Callable[[TokenUsage], str | None] | None = None,
    ) -> None:
        self.splitter = SseSplitter()
        self.tally = StreamTally()
        self.wants_usage = wants_usage
        self.wants_every = wants_every
        self.estimate = estimate
        """The cost estimate of the final usage (a decimal string), added to the usage chunk
        the client asked for as ``usage.specledger_cost_estimate``."""

    def feed(self, data: bytes) -> tuple[bytes, int]:
        """The bytes to pass on for ``data`` (complete events only) and the tokens the
        events show were computed since the previous read."""
        out: list[bytes] = []
        tokens = 0
        tally = self.tally
        for raw in self.splitter.feed(data):
            scanned = scan_usage(raw)
            if scanned is not None:
                prompt, completion, cached, cut = scanned
                tokens += tally.observe_usage(prompt, completion, cached)
                out.append(raw if self.wants_every else raw[:cut] + _TAIL)
                continue
            event = parse_event(raw)
            tokens += tally.observe(event)
            if event.payload is None or "usage" not in event.payload:
                out.append(raw)
            elif event.usage_only:
                if self.wants_usage:
                    out.append(self._priced(raw, event))
            else:
                out.append(raw if self.wants_every else without_usage(event))
        return b"".join(out), tokens

    def _priced(self, raw: bytes, event: ParsedEvent) -> bytes:
        usage = self.tally.final_usage
        cost = None if self.estimate is None or usage is None else self.estimate(usage)
        if cost is None:
            return raw
        assert event.payload is not None
        payload = dict(event.payload)
        payload["usage"] = {**payload["usage"], ESTIMATE_FIELD: cost}
        return (
            b"data: "
            + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
            + b"\n\n"
        )


ESTIMATE_FIELD = "specledger_cost_estimate"


def _choice_tokens(choice: Any) -> int:
    """Tokens one streamed choice carries, when no cumulative usage says it exactly.

    ``token_ids`` counts exactly; otherwise a chunk with text is taken as one token (vLLM
    sends one chunk per engine step; a step that accepted drafts carries more, which the
    final usage corrects).
    """
    if not isinstance(choice, Mapping):
        return 0
    token_ids = choice.get("token_ids")
    if isinstance(token_ids, list):
        return len(token_ids)
    delta = choice.get("delta")
    if isinstance(delta, Mapping):
        has_output = any(
            delta.get(key)
            for key in ("content", "reasoning", "reasoning_content", "tool_calls", "function_call")
        )
        return 1 if has_output else 0
    return 1 if choice.get("text") else 0


@dataclass(slots=True)
class StreamTally:
    """Running counts of one streamed response, fed event by event.

    With cumulative usage on each chunk (``continuous_usage_stats``) the counts are exact;
    without it completion tokens are counted from the chunks and the final usage chunk, when
    it comes, sets them right.
    """

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    metered_tokens: int = 0
    """Tokens already handed to the GPU-time meter."""
    prompt_seen: bool = False
    final_usage: TokenUsage | None = None
    metrics: RequestMetrics | None = None
    error: str | None = None
    done: bool = False
    events: int = 0

    def observe(self, event: ParsedEvent) -> int:
        """Count one event.

        Returns:
            Tokens the event shows were computed since the previous one: the prompt when it
            is first reported (prefill) plus new completion tokens.
        """
        self.events += 1
        if event.done:
            self.done = True
            return 0
        payload = event.payload
        if payload is None:
            return 0
        if "error" in payload and not payload.get("choices"):
            self.error = _error_message(payload["error"])
            return 0
        usage = _usage(payload.get("usage"))
        if event.usage_only:
            self.final_usage = usage
            self.metrics = _metrics(payload.get("metrics"))
        if usage is not None:
            self._take_usage(usage)
        else:
            choices = payload.get("choices")
            if isinstance(choices, list):
                self.completion_tokens += sum(_choice_tokens(choice) for choice in choices)
        return self._unmetered()

    def observe_usage(self, prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> int:
        """Count one chunk that has choices and cumulative usage (what :meth:`observe`
        does with such a chunk, for a caller that read only its usage: :func:`scan_usage`).

        Returns:
            Tokens computed since the previous event, as :meth:`observe`.
        """
        self.events += 1
        self.prompt_tokens = prompt_tokens
        if cached_tokens > self.cached_tokens:
            self.cached_tokens = cached_tokens
        if completion_tokens > self.completion_tokens:
            self.completion_tokens = completion_tokens
        return self._unmetered()

    def _take_usage(self, usage: TokenUsage) -> None:
        self.prompt_tokens = usage.prompt_tokens
        self.cached_tokens = max(self.cached_tokens, usage.cached_tokens)
        self.completion_tokens = max(self.completion_tokens, usage.completion_tokens)

    def _unmetered(self) -> int:
        # Prompt tokens count once the first token shows that prefill ran (vLLM's chat
        # stream reports the prompt on its role chunk, sent with the first token).
        if not self.prompt_seen and (self.prompt_tokens or self.completion_tokens):
            self.prompt_seen = True
        computed = self.completion_tokens + (self.prompt_tokens if self.prompt_seen else 0)
        new = max(computed - self.metered_tokens, 0)
        self.metered_tokens += new
        return new

    @property
    def spec(self) -> SpecDecodeStats | None:
        """The request's speculative-decoding counts (from the final usage chunk)."""
        return self.metrics.spec if self.metrics else None

    @property
    def acceptance_histogram(self) -> tuple[int, ...] | None:
        """The request's acceptance histogram (from the final usage chunk)."""
        return self.metrics.acceptance_histogram if self.metrics else None

    def final_tokens(self) -> int:
        """Tokens not yet handed to the meter when the stream ends: any shortfall against
        the final usage, plus the rejected draft tokens (known only at the end)."""
        remaining = self._unmetered()
        spec = self.spec
        return remaining + (spec.rejected_tokens if spec else 0)

    def usage(self) -> TokenUsage:
        """Tokens of the request: the final usage when it came, else the running counts."""
        if self.final_usage is not None:
            return self.final_usage
        return TokenUsage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
        )


def response_tokens(parsed: ParsedResponse) -> int:
    """Tokens a non-streamed request had computed, for the meter: prompt, completion and
    rejected draft tokens."""
    usage = parsed.usage or TokenUsage()
    spec = parsed.metrics.spec if parsed.metrics else None
    return usage.prompt_tokens + usage.completion_tokens + (spec.rejected_tokens if spec else 0)
