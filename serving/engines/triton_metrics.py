"""Triton Inference Server's Prometheus page, read: pure, no I/O.

Three families matter to the meter (triton-inference-server/server
``docs/user_guide/metrics.md``; triton-inference-server/tensorrtllm_backend ``README.md``,
"Triton Metrics"):

* ``nv_inference_*`` per model and version: request success and failure counts, inference
  and execution counts, cumulative request, queue and compute durations (microseconds),
  the pending-request gauge;
* ``nv_gpu_*`` per GPU (``gpu_uuid`` label): utilization (0-1), memory total and used
  (bytes), power usage and limit (W), and ``nv_energy_consumption`` (J);
* ``nv_trt_llm_*`` gauges of the TensorRT-LLM backend, one label naming the figure
  (``request_type``, ``memory_type``, ``kv_cache_block_type``,
  ``inflight_batcher_specific_metric``, ``general_type``, ...).

None of them carries acceptance: that is only in TensorRT-LLM's iteration stats
(:mod:`serving.engines.trtllm_iteration_stats`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from app.domain.errors import InvalidInput

__all__ = ["Sample", "TritonMetrics", "TritonMetricsError", "parse_prometheus", "parse_triton"]

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|\})')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_FAMILIES = ("nv_inference_", "nv_gpu_", "nv_energy_", "nv_trt_llm_")
_TRT_LLM_FIGURE_LABELS = (
    "request_type",
    "memory_type",
    "kv_cache_block_type",
    "inflight_batcher_specific_metric",
    "v1_specific_metric",
    "general_type",
    "disaggregated_serving_type",
)


class TritonMetricsError(InvalidInput):
    """A metrics page that is not valid Prometheus text."""

    code = "triton_metrics_invalid"


@dataclass(frozen=True, slots=True)
class Sample:
    """One sample line: metric name, labels and value."""

    name: str
    labels: Mapping[str, str]
    value: float


def _unescape(value: str) -> str:
    return re.sub(r"\\[\\\"n]", lambda m: _ESCAPES[m.group(0)], value)


def _parse_line(line: str, where: str) -> Sample:
    match = _NAME.match(line)
    if match is None:
        raise TritonMetricsError(f"{where}: no metric name at the start of {line[:80]!r}")
    name, rest = match.group(0), line[match.end() :]
    labels: dict[str, str] = {}
    if rest.startswith("{"):
        position = 1
        if rest[1:].lstrip().startswith("}"):
            position = rest.index("}") + 1
        else:
            while True:
                label = _LABEL.match(rest, position)
                if label is None:
                    raise TritonMetricsError(
                        f"{where}: malformed labels at column {len(name) + position + 1}"
                    )
                labels[label.group(1)] = _unescape(label.group(2))
                position = label.end()
                if label.group(3) == "}":
                    break
        rest = rest[position:]
    fields = rest.split()
    if not fields:
        raise TritonMetricsError(f"{where}: metric {name} has no value")
    try:
        value = float(fields[0])
    except ValueError:
        raise TritonMetricsError(
            f"{where}: value {fields[0]!r} of {name} is not a number"
        ) from None
    return Sample(name, MappingProxyType(labels), value)


def parse_prometheus(text: str, *, source: str) -> list[Sample]:
    """Every sample of a Prometheus text page (comments and blank lines skipped).

    Raises:
        TritonMetricsError: Naming the source, the line and the column of the first
            malformed line.
    """
    samples = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line and not line.startswith("#"):
            samples.append(_parse_line(line, f"{source}: line {number}"))
    return samples


@dataclass(frozen=True, slots=True)
class TritonMetrics:
    """Triton's figures from one scrape."""

    inference: Mapping[tuple[str, str], Mapping[str, float]] = field(default_factory=dict)
    """Per ``(model, version)``: ``nv_inference_*`` name (without the prefix) to value."""
    gpu: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Per GPU uuid: ``nv_gpu_*`` / ``nv_energy_*`` name (without ``nv_``) to value."""
    trt_llm: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Per ``(family without nv_trt_llm_, figure)``, e.g. ``("kv_cache_block_metrics",
    "used")``; the figure is the value of the family's naming label, summed over other
    labels (model, version)."""

    def model_total(self, name: str) -> float:
        """An ``nv_inference_*`` figure summed over models and versions."""
        return sum(values.get(name, 0.0) for values in self.inference.values())

    def gpu_total(self, name: str) -> float:
        """An ``nv_gpu_*`` figure summed over GPUs (e.g. ``gpu_memory_used_bytes``)."""
        return sum(values.get(name, 0.0) for values in self.gpu.values())


def parse_triton(text: str, *, source: str) -> TritonMetrics:
    """Triton's ``nv_inference_*``, ``nv_gpu_*`` and ``nv_trt_llm_*`` figures from a page.

    Summary and histogram series (``_summary_us`` with ``quantile``, ``_bucket``) are left
    out; other families on the page are ignored.

    Raises:
        TritonMetricsError: For a malformed line, or a non-finite counter, naming the line.
    """
    inference: dict[tuple[str, str], dict[str, float]] = {}
    gpu: dict[str, dict[str, float]] = {}
    trt_llm: dict[tuple[str, str], float] = {}
    for sample in parse_prometheus(text, source=source):
        name, labels = sample.name, sample.labels
        if not name.startswith(_FAMILIES) or "quantile" in labels or name.endswith("_bucket"):
            continue
        if not math.isfinite(sample.value):
            raise TritonMetricsError(f"{source}: {name}{dict(labels)} is {sample.value}")
        if name.startswith("nv_inference_"):
            key = (labels.get("model", ""), labels.get("version", ""))
            figures = inference.setdefault(key, {})
            short = name.removeprefix("nv_inference_")
            figures[short] = figures.get(short, 0.0) + sample.value
        elif name.startswith(("nv_gpu_", "nv_energy_")):
            figures = gpu.setdefault(labels.get("gpu_uuid", ""), {})
            short = name.removeprefix("nv_")
            figures[short] = figures.get(short, 0.0) + sample.value
        else:
            family = name.removeprefix("nv_trt_llm_")
            figure = next((labels[k] for k in _TRT_LLM_FIGURE_LABELS if k in labels), "")
            trt_llm[(family, figure)] = trt_llm.get((family, figure), 0.0) + sample.value
    return TritonMetrics(inference=inference, gpu=gpu, trt_llm=trt_llm)
