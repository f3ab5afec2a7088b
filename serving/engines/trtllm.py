"""The TensorRT-LLM adapter: ``trtllm-serve``, OpenAI-compatible.

Flags and YAML keys follow NVIDIA/TensorRT-LLM's documentation (checked December 2026):

* ``docs/source/commands/trtllm-serve/trtllm-serve.rst``: ``trtllm-serve <model>
  [--backend pytorch|tensorrt] [--tokenizer] [--host] [--port] [--tp_size]
  [--max_batch_size] [--kv_cache_free_gpu_memory_fraction] [--extra_llm_api_options FILE]``
  (``--config`` is the newer, equivalent name of ``--extra_llm_api_options``); endpoints
  ``/health`` and ``/metrics`` (iteration stats as JSON, drained on read, with
  ``enable_iter_perf_stats: true`` in the options file).
* ``docs/source/features/speculative-decoding.md``: ``speculative_config`` with
  ``decoding_type`` ``MTP``, ``Eagle3``, ``NGram``, ``DraftTarget`` and the keys of the
  matching ``*DecodingConfig`` (``max_draft_len``, ``speculative_model``,
  ``max_matching_ngram_size``, ``num_nextn_predict_layers``).
* Lookahead (legacy TensorRT backend, 1.2.0rc4 ``legacy/advanced/speculative-decoding.md``):
  ``LookaheadDecodingConfig(max_window_size, max_ngram_size, max_verification_set_size)``.

Responses carry OpenAI ``usage`` but no speculative figures, so acceptance comes from the
iteration stats (:mod:`serving.engines.trtllm_iteration_stats`).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

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

__all__ = ["TrtllmAdapter", "llm_api_options", "options_path", "trtllm_speculative_config"]


def trtllm_speculative_config(config: EngineConfig) -> dict[str, Any] | None:
    """The ``speculative_config`` mapping of the options file, or None without speculation.

    Raises:
        UnsupportedEngineConfig: For a method TensorRT-LLM does not serve (Medusa).
    """
    spec = config.speculation
    match spec:
        case NoSpeculation():
            return None
        case NgramSpeculation():
            return {
                "decoding_type": "NGram",
                "max_draft_len": spec.k,
                "max_matching_ngram_size": spec.prompt_lookup_max,
                **spec.extra,
            }
        case DraftModelSpeculation():
            return {
                "decoding_type": "DraftTarget",
                "max_draft_len": spec.k,
                "speculative_model": spec.draft_model,
                **spec.extra,
            }
        case Eagle3Speculation():
            return {
                "decoding_type": "Eagle3",
                "max_draft_len": spec.k,
                "speculative_model": spec.draft_model,
                **spec.extra,
            }
        case MtpSpeculation():
            return {
                "decoding_type": "MTP",
                "max_draft_len": spec.k,
                "num_nextn_predict_layers": spec.k,
                **spec.extra,
            }
        case LookaheadSpeculation():
            return {
                "decoding_type": "Lookahead",
                "max_window_size": spec.window,
                "max_ngram_size": spec.ngram,
                "max_verification_set_size": spec.verification_set,
            }
        case MedusaSpeculation():
            raise UnsupportedEngineConfig("trtllm-serve does not serve Medusa heads")
        case OtherSpeculation():
            return {"decoding_type": spec.vllm_method, **spec.options}


def llm_api_options(config: EngineConfig) -> dict[str, Any]:
    """The ``--extra_llm_api_options`` document: iteration stats on (the meter reads them),
    the speculative config, then the config's own extra keys."""
    options: dict[str, Any] = {"enable_iter_perf_stats": True}
    spec = trtllm_speculative_config(config)
    if spec is not None:
        options["speculative_config"] = spec
    options.update(config.trtllm.llm_api_options)
    return options


def options_path(config: EngineConfig, config_dir: Path) -> Path:
    """Where the deployment's options file is written."""
    return config_dir / f"{config.name}.llm_api_options.yaml"


_DECODING_TYPES = {
    "ngram": "NGram",
    "draft_model": "DraftTarget",
    "eagle3": "Eagle3",
    "mtp": "MTP",
    "lookahead": "Lookahead",
}


class TrtllmAdapter:
    """``trtllm-serve`` with its options file."""

    kind = EngineKind.trtllm
    health_path = "/health"
    metrics_path = "/metrics"
    spec_source = SpecSource.iteration_stats
    stream_options: Mapping[str, bool] = {"include_usage": True, "continuous_usage_stats": True}

    def build_argv(self, config: EngineConfig, *, config_dir: Path) -> list[str]:
        options = config.trtllm
        argv = [
            options.executable, config.model,
            "--backend", options.backend,
            "--host", config.host,
            "--port", str(config.port),
            "--tp_size", str(options.tp_size),
        ]  # fmt: skip
        if options.tokenizer is not None:
            argv += ["--tokenizer", options.tokenizer]
        if options.max_batch_size is not None:
            argv += ["--max_batch_size", str(options.max_batch_size)]
        if options.kv_cache_free_gpu_memory_fraction is not None:
            argv += [
                "--kv_cache_free_gpu_memory_fraction",
                str(options.kv_cache_free_gpu_memory_fraction),
            ]
        argv += ["--extra_llm_api_options", str(options_path(config, config_dir))]
        argv += config.extra_args
        return argv

    def launch_files(self, config: EngineConfig, *, config_dir: Path) -> dict[Path, str]:
        text = yaml.safe_dump(llm_api_options(config), sort_keys=False)
        return {options_path(config, config_dir): text}

    def check_supported(self, config: EngineConfig) -> None:
        trtllm_speculative_config(config)
        if config.device != "cuda":
            raise UnsupportedEngineConfig("TensorRT-LLM runs on CUDA GPUs only (device='cuda')")

    def missing_runtime(self, config: EngineConfig) -> str | None:
        executable = config.trtllm.executable
        if Path(executable).exists() or shutil.which(executable):
            return None
        return (
            f"{executable} not found: install TensorRT-LLM (pip install tensorrt-llm) on a GPU host"
        )

    def spec_method(self, config: EngineConfig) -> tuple[str, int | None]:
        spec = config.speculation
        if isinstance(spec, OtherSpeculation):
            k = spec.options.get("max_draft_len")
            return spec.vllm_method, k if isinstance(k, int) else None
        name = _DECODING_TYPES.get(spec.method, spec.method)
        return name, getattr(spec, "k", None)
