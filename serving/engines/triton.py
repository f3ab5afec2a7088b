"""The Triton adapter: Triton Inference Server with the TensorRT-LLM backend, behind Triton's
OpenAI-compatible frontend.

Launch and endpoints follow triton-inference-server/server ``python/openai`` (checked
December 2026): ``python3 openai_frontend/main.py --model-repository DIR [--tokenizer TOK]
[--backend tensorrtllm|vllm] [--host H] [--openai-port P]`` (``main.py``'s argparse), and
the frontend's ``GET /health/ready`` and ``GET /metrics`` (Triton's Prometheus text;
``frontend/fastapi/routers/observability.py``).

Speculation (EAGLE, Lookahead, draft-target) is built into the TensorRT-LLM engines of the
model repository, so nothing here switches it on; the config names it for the usage
records. Triton's metrics carry no acceptance (the ``nv_trt_llm_*`` gauges have none), so
records carry tokens and timings only (:attr:`SpecSource.unavailable`); the metrics are
parsed by :mod:`serving.engines.triton_metrics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.domain.speculation_methods import EngineKind
from serving.engine.config import EngineConfig, TritonOptions
from serving.engines.base import SpecSource, UnsupportedEngineConfig
from serving.engines.trtllm import TrtllmAdapter

__all__ = ["TritonAdapter"]


def _options(config: EngineConfig) -> TritonOptions:
    if config.triton is None:
        raise UnsupportedEngineConfig("engine 'triton' needs triton options")
    return config.triton


class TritonAdapter:
    """Triton's OpenAI frontend over a TensorRT-LLM model repository."""

    kind = EngineKind.triton
    health_path = "/health/ready"
    metrics_path = "/metrics"
    spec_source = SpecSource.unavailable
    stream_options: Mapping[str, bool] = {"include_usage": True}
    """Only what the frontend's schema documents; chunks are counted for the meter."""

    def build_argv(self, config: EngineConfig, *, config_dir: Path) -> list[str]:
        options = _options(config)
        argv = [
            config.python, options.frontend,
            "--model-repository", options.model_repository,
            "--backend", options.backend,
            "--host", config.host,
            "--openai-port", str(config.port),
        ]  # fmt: skip
        if options.tokenizer is not None:
            argv += ["--tokenizer", options.tokenizer]
        argv += config.extra_args
        return argv

    def launch_files(self, config: EngineConfig, *, config_dir: Path) -> dict[Path, str]:
        return {}

    def check_supported(self, config: EngineConfig) -> None:
        _options(config)
        if config.device != "cuda":
            raise UnsupportedEngineConfig("Triton's TensorRT-LLM backend needs a CUDA GPU")

    def missing_runtime(self, config: EngineConfig) -> str | None:
        options = _options(config)
        if not Path(config.python).exists():
            return f"{config.python} not found (the interpreter with tritonserver installed)"
        if not Path(options.frontend).exists():
            return f"{options.frontend} not found (Triton's python/openai/openai_frontend/main.py)"
        return None

    def spec_method(self, config: EngineConfig) -> tuple[str, int | None]:
        return TrtllmAdapter().spec_method(config)
