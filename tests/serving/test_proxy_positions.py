"""vLLM's per-request acceptance histogram through the proxy: parsed from real bodies and
streams, kept on the usage record (database and JSONL log), on SQLite and PostgreSQL."""

import json
from pathlib import Path

import pytest

from app.domain.usage import UsageEvent
from app.speculation.rules.positions import PositionCounts
from app.usage.schemas import record_from_json
from ingest.usage import load_usage
from serving.proxy.wire import SseSplitter, StreamTally, parse_event, parse_response
from tests.serving.fake_vllm import FakeVllm
from tests.serving.proxy_helpers import serve, usage_rows
from tests.serving.test_proxy import Call, chat, completion, proxy_app, run_all

FIXTURES = Path(__file__).parent / "fixtures" / "vllm"


@pytest.fixture
def fake() -> FakeVllm:
    return FakeVllm()


def _expected(max_tokens: int, k: int = 4) -> list[int]:
    histogram = [0] * (k + 1)
    for size in FakeVllm.steps(max_tokens)[1:]:
        histogram[min(size - 1, k)] += 1
    return histogram


class TestWire:
    def test_real_completion_carries_its_histogram(self):
        parsed = parse_response(json.loads((FIXTURES / "completion.json").read_text()))
        assert parsed.metrics is not None
        assert parsed.metrics.acceptance_histogram == (0, 0, 0, 0, 3)

    def test_real_stream_carries_it_on_the_usage_chunk(self):
        tally = StreamTally()
        for event in SseSplitter().feed((FIXTURES / "stream_completions.txt").read_bytes()):
            tally.observe(parse_event(event))
        assert tally.acceptance_histogram == (0, 0, 0, 0, 2)
        assert StreamTally().acceptance_histogram is None

    @pytest.mark.parametrize(
        "value", [None, [], [1, "2"], [1, -1], [True, 0], [1.5, 0], "0,1", [0] * 66]
    )
    def test_malformed_histograms_are_dropped(self, value):
        body = {"metrics": {"speculative_decoding": {"num_spec_steps": 1}}}
        body["metrics"]["speculative_decoding"]["acceptance_histogram"] = value
        parsed = parse_response(body)
        assert parsed.metrics is not None
        assert parsed.metrics.acceptance_histogram is None
        assert parsed.metrics.spec is not None  # the counts are kept


def test_records_carry_the_servers_histograms(db_url, engine, fake):
    calls: list[Call] = [
        ("/v1/completions", completion("plain body", 12), {}),
        ("/v1/chat/completions", chat("chat body", 9), {}),
        ("/v1/completions", completion("stream", 10, stream=True), {}),
        (
            "/v1/chat/completions",
            chat("chat stream", 7, stream=True, stream_options={"include_usage": True}),
            {},
        ),
    ]
    with serve(proxy_app(fake, db_url)) as url:
        results = run_all(url, calls)
    assert all(result["status"] == 200 for result in results)
    rows = {row["event_id"]: row for row in usage_rows(engine)}
    for (_, body, _), result in zip(calls, results, strict=True):
        row = rows[result["headers"]["x-event-id"]]
        histogram = row["accepted_hist"]
        assert histogram == _expected(body["max_tokens"])
        counts = PositionCounts.of_histogram(histogram)
        assert counts.steps == row["num_drafts"]
        assert counts.accepted_tokens == row["accepted_tokens"]
        assert counts.draft_tokens == row["draft_tokens"]
    # the client's stream is what vLLM sent: the histogram reaches it only if it asked
    assert "acceptance_histogram" in results[0]["body"]["metrics"]["speculative_decoding"]


def test_failed_requests_have_no_histogram(db_url, engine, fake):
    with serve(proxy_app(fake, db_url)) as url:
        (result,) = run_all(url, [("/v1/completions", completion("FAIL400"), {})])
    assert result["status"] == 400
    (row,) = usage_rows(engine)
    assert row["accepted_hist"] is None


def test_jsonl_log_keeps_histograms_and_loads_them(db_url, engine, fake, tmp_path: Path):
    log = tmp_path / "usage.jsonl"
    calls: list[Call] = [
        ("/v1/completions", completion(f"q {i}", 8 + i, stream=i % 2 == 0), {}) for i in range(4)
    ]
    with serve(proxy_app(fake, None, jsonl_path=log)) as url:
        run_all(url, calls)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    usage = [line for line in lines if line["record"] == "usage"]
    assert sorted(line["completion_tokens"] for line in usage) == [8, 9, 10, 11]
    for line in usage:
        assert line["accepted_hist"] == _expected(line["completion_tokens"])
        event = record_from_json(line)
        assert isinstance(event, UsageEvent)
        assert event.accepted_hist == tuple(line["accepted_hist"])
        assert event.to_json() == line
    assert load_usage(engine, [log]).usage_inserted == 4
    loaded = {row["completion_tokens"]: row["accepted_hist"] for row in usage_rows(engine)}
    assert loaded == {n: _expected(n) for n in (8, 9, 10, 11)}
