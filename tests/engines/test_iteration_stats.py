"""TensorRT-LLM iteration stats read from the documented format, and their exact split over
the requests active in each iteration."""

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.errors import InvalidInput
from serving.engines.trtllm_iteration_stats import (
    UNATTRIBUTED,
    IterationRecord,
    IterationStatsError,
    SpecDecodingIteration,
    SpecShare,
    apportion,
    apportion_iterations,
    parse_iteration_stats,
    place_iterations,
    requests_active,
)
from serving.proxy.iteration_meter import IterationSpecMeter
from tests.conftest import FIXTURES

ENGINES = FIXTURES / "engines"


def _fixture() -> Any:
    return json.loads((ENGINES / "trtllm_iteration_stats.json").read_text(encoding="utf-8"))


def test_the_documented_metrics_answer_reads_with_rank_copies_skipped() -> None:
    records = parse_iteration_stats(_fixture(), source="trtllm_iteration_stats.json")

    assert [r.iter for r in records] == [154, 155, 156]  # the attentionDpRank 1 copy is gone
    first = records[0]
    assert first.latency_ms == pytest.approx(7.00688362121582)
    assert first.num_active_requests == 2
    assert first.spec == SpecDecodingIteration(
        num_draft_tokens=8,
        num_accepted_tokens=5,
        num_requests_with_draft_tokens=2,
        acceptance_length=3.5,
        draft_latency_ms=1.75,
        draft_overhead=0.2497,
    )
    assert sum(r.spec.num_draft_tokens for r in records if r.spec) == 20
    assert sum(r.spec.num_accepted_tokens for r in records if r.spec) == 12


def test_an_iteration_without_speculation_has_no_spec_figures() -> None:
    records = parse_iteration_stats([{"iter": 1, "iterLatencyMS": 3.0}], source="x")
    assert records == [IterationRecord(iter=1, latency_ms=3.0, num_active_requests=0, spec=None)]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"iter": 1}, r"s\.json: expected a JSON list of iteration records, got dict"),
        ([1], r"s\.json: record 0: expected an object, got int"),
        ([{"iter": -1}], r"record 0\.iter: expected a non-negative whole number"),
        ([{"iter": 1, "iterLatencyMS": "7"}], r"record 0\.iterLatencyMS: expected a number"),
        (
            [{"iter": 1}, {"iter": 2, "specDecodingStats": {"numDraftTokens": 2}}],
            r"record 1\.specDecodingStats\.numAcceptedTokens: expected a count, got None",
        ),
        (
            [
                {
                    "iter": 1,
                    "specDecodingStats": {
                        "numDraftTokens": 2,
                        "numAcceptedTokens": 3,
                        "numRequestsWithDraftTokens": 1,
                    },
                }
            ],
            r"record 0\.specDecodingStats: numAcceptedTokens 3 exceeds numDraftTokens 2",
        ),
    ],
)
def test_a_malformed_document_is_refused_naming_the_record_and_field(
    document: Any, message: str
) -> None:
    with pytest.raises(IterationStatsError, match=message):
        parse_iteration_stats(document, source="s.json")


def test_iterations_are_laid_back_from_the_drain_and_clipped_to_the_window() -> None:
    records = parse_iteration_stats(_fixture(), source="f")
    spans = place_iterations(records, window_start_ns=0, window_end_ns=100_000_000)
    assert spans == [
        (100_000_000 - 18_756_884, 100_000_000 - 11_750_000),
        (100_000_000 - 11_750_000, 100_000_000 - 5_250_000),
        (100_000_000 - 5_250_000, 100_000_000),
    ]
    clipped = place_iterations(records, window_start_ns=90_000_000, window_end_ns=100_000_000)
    assert clipped[0] == (90_000_000, 90_000_000)
    assert clipped[-1] == (94_750_000, 100_000_000)


def test_requests_active_are_those_whose_half_open_interval_overlaps() -> None:
    intervals: dict[str, tuple[int, int | None]] = {
        "done-before": (0, 10),
        "ends-at-start": (5, 20),
        "spans": (15, 40),
        "open": (30, None),
        "starts-at-end": (50, 60),
    }
    assert requests_active(intervals, 20, 50) == ["open", "spans"]
    assert requests_active(intervals, 35, 35) == ["open", "spans"]  # an instant


