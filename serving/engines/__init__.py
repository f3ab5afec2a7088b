"""Engine adapters: vLLM, TensorRT-LLM (``trtllm-serve``) and Triton, behind
:class:`~serving.engines.base.EngineAdapter`."""

from __future__ import annotations

from app.domain.speculation_methods import EngineKind
from serving.engines.base import EngineAdapter, SpecSource
from serving.engines.triton import TritonAdapter
from serving.engines.trtllm import TrtllmAdapter
from serving.engines.vllm import VllmAdapter

__all__ = ["EngineAdapter", "EngineKind", "SpecSource", "adapter_for"]

_ADAPTERS: dict[EngineKind, EngineAdapter] = {
    EngineKind.vllm: VllmAdapter(),
    EngineKind.trtllm: TrtllmAdapter(),
    EngineKind.triton: TritonAdapter(),
}


def adapter_for(kind: str) -> EngineAdapter:
    """The adapter of engine ``kind`` (``vllm``, ``trtllm`` or ``triton``).

    Raises:
        ValueError: For an unknown kind.
    """
    return _ADAPTERS[EngineKind(kind)]
