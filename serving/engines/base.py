"""The engine adapter boundary: what differs between inference servers, behind one interface.

The launcher and the metering proxy talk to any engine through an :class:`EngineAdapter`:
how it is started (argv, files it reads, environment), where its health and metrics pages
are, which stream options it understands, and where a request's speculative-decoding
figures come from (:class:`SpecSource`). Everything engine-specific stays in the adapter
modules (:mod:`serving.engines.vllm`, :mod:`serving.engines.trtllm`,
:mod:`serving.engines.triton`).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from app.domain.errors import Unavailable
from app.domain.speculation_methods import EngineKind
from serving.engine.config import EngineConfig

__all__ = ["EngineAdapter", "EngineError", "SpecSource", "UnsupportedEngineConfig"]


class EngineError(Unavailable):
    """Base class for engine life-cycle failures."""

    code = "engine_error"


class UnsupportedEngineConfig(EngineError):
    """A setting the engine would accept at start-up but fail on later (or not at all)."""


class SpecSource(StrEnum):
    """Where the proxy finds a request's drafted and accepted tokens."""

    response = "response"
    """In the response body (vLLM's per-request metrics)."""
    iteration_stats = "iteration_stats"
    """In the engine's iteration stats, apportioned to the requests active in each iteration
    (TensorRT-LLM's ``specDecodingStats``)."""
    unavailable = "unavailable"
    """Nowhere the proxy can read: records carry tokens and timings only."""


class EngineAdapter(Protocol):
    """What the launcher and the proxy need to know about one kind of engine."""

    @property
    def kind(self) -> EngineKind: ...

    @property
    def health_path(self) -> str:
        """Path answering 200 once the server takes requests."""
        ...

    @property
    def metrics_path(self) -> str:
        """Path of the page the proxy scrapes for engine counters."""
        ...

    @property
    def spec_source(self) -> SpecSource: ...

    @property
    def stream_options(self) -> Mapping[str, bool]:
        """``stream_options`` the proxy adds to a streamed request to meter it."""
        ...

    def build_argv(self, config: EngineConfig, *, config_dir: Path) -> list[str]:
        """The command line that starts ``config``'s server (files under ``config_dir``)."""
        ...

    def launch_files(self, config: EngineConfig, *, config_dir: Path) -> dict[Path, str]:
        """Files the server reads at start-up, by path, to be written before it starts."""
        ...

    def check_supported(self, config: EngineConfig) -> None:
        """Raise :class:`UnsupportedEngineConfig` for settings known to fail."""
        ...

    def missing_runtime(self, config: EngineConfig) -> str | None:
        """Why the server's program cannot be started here, or None when it can."""
        ...

    def spec_method(self, config: EngineConfig) -> tuple[str, int | None]:
        """The speculation method as the engine names it, and ``k`` (drafted tokens per
        step), for usage records."""
        ...