def test_a_documented_batch_splits_over_two_requests_exactly() -> None:
    records = parse_iteration_stats(_fixture(), source="f")
    shares = apportion_iterations([(records[0], ["a", "b"]), (records[1], ["a", "b"]),
                                   (records[2], ["b"])])  # fmt: skip
    # iter 154: accepted 5 -> a 3 (rotation 154 % 2 = 0 starts at a), b 2; rejected 3 -> a 1,
    # b 2; iter 155: accepted 3 -> b 2, a 1; rejected 5 -> a 3, b 2; iter 156: b alone.
    assert shares["a"].accepted_tokens == 3 + 1
    assert shares["a"].draft_tokens == (3 + 1) + (1 + 3)
    assert shares["b"].accepted_tokens == 2 + 2 + 4
    assert shares["b"].draft_tokens == (2 + 2) + (2 + 2) + 4
    assert shares["a"].num_drafts == 2
    assert shares["b"].num_drafts == 3
    assert shares["a"].draft_ns + shares["b"].draft_ns == 1_750_000 + 1_500_000 + 1_250_000


def test_an_iteration_with_no_request_goes_to_the_unattributed_share() -> None:
    records = parse_iteration_stats(_fixture(), source="f")
    shares = apportion_iterations([(records[0], [])])
    assert shares[UNATTRIBUTED].draft_tokens == 8
    assert shares[UNATTRIBUTED].accepted_tokens == 5


def test_apportion_refuses_what_it_cannot_split() -> None:
    with pytest.raises(InvalidInput, match="negative"):
        apportion(-1, ["a"])
    with pytest.raises(InvalidInput, match="no key"):
        apportion(3, [])
    assert apportion(0, []) == {}


_keys = st.lists(st.sampled_from("abcdefgh"), min_size=0, max_size=6, unique=True)


@st.composite
def _iteration(draw: st.DrawFn) -> tuple[IterationRecord, list[str]]:
    drafted = draw(st.integers(0, 500))
    spec = SpecDecodingIteration(
        num_draft_tokens=drafted,
        num_accepted_tokens=draw(st.integers(0, drafted)),
        num_requests_with_draft_tokens=draw(st.integers(0, 8)),
        draft_latency_ms=draw(st.floats(0, 50, allow_nan=False)),
    )
    record = IterationRecord(
        iter=draw(st.integers(0, 10_000)),
        latency_ms=draw(st.floats(0, 100, allow_nan=False)),
        num_active_requests=0,
        spec=spec,
    )
    return record, draw(_keys)


@given(st.lists(_iteration(), max_size=30))
def test_apportionment_conserves_every_total_and_never_accepts_more_than_drafted(
    iterations: list[tuple[IterationRecord, list[str]]],
) -> None:
    shares = apportion_iterations(iterations)
    specs = [record.spec for record, _ in iterations if record.spec is not None]
    assert sum(s.draft_tokens for s in shares.values()) == sum(s.num_draft_tokens for s in specs)
    assert sum(s.accepted_tokens for s in shares.values()) == sum(
        s.num_accepted_tokens for s in specs
    )
    assert sum(s.num_drafts for s in shares.values()) == sum(
        s.num_requests_with_draft_tokens for s in specs
    )
    assert sum(s.draft_ns for s in shares.values()) == sum(
        round(s.draft_latency_ms * 1e6) for s in specs
    )
    for share in shares.values():
        assert 0 <= share.accepted_tokens <= share.draft_tokens
    keys_seen = {key for _, keys in iterations for key in keys}
    assert set(shares) <= keys_seen | {UNATTRIBUTED}


@given(st.integers(0, 10_000), _keys.filter(bool), st.integers(0, 1000))
def test_each_even_share_is_within_one_of_exact(total: int, keys: list[str], rotate: int) -> None:
    shares = apportion(total, keys, rotate=rotate)
    assert sum(shares.values()) == total
    assert all(abs(share * len(keys) - total) < len(keys) for share in shares.values())


def test_a_misplaced_iteration_goes_to_the_windows_requests_not_to_nobody() -> None:
    meter = IterationSpecMeter(drained_at_ns=0)
    meter.begin("late", at_ns=95_000_000)  # arrived 5 ms before the drain
    records = parse_iteration_stats(_fixture(), source="f")
    meter.drain(records, at_ns=100_000_000)  # iterations laid back over 18.76 ms
    assert meter.unattributed == SpecShare()
    assert meter.shares["late"].draft_tokens == 20
    empty = IterationSpecMeter(drained_at_ns=0)
    empty.drain(records, at_ns=100_000_000)
    assert empty.unattributed.draft_tokens == 20
    assert not empty.shares


def test_a_request_is_settled_only_by_a_drain_after_its_finish_and_grace() -> None:
    meter = IterationSpecMeter(drained_at_ns=0, settle_after_ns=10)
    meter.begin("r", at_ns=5)
    assert not meter.covers("r")
    meter.end("r", at_ns=50)
    meter.drain([], at_ns=55)
    assert not meter.covers("r")
    meter.drain([], at_ns=60)
    assert meter.covers("r")
    assert meter.take("r") == SpecShare()
    assert "r" not in meter.intervals
