"""Speculation methods as each engine names them, and which of them load a draft model.

vLLM names methods in lower case (``ngram``, ``draft_model``, ``eagle3``, ``mtp``, ...);
TensorRT-LLM's ``speculative_config.decoding_type`` uses ``NGram``, ``DraftTarget``,
``Eagle3``, ``MTP``, ``PARD``, ``DFlash``, ``SA``, and its legacy TensorRT backend
``Lookahead`` (reference/usage-sources.md B2). Names are compared case-insensitively.

A method "has a draft model" when it loads weights of its own to draft with (a separate
model, EAGLE or Medusa heads, MTP modules): only then can draft memory be reserved and
unused. Lookahead (Jacobi iterations with an n-gram pool), prompt lookup and suffix
matching draft from the target's own outputs and hold no drafter weights.
"""

from enum import StrEnum

__all__ = ["MODEL_FREE_METHODS", "EngineKind", "has_draft_model", "is_model_free"]


class EngineKind(StrEnum):
    """The inference servers SpecLedger launches and meters."""

    vllm = "vllm"
    trtllm = "trtllm"
    """TensorRT-LLM's OpenAI-compatible ``trtllm-serve``."""
    triton = "triton"
    """Triton Inference Server with the TensorRT-LLM backend, behind its OpenAI frontend."""


MODEL_FREE_METHODS = frozenset({
    "ngram", "ngram_gpu", "suffix", "prompt_lookup",  # vLLM
    "lookahead", "sa",  # TensorRT-LLM (NGram folds into "ngram")
})  # fmt: skip
"""Drafters that run no network of their own, lower case."""

_NO_SPECULATION = frozenset({"", "none"})


def is_model_free(method: str) -> bool:
    """Whether ``method`` (any engine's spelling) drafts without weights of its own."""
    return method.strip().lower() in MODEL_FREE_METHODS


def has_draft_model(method: str) -> bool:
    """Whether ``method`` loads drafter weights (so draft memory can be judged).

    False for no speculation and for the model-free methods (Lookahead among them).
    """
    name = method.strip().lower()
    return name not in _NO_SPECULATION and name not in MODEL_FREE_METHODS
