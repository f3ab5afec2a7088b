"""Triton's Prometheus page (written from its documentation) parsed into the meter's
figures."""

import pytest

from serving.engines.triton_metrics import TritonMetricsError, parse_prometheus, parse_triton
from tests.conftest import FIXTURES

PAGE = (FIXTURES / "engines" / "triton_metrics.txt").read_text(encoding="utf-8")
GPU0 = "GPU-4a1c2b3d-0000-1111-2222-333344445555"


def test_inference_counters_are_read_per_model_and_version() -> None:
    metrics = parse_triton(PAGE, source="triton_metrics.txt")

    model = metrics.inference[("tensorrt_llm", "1")]
    assert model["request_success"] == 12
    assert model["request_duration_us"] == 4_823_150
    assert model["compute_infer_duration_us"] == 4_790_004
    assert model["pending_request_count"] == 2
    assert "request_summary_us" not in model  # quantiles are left out
    assert metrics.model_total("request_failure") == 1
    assert metrics.model_total("request_success") == 24


def test_gpu_gauges_are_read_per_gpu() -> None:
    metrics = parse_triton(PAGE, source="triton_metrics.txt")

    assert metrics.gpu[GPU0]["gpu_utilization"] == pytest.approx(0.87)
    assert metrics.gpu[GPU0]["energy_consumption"] == pytest.approx(1_234_567.5)
    assert metrics.gpu_total("gpu_memory_used_bytes") == 2 * 77_309_411_328
    assert metrics.gpu_total("gpu_power_usage") == pytest.approx(590.75)
    assert "" not in metrics.gpu  # nv_cpu_utilization is not a GPU figure


def test_trt_llm_gauges_are_keyed_by_their_naming_label() -> None:
    metrics = parse_triton(PAGE, source="triton_metrics.txt")

    assert metrics.trt_llm[("request_metrics", "active")] == 2
    assert metrics.trt_llm[("kv_cache_block_metrics", "used")] == 3
    assert metrics.trt_llm[("inflight_batcher_metrics", "paused_requests")] == 0
    assert metrics.trt_llm[("general_metrics", "iteration_counter")] == 156
    assert not any("accept" in family for family, _ in metrics.trt_llm)


def test_label_values_keep_escaped_quotes_commas_and_braces() -> None:
    (sample,) = parse_prometheus(
        'nv_inference_count{model="a \\"b\\", {c}",version="1"} 3 1733300000000', source="s"
    )
    assert sample.labels == {"model": 'a "b", {c}', "version": "1"}
    assert sample.value == 3


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('nv_inference_count{model="a" 3', r"page\.txt: line 2: malformed labels at column 20"),
        ("nv_gpu_utilization{} ", r"line 2: metric nv_gpu_utilization has no value"),
        ("nv_gpu_utilization 0.5x", r"line 2: value '0\.5x' of nv_gpu_utilization"),
        ("9bad 1", r"line 2: no metric name"),
    ],
)
def test_a_malformed_line_is_refused_naming_line_and_column(line: str, message: str) -> None:
    with pytest.raises(TritonMetricsError, match=message):
        parse_triton("# TYPE x gauge\n" + line + "\n", source="page.txt")
