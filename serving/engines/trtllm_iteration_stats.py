"""TensorRT-LLM iteration statistics, and their speculative-decoding figures split exactly
over the requests active in each iteration: pure, no I/O.

``trtllm-serve`` (with ``enable_iter_perf_stats: true``) answers ``GET /metrics`` with a JSON
list of iteration records, drained from a queue on each read (NVIDIA/TensorRT-LLM
``docs/source/commands/trtllm-serve/trtllm-serve.rst``, "Metrics Endpoint"). A record holds
``iter``, ``iterLatencyMS``, ``numActiveRequests`` and, with speculation,
``specDecodingStats`` (``cpp/include/tensorrt_llm/executor/types.h``, ``SpecDecodingStats``):
``numDraftTokens``, ``numAcceptedTokens``, ``numRequestsWithDraftTokens``,
``acceptanceLength``, ``iterLatencyMS`` (drafting only) and ``draftOverhead`` (drafting over
the whole iteration). With attention data parallelism each rank reports, and ranks other
than 0 repeat rank 0's figures, so they are skipped (``attentionDpRank``).

The records carry no request ids, so each iteration's figures go to the requests the meter
saw in flight while it ran (:func:`place_iterations` puts a drained batch of iterations on
the meter's clock). Apportionment is exact: the accepted and the rejected draft tokens, the
requests with drafts and the drafting nanoseconds of an iteration are each split by largest
remainder, so every total is conserved and each request's drafted tokens are its accepted
plus its rejected ones (never fewer accepted than drafted).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from app.domain.errors import InvalidInput

__all__ = [
    "UNATTRIBUTED",
    "IterationRecord",
    "IterationStatsError",
    "SpecDecodingIteration",
    "SpecShare",
    "apportion",
    "apportion_iterations",
    "parse_iteration_stats",
    "place_iterations",
    "requests_active",
]

UNATTRIBUTED = ""
"""Key of the share of iterations during which the meter saw no request in flight."""


class IterationStatsError(InvalidInput):
    """An iteration-stats document that does not have TensorRT-LLM's documented shape."""

    code = "iteration_stats_invalid"


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecDecodingIteration:
    """``specDecodingStats`` of one iteration."""

    num_draft_tokens: int
    num_accepted_tokens: int
    num_requests_with_draft_tokens: int
    acceptance_length: float | None = None
    """Mean tokens produced per step by the requests that drafted (engine's own figure)."""
    draft_latency_ms: float = 0.0
    """``specDecodingStats.iterLatencyMS``: time spent drafting in the iteration."""
    draft_overhead: float | None = None
    """Drafting time over the whole iteration's time."""


@dataclass(frozen=True, slots=True, kw_only=True)
class IterationRecord:
    """One iteration of the executor (the fields the meter uses)."""

    iter: int
    latency_ms: float
    num_active_requests: int
    spec: SpecDecodingIteration | None
    """None when the iteration reports no speculative decoding."""


@dataclass(frozen=True, slots=True)
class SpecShare:
    """A request's part of the iterations it was active in."""

    num_drafts: int = 0
    """Iterations in which the request had draft tokens (its share of
    ``numRequestsWithDraftTokens``)."""
    draft_tokens: int = 0
    accepted_tokens: int = 0
    draft_ns: int = 0
    """Drafting time, nanoseconds."""

    def __add__(self, other: SpecShare) -> SpecShare:
        return SpecShare(
            self.num_drafts + other.num_drafts,
            self.draft_tokens + other.draft_tokens,
            self.accepted_tokens + other.accepted_tokens,
            self.draft_ns + other.draft_ns,
        )


# --- parsing --------------------------------------------------------------------------------


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IterationStatsError(f"{where}: expected a count, got {value!r}")
    if value < 0 or value != int(value):
        raise IterationStatsError(f"{where}: expected a non-negative whole number, got {value!r}")
    return int(value)


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IterationStatsError(f"{where}: expected a number, got {value!r}")
    if value < 0:
        raise IterationStatsError(f"{where}: expected a non-negative number, got {value!r}")
    return float(value)


def _spec(value: Any, where: str) -> SpecDecodingIteration | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise IterationStatsError(f"{where}: expected an object, got {type(value).__name__}")
    drafted = _count(value.get("numDraftTokens"), f"{where}.numDraftTokens")
    accepted = _count(value.get("numAcceptedTokens"), f"{where}.numAcceptedTokens")
    requests = _count(
        value.get("numRequestsWithDraftTokens"), f"{where}.numRequestsWithDraftTokens"
    )
    if accepted > drafted:
        raise IterationStatsError(
            f"{where}: numAcceptedTokens {accepted} exceeds numDraftTokens {drafted}"
        )
    length = value.get("acceptanceLength")
    overhead = value.get("draftOverhead")
    latency = value.get("iterLatencyMS", 0.0)
    return SpecDecodingIteration(
        num_draft_tokens=drafted,
        num_accepted_tokens=accepted,
        num_requests_with_draft_tokens=requests,
        acceptance_length=None if length is None else _number(length, f"{where}.acceptanceLength"),
        draft_latency_ms=_number(latency, f"{where}.iterLatencyMS"),
        draft_overhead=None if overhead is None else _number(overhead, f"{where}.draftOverhead"),
    )


