"""The columnar usage reader agrees with the per-record reader (``read_usage_file``, the
schema applied line by line): same records, same problems named by the same line, for
arbitrary lines, valid or not, and whatever the block size."""

import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.usage import UsageEvent
from app.usage.columns import events_columns
from ingest.usage import UsageInputError, read_usage_file
from ingest.usage_read import Unreadable, read_blocks

T0 = datetime(2026, 12, 1, 9, tzinfo=UTC)
_MISSING = object()

texts = st.one_of(
    st.sampled_from(["a", "search", "dep-1", "r0", "prod", "x" * 64, "x" * 65, "", "é", 'q"b']),
    st.text(max_size=8),
    st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4),
)
counts = st.one_of(
    st.integers(0, 1000),
    st.sampled_from([-1, 2**31 - 1, 2**31, 2**62, 2**62 + 1]),
    st.sampled_from([1.5, "5", True, None]),
)


def instant(at: datetime, form: int, offset_minutes: int) -> Any:
    zone = timezone(timedelta(minutes=offset_minutes))
    local = at.astimezone(zone)
    if form == 0:
        return at.isoformat(timespec="microseconds").replace("+00:00", "Z")
    if form == 1:
        return local.isoformat()
    if form == 2:
        return local.isoformat(timespec="seconds")
    if form == 3:
        return local.isoformat(timespec="milliseconds")
    if form == 4:
        return local.replace(tzinfo=None).isoformat()  # naive: refused
    if form == 5:
        return local.isoformat(sep=" ")
    if form == 6:
        return "2026-02-30T00:00:00Z"
    if form == 7:
        return int(at.timestamp())
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")[:-3] + "Z"


@st.composite
def instants(draw: st.DrawFn, at: datetime) -> Any:
    form = draw(st.integers(0, 8) if draw(st.booleans()) else st.just(0))
    offset = draw(st.sampled_from([0, 60, -300, 330, 23 * 60 + 59, -(23 * 60 + 59)]))
    return instant(at, form, offset)


@st.composite
def usage_object(draw: st.DrawFn) -> dict[str, Any]:
    arrived = T0 + timedelta(microseconds=draw(st.integers(0, 10**10)))
    finished = arrived + timedelta(microseconds=draw(st.integers(-10, 10**8)))
    record: dict[str, Any] = {
        "record": "usage",
        "event_id": f"e-{draw(st.integers(0, 30))}",
        "session_id": "s1",
        "team": "search",
        "cost_center": None,
        "tags": {"env": "prod"},
        "deployment": "dep",
        "replica": "r0",
        "model": "m",
        "endpoint": "completions",
        "streamed": False,
        "spec_method": "ngram",
        "spec_k": 4,
        "arrived_at": instant(arrived, 0, 0),
        "first_token_at": None,
        "finished_at": instant(max(finished, arrived), 0, 0),
        "prompt_tokens": draw(st.integers(0, 5000)),
        "cached_tokens": 0,
        "completion_tokens": 7,
        "num_drafts": 1,
        "draft_tokens": 4,
        "accepted_tokens": 3,
        "accepted_hist": None,
        "gpu_ns": 10**9,
        "concurrency": 1,
        "status": "ok",
        "http_status": 200,
        "error": None,
    }
    changes = draw(st.integers(0, 4))
    for _ in range(changes):
        field = draw(st.sampled_from([*sorted(record), "extra", "start_at", "tags_key"]))
        choice = draw(st.integers(0, 3))
        if choice == 0 and field in record:
            del record[field]  # a missing key: a default, or "is missing"
        elif choice == 1 and field in record:
            record[field] = None  # an explicit null
        elif field in ("arrived_at", "finished_at", "first_token_at", "start_at"):
            record[field] = draw(instants(arrived if field != "finished_at" else finished))
        elif field == "tags":
            record[field] = draw(
                st.dictionaries(st.sampled_from(["env", "team", "k", "\u00e9", "a\\b"]),
                                st.one_of(texts, st.none(), st.integers(0, 3)), max_size=3)
            )  # fmt: skip
        elif field == "tags_key":
            record["tags"] = {"env": "prod", draw(st.sampled_from(["team", "k"])): "x"}
        elif field == "accepted_hist":
            record[field] = draw(
                st.one_of(st.none(), st.lists(st.one_of(st.integers(-1, 5), st.none()), max_size=4))
            )
        elif field in ("status",):
            record[field] = draw(st.sampled_from(["ok", "error", "cancelled", "OK", "", 3]))
        elif field in ("streamed",):
            record[field] = draw(st.sampled_from([True, False, 1, "true"]))
        elif field in ("spec_k", "http_status", "prompt_tokens", "cached_tokens", "gpu_ns",
                       "completion_tokens", "num_drafts", "draft_tokens", "accepted_tokens",
                       "concurrency"):  # fmt: skip
            record[field] = draw(st.one_of(counts, st.sampled_from([64, 65, 100, 599, 600])))
        elif field == "record":
            record[field] = draw(st.sampled_from(["usage", "replica_idle", "other", 1]))
        else:
            record[field] = draw(texts)
    return record


