"""Typed description of one engine deployment, saved as JSON per deployment.

The names here are ours; the engine adapters (:mod:`serving.engines`) alone turn them into
an engine's flags: vLLM (the default), TensorRT-LLM's ``trtllm-serve``, or Triton with the
TensorRT-LLM backend behind its OpenAI frontend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, JsonValue, PositiveInt, model_validator

from serving.engine.paths import DEFAULT_ENGINES_DIR as DEFAULT_ENGINES_DIR
from serving.engine.paths import DEFAULT_VLLM_PYTHON as DEFAULT_VLLM_PYTHON


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class NoSpeculation(_Frozen):
    """Plain decoding: the baseline every speculative setting is compared against."""

    method: Literal["none"] = "none"


class NgramSpeculation(_Frozen):
    """Model-free drafting by prompt lookup (copies n-grams seen earlier in the context)."""

    method: Literal["ngram"] = "ngram"
    k: PositiveInt = 4
    prompt_lookup_min: PositiveInt = 2
    prompt_lookup_max: PositiveInt = 4
    extra: dict[str, JsonValue] = Field(default_factory=dict)
    """Further speculative-config keys passed through verbatim (e.g. a synthetic sampler)."""

    @model_validator(mode="after")
    def _window_is_ordered(self) -> Self:
        if self.prompt_lookup_min > self.prompt_lookup_max:
            raise ValueError("prompt_lookup_min must not exceed prompt_lookup_max")
        return self


class DraftModelSpeculation(_Frozen):
    """A smaller model with the target's tokenizer proposes ``k`` tokens per step."""

    method: Literal["draft_model"] = "draft_model"
    draft_model: str
    """Path or name of the draft model."""
    k: PositiveInt = 4
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class MedusaSpeculation(_Frozen):
    """Medusa heads on the target's last hidden state each guess one token further ahead.

    ``heads`` is a checkpoint vLLM reads as ``model_type: "medusa"`` (``config.json`` with
    ``num_heads``, ``num_hidden_layers`` residual blocks per head, ``hidden_size`` and
    ``vocab_size`` of the target; weights ``blocks.<head>.layers.<layer>.weight`` and
    ``lm_heads.<head>.weight``, or one shared ``lm_heads.0.weight`` with
    ``original_lm_head: true``).
    """

    method: Literal["medusa"] = "medusa"
    heads: str
    """Path or name of the Medusa heads checkpoint."""
    k: PositiveInt
    """Tokens drafted per step, at most the checkpoint's number of heads. Required: vLLM
    0.32 refuses a Medusa checkpoint without it ("A speculative model was provided, but
    `num_speculative_tokens` was not provided"), Medusa configs having no ``n_predict``."""
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class OtherSpeculation(_Frozen):
    """Any other vLLM method (eagle3, mtp, suffix, ...), its options passed through as given."""

    method: Literal["other"] = "other"
    vllm_method: str
    """vLLM's own name for the method."""
    options: dict[str, JsonValue] = Field(default_factory=dict)
    """Remaining speculative-config keys, e.g. ``model`` and ``num_speculative_tokens``."""


class Eagle3Speculation(_Frozen):
    """EAGLE-3: a one-layer draft head on the target's hidden states (vLLM ``eagle3``,
    TensorRT-LLM ``Eagle3``)."""

    method: Literal["eagle3"] = "eagle3"
    draft_model: str
    """Path or name of the EAGLE-3 head checkpoint."""
    k: PositiveInt = 4
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class MtpSpeculation(_Frozen):
    """Multi-token prediction modules shipped in the target checkpoint (DeepSeek): vLLM
    ``mtp``, TensorRT-LLM ``MTP`` (whose ``num_nextn_predict_layers`` must equal ``k``)."""

    method: Literal["mtp"] = "mtp"
    k: PositiveInt = 1
    extra: dict[str, JsonValue] = Field(default_factory=dict)


class LookaheadSpeculation(_Frozen):
    """TensorRT-LLM's Lookahead decoding: Jacobi iterations plus an n-gram pool, no draft
    model. ``(W, N, G)``: window size, n-gram size, verification set size. TensorRT engine
    backend only (``LookaheadDecodingConfig``)."""

    method: Literal["lookahead"] = "lookahead"
    window: PositiveInt = 4
    """W, ``max_window_size``."""
    ngram: PositiveInt = 4
    """N, ``max_ngram_size``."""
    verification_set: PositiveInt = 4
    """G, ``max_verification_set_size``."""

    @property
    def k(self) -> int:
        """Tokens a step can accept beyond the bonus one: ``N - 1``."""
        return self.ngram - 1


Speculation = Annotated[
    NoSpeculation
    | NgramSpeculation
    | DraftModelSpeculation
    | MedusaSpeculation
    | Eagle3Speculation
    | MtpSpeculation
    | LookaheadSpeculation
    | OtherSpeculation,
    Field(discriminator="method"),
]


class TrtllmOptions(_Frozen):
    """How ``trtllm-serve`` is started (flags of its documented CLI)."""

    executable: str = "trtllm-serve"
    backend: Literal["pytorch", "tensorrt"] = "pytorch"
    """``tensorrt`` for a prebuilt engine (Lookahead needs it); ``pytorch`` is the default."""
    tokenizer: str | None = None
    tp_size: PositiveInt = 1
    max_batch_size: PositiveInt | None = None
    kv_cache_free_gpu_memory_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    llm_api_options: dict[str, JsonValue] = Field(default_factory=dict)
    """Further top-level keys of the ``--extra_llm_api_options`` YAML file."""