def parse_iteration_stats(document: Any, *, source: str) -> list[IterationRecord]:
    """Read a ``GET /metrics`` answer of ``trtllm-serve`` (a JSON list of iteration records).

    Args:
        document: The decoded JSON.
        source: Where it came from (a URL or file), named in errors.

    Returns:
        The records of attention-DP rank 0 (or without a rank), in the order given.

    Raises:
        IterationStatsError: Naming the source, the record index and the field, when the
            document is not a list of objects or a field has the wrong type.
    """
    if not isinstance(document, list):
        raise IterationStatsError(
            f"{source}: expected a JSON list of iteration records, got {type(document).__name__}"
        )
    records: list[IterationRecord] = []
    for index, item in enumerate(document):
        where = f"{source}: record {index}"
        if not isinstance(item, Mapping):
            raise IterationStatsError(f"{where}: expected an object, got {type(item).__name__}")
        rank = item.get("attentionDpRank")
        if rank not in (None, 0):
            continue
        records.append(
            IterationRecord(
                iter=_count(item.get("iter"), f"{where}.iter"),
                latency_ms=_number(item.get("iterLatencyMS", 0.0), f"{where}.iterLatencyMS"),
                num_active_requests=_count(
                    item.get("numActiveRequests", 0), f"{where}.numActiveRequests"
                ),
                spec=_spec(item.get("specDecodingStats"), f"{where}.specDecodingStats"),
            )
        )
    return records


# --- placing iterations on the meter's clock ------------------------------------------------


def place_iterations(
    records: Sequence[IterationRecord], *, window_start_ns: int, window_end_ns: int
) -> list[tuple[int, int]]:
    """Where each of a drained batch of iterations ran, on the meter's clock.

    The batch was drained at ``window_end_ns``, and the previous drain was at
    ``window_start_ns``, so its iterations ran in between. They are laid end to end back
    from the drain by their ``iterLatencyMS`` and clipped to the window (the engine's queue
    may hold iterations from before the previous drain only if a drain was missed).

    Returns:
        ``(start_ns, end_ns)`` per record, half-open, in the records' order.
    """
    if window_end_ns < window_start_ns:
        raise InvalidInput(f"window ends ({window_end_ns}) before it starts ({window_start_ns})")
    spans: list[tuple[int, int]] = []
    end = window_end_ns
    for record in reversed(records):
        start = max(end - round(record.latency_ms * 1e6), window_start_ns)
        spans.append((start, max(end, start)))
        end = start
    spans.reverse()
    return spans


def requests_active(
    intervals: Mapping[str, tuple[int, int | None]], start_ns: int, end_ns: int
) -> list[str]:
    """Requests whose half-open interval ``[arrived, finished)`` overlaps ``[start, end)``
    (an empty span counts as the instant ``start``); ``finished`` None: still in flight."""
    found = []
    for key, (arrived, finished) in intervals.items():
        open_end = finished is None or finished > start_ns
        if arrived < max(end_ns, start_ns + 1) and open_end:
            found.append(key)
    return sorted(found)


# --- apportionment ----------------------------------------------------------------------------


def apportion(total: int, keys: Sequence[str], *, rotate: int = 0) -> dict[str, int]:
    """Split ``total`` evenly over ``keys`` by largest remainder.

    Every key gets ``total // n``; the ``total % n`` units left go one each to the keys
    starting at position ``rotate`` of the sorted keys (so, over many iterations, the
    leftovers do not always fall on the same requests).

    Raises:
        InvalidInput: If ``total`` is negative, or positive with no key to give it to.
    """
    if total < 0:
        raise InvalidInput(f"cannot apportion a negative total ({total})")
    ordered = sorted(set(keys))
    if not ordered:
        if total:
            raise InvalidInput(f"no key to apportion {total} to")
        return {}
    base, left = divmod(total, len(ordered))
    shares = dict.fromkeys(ordered, base)
    first = rotate % len(ordered)
    for offset in range(left):
        shares[ordered[(first + offset) % len(ordered)]] += 1
    return shares


def apportion_iterations(
    iterations: Iterable[tuple[IterationRecord, Sequence[str]]],
) -> dict[str, SpecShare]:
    """Each request's share of the speculative-decoding figures of the iterations it was
    active in.

    Args:
        iterations: Each iteration with the requests active during it. An iteration with
            no active request goes to :data:`UNATTRIBUTED` (``""``), so the totals over the
            result always equal the totals over the iterations.

    Returns:
        Per request key, its summed share. Per iteration, accepted tokens, rejected tokens
        (drafted - accepted), requests with drafts and drafting nanoseconds are each split
        by :func:`apportion`, rotated by the iteration number.
    """
    totals: dict[str, SpecShare] = {}
    for record, active in iterations:
        spec = record.spec
        if spec is None:
            continue
        keys = list(active) or [UNATTRIBUTED]
        accepted = apportion(spec.num_accepted_tokens, keys, rotate=record.iter)
        rejected = apportion(
            spec.num_draft_tokens - spec.num_accepted_tokens, keys, rotate=record.iter + 1
        )
        drafts = apportion(spec.num_requests_with_draft_tokens, keys, rotate=record.iter)
        draft_ns = apportion(round(spec.draft_latency_ms * 1e6), keys, rotate=record.iter)
        for key in accepted:
            share = SpecShare(
                num_drafts=drafts[key],
                draft_tokens=accepted[key] + rejected[key],
                accepted_tokens=accepted[key],
                draft_ns=draft_ns[key],
            )
            totals[key] = totals.get(key, SpecShare()) + share
    return totals
