"""A real vLLM CPU server on the prepared SmolLM2 model, with ngram speculation (slow: ~1 min)."""

import io
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from serving.engine import launcher
from serving.engine.config import EngineConfig, NgramSpeculation
from serving.engine.model_prep import DEFAULT_CACHE_DIR, PreparedModels, prepare_models
from tests.prereq import require

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

pytestmark = [
    pytest.mark.serving,
    pytest.mark.xdist_group("vllm"),  # one engine at a time on a small machine
]


@pytest.fixture(scope="module", autouse=True)
def _prerequisites() -> None:
    """The vLLM venv; the model is prepared by the ``models`` fixture when missing."""
    require(
        VLLM_PYTHON.exists(),
        f"no vLLM venv at {VLLM_PYTHON.parent.parent}; run `make serving-env` "
        "(scripts/install_vllm_cpu.sh)",
    )


COPY_PROMPT = (
    "Repeat the list exactly: apple, banana, cherry, date, elderberry, fig, grape.\n"
    "apple, banana, cherry, date, elderberry, fig, grape.\nAgain:"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def models() -> PreparedModels:
    """The prepared model (converted on first use, ~30 s; then a no-op)."""
    return prepare_models(
        cache_dir=ROOT / DEFAULT_CACHE_DIR,
        vllm_python=VLLM_PYTHON,
        console=Console(file=io.StringIO()),
    )


@pytest.fixture
def ngram_engine(models: PreparedModels, tmp_path: Path) -> Iterator[EngineConfig]:
    config = EngineConfig(
        name="test-ngram",
        model=str(models.target),
        speculation=NgramSpeculation(k=4),
        port=_free_port(),
        python=str(VLLM_PYTHON),
    )
    handle = launcher.start(config, tmp_path / "engine.log", timeout_s=400, state_dir=tmp_path)
    try:
        yield config
    finally:
        assert launcher.stop(handle, state_dir=tmp_path)
    assert launcher.status(config.name, state_dir=tmp_path).state == "stopped"


def test_ngram_engine_answers_with_usage_and_spec_decode_metrics(ngram_engine, tmp_path):
    assert launcher.status(ngram_engine.name, state_dir=tmp_path).state == "running"

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
