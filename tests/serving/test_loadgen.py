"""The closed-loop load generator against the fake vLLM: phases, window, vLLM's definitions."""

import asyncio
import math

import httpx
import pytest

from serving.load.loadgen import (
    LevelRun,
    LoadError,
    Phase,
    Prompt,
    RequestResult,
    load_prompts,
    run_level,
    summarize_level,
)
from tests.serving.fake_vllm import FakeVllm

SLOW = Prompt(
    id="slow", kind="copy", messages=({"role": "user", "content": "SLOW copy"},), max_tokens=12
)


def _run(
    fake: FakeVllm,
    *,
    concurrency: int,
    measured: int,
    warmup: int,
    prompts: tuple[Prompt, ...] = (SLOW,),
) -> LevelRun:
    async def go() -> LevelRun:
        async with httpx.AsyncClient(transport=fake.transport()) as client:
            return await run_level(
                client,
                base_url="http://fake:8000/v1",
                model="fake-model",
                prompts=prompts,
                concurrency=concurrency,
                measured=measured,
                warmup=warmup,
            )

    return asyncio.run(go())


def test_bundled_prompts_mix_copy_heavy_and_open_ended() -> None:
    prompts = load_prompts()
    kinds = [p.kind for p in prompts]
    assert kinds.count("copy") >= 12
    assert kinds.count("open") >= 6
    assert all(p.max_tokens == 128 for p in prompts)
    assert len({p.id for p in prompts}) == len(prompts)


def test_level_runs_warmup_then_measured_then_cancels_fillers() -> None:
    fake = FakeVllm(k=4, slow_chunk_s=0.02)
    run = _run(fake, concurrency=3, measured=5, warmup=3)
    phases = [r.phase for r in run.results]
    assert phases[:3] == [Phase.warmup] * 3
    assert phases[3:8] == [Phase.measured] * 5
    assert all(p is Phase.filler for p in phases[8:])
    measured = [r for r in run.results if r.phase is Phase.measured]
    assert all(r.ok and r.output_tokens == 12 for r in measured)
    # every request asked for usage on each chunk, greedily
    assert all(
        b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
        for b in fake.bodies
    )
    assert {b["temperature"] for b in fake.bodies} == {0.0}


def test_summary_uses_vllm_definitions() -> None:
    run = _run(FakeVllm(k=4, slow_chunk_s=0.02), concurrency=2, measured=4, warmup=2)
    stats = summarize_level(run, gpus=4)
    assert stats.requests == 4
    assert stats.errors == 0
    # fake steps (1, 5, 1, 3, 2): 4 spec steps, 16 drafted, 7 accepted per request
    assert stats.acceptance_rate == pytest.approx(7 / 16)
    assert stats.mean_acceptance_length == pytest.approx(1 + 7 / 4)
    measured = [r for r in run.results if r.phase is Phase.measured]
    tpots = sorted((r.end - r.first_token) / 11 for r in measured)  # type: ignore[operator]
    assert stats.tpot_s[0] == pytest.approx((tpots[1] + tpots[2]) / 2)
    assert stats.ttft_s[0] > 0.015  # the role chunk and the first token each wait 20 ms
    # all 4 x 12 measured tokens lie inside the window, plus parts of warm-ups and fillers
    tokens = stats.output_tokens_per_s * stats.window_s
    assert 48 <= round(tokens) <= 48 + 2 * 12
    assert stats.gpu_seconds_per_1k_tokens == pytest.approx(
        1000 * 4 * stats.window_s / (stats.output_tokens_per_s * stats.window_s)
    )


def _result(
    phase: Phase, start: float, end: float, ticks: list[tuple[float, int]]
) -> RequestResult:
    return RequestResult(
        phase=phase,
        session=0,
        prompt_id="p",
        start=start,
        end=end,
        first_token=ticks[0][0],
        output_tokens=ticks[-1][1],
        ticks=ticks,
    )


def test_window_counts_every_token_emitted_inside_it() -> None:
    run = LevelRun(
        concurrency=2,
        results=(
            _result(Phase.warmup, 0.0, 2.0, [(0.5, 1), (1.5, 5), (2.0, 10)]),
            _result(Phase.measured, 1.0, 3.0, [(1.2, 1), (2.0, 6), (3.0, 11)]),
            _result(Phase.measured, 2.0, 4.0, [(2.5, 1), (4.0, 9)]),
            _result(Phase.filler, 3.0, 5.0, [(3.5, 4), (5.0, 8)]),
        ),
    )
    stats = summarize_level(run)
    assert stats.window_s == 3.0  # first measured start 1.0 .. last measured end 4.0
    # warm-up: 10 - 1 = 9 after t=1; measured: 11 and 9; filler: 4 by t=4
    assert stats.output_tokens_per_s == pytest.approx((9 + 11 + 9 + 4) / 3.0)
    assert stats.requests_per_s == pytest.approx(3 / 3.0)  # warm-up, two measured end inside
    assert stats.tpot_s[0] == pytest.approx(((3.0 - 1.2) / 10 + (4.0 - 2.5) / 8) / 2)
    assert math.isnan(stats.acceptance_rate)
    assert math.isnan(stats.mean_acceptance_length)


def test_errors_are_counted_and_a_dead_level_is_an_error() -> None:
    bad = Prompt(
        id="bad", kind="open", messages=({"role": "user", "content": "FAIL400"},), max_tokens=8
    )
    run = _run(FakeVllm(), concurrency=1, measured=2, warmup=0, prompts=(bad,))
    assert all(r.error and r.error.startswith("HTTP 400") for r in run.results)
    with pytest.raises(LoadError, match="no measured request succeeded at concurrency 1"):
        summarize_level(run)
