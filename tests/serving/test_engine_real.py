"""A real vLLM CPU server on the prepared SmolLM2 model, with ngram speculation (slow: the
session's pooled engine, tests/engine_pool.py, started if no test before used it)."""

import httpx
import pytest

from serving.engine import launcher
from tests.engine_pool import EnginePool

pytestmark = [
    pytest.mark.serving,
    pytest.mark.xdist_group("vllm"),  # one engine at a time on a small machine
]


COPY_PROMPT = (
    "Repeat the list exactly: apple, banana, cherry, date, elderberry, fig, grape.\n"
    "apple, banana, cherry, date, elderberry, fig, grape.\nAgain:"
)


@pytest.mark.engines("ngram")
def test_ngram_engine_answers_with_usage_and_spec_decode_metrics(engine_pool: EnginePool):
    ngram_engine = engine_pool.get("ngram")
    assert launcher.status(ngram_engine.name, state_dir=engine_pool.state_dir).state == "running"

    with httpx.Client(base_url=f"{ngram_engine.base_url}/v1", timeout=120) as client:
        body = client.post(
            "/completions",
            json={
                "model": ngram_engine.model_name,
                "prompt": COPY_PROMPT,
                "max_tokens": 24,
                "temperature": 0,
            },
        ).json()
        prometheus = client.get(f"{ngram_engine.base_url}/metrics").text

    assert body["choices"][0]["text"].strip()
    assert 0 < body["usage"]["completion_tokens"] <= 24
    timings = body["metrics"]
    assert timings["time_to_first_token_ms"] > 0
    spec = timings["speculative_decoding"]
    assert spec["num_spec_tokens"] == 4
    assert 0 < spec["num_accepted_draft_tokens"] <= spec["num_draft_tokens"]
    assert len(spec["acceptance_histogram"]) == 5
    assert "vllm:spec_decode_num_accepted_tokens_total{" in prometheus