@st.composite
def idle_object(draw: st.DrawFn) -> dict[str, Any]:
    start = T0 + timedelta(seconds=draw(st.integers(0, 10**5)))
    record: dict[str, Any] = {
        "record": "replica_idle",
        "deployment": "dep",
        "replica": draw(st.sampled_from(["r0", "r1", ""])),
        "start_at": instant(start, 0, 0),
        "end_at": instant(start + timedelta(seconds=draw(st.integers(-1, 300))), 0, 0),
        "gpu_ns": draw(st.integers(0, 10**9)),
    }
    if draw(st.integers(0, 9)) == 0:
        record["team"] = None  # a usage key in an idle record: refused
    return record


@st.composite
def line(draw: st.DrawFn) -> str:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.sampled_from(["", "   ", "\t", "{not json", "[1]", "5", "null",
                                     '{"a":1} {"b":2}', "\x0c", "{}"]))  # fmt: skip
    value = draw(idle_object()) if kind == 1 else draw(usage_object())
    return json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
    )


def columnar(
    path: Path, block_bytes: int, workers: int = 1
) -> tuple[pa.Table, list[Any], list[tuple[Any, ...]]]:
    blocks = list(read_blocks(path, block_bytes, workers=workers))
    usage = pa.concat_tables([b.usage for b in blocks]) if blocks else events_columns([])
    idle = [event for b in blocks for event in b.idle]
    problems = [(p.row, p.reason) for b in blocks for p in b.problems]
    return usage, idle, problems


def per_record(path: Path) -> tuple[pa.Table, list[Any], list[tuple[Any, ...]]]:
    try:
        records = read_usage_file(path)
    except UsageInputError as exc:
        return events_columns([]), [], [(p.row, p.reason) for p in exc.problems]
    usage = [r for r in records if isinstance(r, UsageEvent)]
    idle = [r for r in records if not isinstance(r, UsageEvent)]
    return events_columns(usage), idle, []


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    lines=st.lists(line(), max_size=12),
    block_bytes=st.sampled_from([64, 700, 1 << 20]),
    crlf=st.booleans(),
    workers=st.sampled_from([1, 2, 3]),
)
def test_columnar_reader_agrees_with_the_per_record_reader(
    tmp_path: Path, lines: list[str], block_bytes: int, crlf: bool, workers: int
) -> None:
    """Blocks parsed one at a time or several at once in threads: the same records, idle
    records and problems, in file order, with the same line numbers."""
    path = tmp_path / "usage.jsonl"
    path.write_bytes(("\r\n" if crlf else "\n").join(lines).encode("utf-8"))
    try:
        got = columnar(path, block_bytes, workers)
    except Unreadable:
        return  # load_usage reads such a file with read_usage_file itself
    want = per_record(path)
    assert got[2] == want[2]
    if not want[2]:
        assert got[0].to_pylist() == want[0].to_pylist()
        assert got[1] == want[1]


def test_proxy_output_takes_the_columnar_path_only(tmp_path: Path) -> None:
    """Lines as the proxy writes them are proved valid as columns: none is left to the
    per-record path (else the load would run at its speed)."""
    from serving.proxy.spool import write_jsonl
    from tests.serving.test_usage_sink import make_event

    path = tmp_path / "usage.jsonl"
    events = [make_event(n, error='é"\\' if n == 3 else None) for n in range(50)]
    events += [make_event(n, tags={}, team=None, accepted_hist=(1, 2)) for n in range(50, 60)]
    with path.open("w", encoding="utf-8") as stream:
        write_jsonl(stream, events)
    import ingest.usage_read as usage_read

    calls: list[int] = []
    original = usage_read._line_by_line

    def counting(*args: Any) -> Any:
        calls.append(len(args[1]))
        return original(*args)

    usage_read._line_by_line = counting  # type: ignore[assignment]
    try:
        usage, _, problems = columnar(path, 1 << 20)
    finally:
        usage_read._line_by_line = original
    assert problems == []
    assert sum(calls) == 0
    assert usage.to_pylist() == events_columns(events).to_pylist()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("gpu_ns", -1, "field 'gpu_ns': Input should be greater than or equal to 0"),
        ("status", "done", "field 'status': Input should be 'ok', 'error' or 'cancelled'"),
        ("arrived_at", "2026-12-01T09:00:00", "field 'arrived_at': Input should have timezone"),
        ("event_id", "", "field 'event_id': String should have at least 1 character"),
        ("tags", {"k": None}, "field 'tags.k': Input should be a valid string"),
        ("endpoint", None, "field 'endpoint': Input should be a valid string"),
    ],
)
def test_a_bad_field_is_named_by_line_and_field(
    tmp_path: Path, field: str, value: Any, reason: str
) -> None:
    from tests.serving.test_usage_sink import make_event

    lines = [json.dumps(make_event(n).to_json()) for n in range(5)]
    lines.insert(2, "")
    lines[4] = json.dumps({**make_event(9).to_json(), field: value})
    path = tmp_path / "usage.jsonl"
    path.write_text("\n".join(lines) + "\n")
    _, _, problems = columnar(path, 1 << 20)
    assert len(problems) == 1
    assert problems[0][0] == 5
    assert problems[0][1].startswith(reason)