class TritonOptions(_Frozen):
    """How Triton's OpenAI-compatible frontend (``openai_frontend/main.py`` of
    triton-inference-server/server ``python/openai``) is started over a model repository
    holding TensorRT-LLM engines. Speculation is built into those engines; the config's
    ``speculation`` only names it for the usage records."""

    model_repository: str
    tokenizer: str | None = None
    frontend: str = "openai_frontend/main.py"
    """Path of the frontend script."""
    backend: Literal["tensorrtllm", "vllm"] = "tensorrtllm"


class BatchSizeBand(_Frozen):
    """Speculate ``k`` tokens while the running batch holds ``start``..``end`` requests."""

    start: PositiveInt
    end: PositiveInt
    """Inclusive, as vLLM reads it."""
    k: Annotated[int, Field(ge=0)]
    """0 turns drafting off in this band."""

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.start > self.end:
            raise ValueError(f"band start {self.start} is after its end {self.end}")
        return self


class EngineConfig(_Frozen):
    """Everything needed to start one OpenAI-compatible inference server."""

    engine: Literal["vllm", "trtllm", "triton"] = "vllm"
    """Which server (and so which adapter in :mod:`serving.engines`) runs the deployment."""
    name: str = "default"
    """Deployment name: names the config, state and log files."""
    model: str
    """Target model: a local directory (prepared by ``models prepare``) or a model name."""
    served_model_name: str | None = None
    """Name clients send as ``model``; defaults to the last part of ``model``."""
    speculation: Speculation = Field(default_factory=NoSpeculation)
    batch_size_schedule: tuple[BatchSizeBand, ...] | None = None
    """Dynamic speculation: the ``k`` to use per running-batch-size band."""
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = "bfloat16"
    max_model_len: PositiveInt = 2048
    gpu_memory_utilization: Annotated[float, Field(gt=0, le=1)] = 0.3
    """Share of device memory for weights and KV cache; of host memory on CPU."""
    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=1, le=65535)] = 8100
    enforce_eager: bool = True
    """No graph capture: on CPU this cuts start-up from ~106 s to ~25 s."""
    device: Literal["cpu", "cuda"] = "cpu"
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment, e.g. ``VLLM_USE_V2_MODEL_RUNNER=0``."""
    python: str = str(DEFAULT_VLLM_PYTHON)
    """Interpreter of the separate vLLM virtual environment."""
    extra_args: tuple[str, ...] = ()
    """Further server arguments appended verbatim."""
    trtllm: TrtllmOptions = Field(default_factory=TrtllmOptions)
    """Used when ``engine`` is ``trtllm``."""
    triton: TritonOptions | None = None
    """Required when ``engine`` is ``triton``."""

    @model_validator(mode="after")
    def _engine_options(self) -> Self:
        if self.engine == "triton" and self.triton is None:
            raise ValueError("engine 'triton' needs triton options (model_repository, ...)")
        if isinstance(self.speculation, LookaheadSpeculation):
            if self.engine == "vllm":
                raise ValueError("lookahead decoding is TensorRT-LLM's; vLLM has no such method")
            if self.engine == "trtllm" and self.trtllm.backend != "tensorrt":
                raise ValueError(
                    "lookahead decoding runs on TensorRT-LLM's TensorRT backend only: "
                    "set trtllm.backend to 'tensorrt'"
                )
        if self.engine != "vllm" and self.batch_size_schedule is not None:
            raise ValueError(
                "TensorRT-LLM cannot change or disable speculation by batch size; route by "
                "load (proxy speculate_up_to) instead of batch_size_schedule"
            )
        if self.engine != "vllm" and isinstance(self.speculation, MedusaSpeculation):
            raise ValueError(
                "Medusa is not among TensorRT-LLM's serving methods (MTP, Eagle3, NGram, "
                "DraftTarget, Lookahead)"
            )
        return self

    @model_validator(mode="after")
    def _schedule_fits_speculation(self) -> Self:
        if self.batch_size_schedule is None:
            return self
        if isinstance(self.speculation, NoSpeculation):
            raise ValueError("batch_size_schedule needs a speculation method")
        max_k = getattr(self.speculation, "k", None)
        for band in self.batch_size_schedule:
            if max_k is not None and band.k > max_k:
                raise ValueError(f"band k={band.k} exceeds the speculation's k={max_k}")
        return self

    @property
    def model_name(self) -> str:
        """The model name the server answers to."""
        return self.served_model_name or Path(self.model).name

    @property
    def base_url(self) -> str:
        """Root URL of the server, without ``/v1``."""
        return f"http://{self.host}:{self.port}"


def load_engine_config(path: Path) -> EngineConfig:
    """Read an engine config from a JSON file.

    Raises:
        FileNotFoundError: If the file does not exist.
        pydantic.ValidationError: If the JSON does not describe a valid engine.
    """
    return EngineConfig.model_validate_json(path.read_text(encoding="utf-8"))


def save_engine_config(config: EngineConfig, path: Path) -> Path:
    """Write an engine config as indented JSON, creating parent folders.

    Returns:
        The path written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return path


def engine_config_path(name: str, engines_dir: Path = DEFAULT_ENGINES_DIR) -> Path:
    """Where the config of deployment ``name`` lives by convention."""
    return engines_dir / f"{name}.json"
