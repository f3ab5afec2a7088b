"""bench/proxy_scale.py end to end (--quick): every arm that exists receives every event of
every stream, and each proxy arm meters every request exactly once with GPU time conserved.
Structure and exactness only: the bench's timings are its own output, never asserted here.
The framing parsers of the load client and the bare relay are checked on arbitrary splits.
"""

import asyncio
import itertools
import json
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import proxy_scale
from bench.bare_relay import _ResponseFraming
from bench.proxy_scale import ARMS, StreamResult, _StreamClient, stream_problem
from bench.stub_upstream import _chunk, _Stream

pytestmark = pytest.mark.xdist_group("proxy-scale")


def test_quick_run_receives_every_event_and_meters_every_request_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    proxy_scale.main(["--quick", "--json"])
    result = json.loads(capsys.readouterr().out)
    tokens = result["config"]["tokens"]
    assert result["config"]["streams"] == [20]
    arms = [arm for arm in ARMS if arm not in result["unavailable"]]
    assert arms[:3] == ["direct", "relay", "proxy"]
    assert set(result["unavailable"]) <= {"proxy-2w"}
    for arms_at_level in result["levels"].values():
        for arm in arms:
            row = arms_at_level[arm]
            assert row["events"] == row["expected_events"] == 20 * (tokens + 3), arm
            assert row["bad_streams"] == 0, (arm, row["first_problem"])
            assert (row["server_cpu_us_per_event"] is None) == (arm == "direct")
    for arm in arms[2:]:
        ledger = result["ledgers"][arm]
        sent = ledger["requests_sent"]
        assert sent == 20 + 4  # the level and the warm-up
        assert ledger["records"] == ledger["distinct_event_ids"] == sent
        assert ledger["records_matching_sent_ids"] == sent
        assert ledger["records_not_ok"] == 0
        assert ledger["completion_tokens"] == ledger["expected_completion_tokens"] == sent * tokens
        assert ledger["metered_once"]
        assert ledger["windows_tile"]
        assert ledger["conserved"]
        assert ledger["request_gpu_ns"] + ledger["idle_gpu_ns"] == ledger["wall_ns"] > 0
        checks = {t["check"]: t for t in result["targets"] if t["arm"] == arm}
        assert checks["every request metered once"]["met"] is True
        assert checks["GPU-seconds conserved"]["met"] is True
        assert checks["every event received"]["met"] is True


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False


def _response(tokens: int) -> bytes:
    """A stub response (head and chunked body) as the stub writes it."""
    stream = _Stream(
        cast(asyncio.Transport, _Transport()),
        request_id="r",
        model="m",
        tokens=tokens,
        include_usage=True,
        every=True,
    )
    body = stream.first() + b"".join(stream.next() for _ in range(tokens))
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nx-event-id: ev1\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )
    return head + body


def _splits(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


@given(tokens=st.integers(1, 8), cuts=st.lists(st.integers(0, 4000), max_size=30))
def test_the_client_counts_each_event_once_however_the_bytes_are_split(
    tokens: int, cuts: list[int]
) -> None:
    loop = asyncio.new_event_loop()
    try:
        done: asyncio.Future[None] = loop.create_future()
        client = _StreamClient(b"", done)
        client.connection_made(cast(Any, _Transport()))
        for piece in _splits(_response(tokens), cuts):
            client.data_received(piece)
        assert done.done()
    finally:
        loop.close()
    result = StreamResult(client.status, client.event_id, 0.0, client.times, b"".join(client.tail))
    assert (client.status, client.event_id) == (200, "ev1")
    assert stream_problem(result, tokens) is None


@given(tokens=st.integers(1, 8), cuts=st.lists(st.integers(0, 4000), max_size=30))
def test_the_relay_sees_a_response_end_exactly_at_its_last_byte(
    tokens: int, cuts: list[int]
) -> None:
    data = _response(tokens)
    framing = _ResponseFraming()
    pieces = _splits(data, cuts)
    for i, piece in enumerate(pieces):
        assert not framing.done
        framing.feed(piece)
        assert framing.done == (i == len(pieces) - 1)


def test_the_relay_ends_a_content_length_response_at_its_length() -> None:
    framing = _ResponseFraming()
    framing.feed(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nab")
    assert not framing.done
    framing.feed(b"cde")
    assert framing.done
    assert _chunk(b"xy") == b"2\r\nxy\r\n"
