"""Closed-loop load generator for an OpenAI-compatible server (the proxy or vLLM itself).

``concurrency`` sessions each send one streamed chat completion at a time and the next as soon
as the previous one ends. Requests are numbered in the order they are sent: the first
``warmup`` are warm-up, the next ``measured`` are measured, and any later ones are fillers
that only keep every session busy until the last measured request has finished (then they
are cancelled). Throughput is counted over the measured window, from the first measured
request's start to the last one's end, with every token any request emitted inside it (the
cumulative ``usage`` on each chunk tells when), so the window runs at full concurrency.

Latencies follow ``vllm bench serve``: TTFT from sending to the first chunk with text; TPOT =
(end-to-end - TTFT) / (output tokens - 1), per request, for requests with more than one token.
Acceptance comes from ``metrics.speculative_decoding`` in the final usage chunk (vLLM's
``--per-request-spec-decode-metrics summary``).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from app.domain.errors import Unavailable


class Phase(StrEnum):
    """Which part of a level a request belongs to."""

    warmup = "warmup"
    measured = "measured"
    filler = "filler"


class LoadError(Unavailable):
    """The level could not be measured (no measured request succeeded)."""

    code = "load_failed"


@dataclass(frozen=True, slots=True)
class Prompt:
    """One bundled prompt."""

    id: str
    kind: str
    """``copy`` (the answer repeats the input: summaries, code edits) or ``open``."""
    messages: tuple[dict[str, str], ...]
    max_tokens: int


def load_prompts(path: Path | None = None) -> list[Prompt]:
    """The prompt set: ``path`` (JSONL) or the bundled ``app/data/prompts.jsonl``."""
    if path is None:
        text = resources.files("app").joinpath("data/prompts.jsonl").read_text("utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    prompts = []
    for line in text.splitlines():
        if line.strip():
            item = json.loads(line)
            prompts.append(
                Prompt(
                    id=str(item["id"]),
                    kind=str(item.get("kind", "open")),
                    messages=tuple(item["messages"]),
                    max_tokens=int(item.get("max_tokens", 128)),
                )
            )
    if not prompts:
        raise ValueError("the prompt set is empty")
    return prompts


@dataclass(slots=True)
class RequestResult:
    """One request, filled in while it streams (so a cancelled one keeps what it emitted)."""

    phase: Phase
    session: int
    prompt_id: str
    start: float
    """``time.perf_counter()`` when the request was sent."""
    end: float | None = None
    first_token: float | None = None
    output_tokens: int = 0
    ticks: list[tuple[float, int]] = field(default_factory=list)
    """(time, cumulative output tokens) at each chunk that carried tokens."""
    draft_tokens: int = 0
    accepted_tokens: int = 0
    spec_steps: int = 0
    has_spec_metrics: bool = False
    error: str | None = None

    @property
    def ok(self) -> bool:
        """Finished without error."""
        return self.end is not None and self.error is None

    def tokens_until(self, at: float) -> int:
        """Output tokens emitted up to ``at``."""
        count = 0
        for when, cumulative in self.ticks:
            if when > at:
                break
            count = cumulative
        return count


def _observe(result: RequestResult, obj: dict[str, Any], now: float) -> None:
    choices = obj.get("choices") or []
    has_text = any((c.get("delta") or {}).get("content") or c.get("text") for c in choices)
    if has_text and result.first_token is None:
        result.first_token = now
    usage = obj.get("usage")
    if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
        tokens = usage["completion_tokens"]
        if tokens > result.output_tokens:
            result.ticks.append((now, tokens))
            result.output_tokens = tokens
    spec = (obj.get("metrics") or {}).get("speculative_decoding")
    if isinstance(spec, dict):
        result.has_spec_metrics = True
        result.draft_tokens = int(spec.get("num_draft_tokens") or 0)
        result.accepted_tokens = int(spec.get("num_accepted_draft_tokens") or 0)
        result.spec_steps = int(spec.get("num_spec_steps") or 0)


async def _send(
    client: httpx.AsyncClient,
    result: RequestResult,
    *,
    url: str,
    model: str,
    prompt: Prompt,
    headers: dict[str, str],
) -> None:
    body = {
        "model": model,
        "messages": list(prompt.messages),
        "max_tokens": prompt.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                result.error = f"HTTP {response.status_code}: {text[:300]}"
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                try:
                    obj = json.loads(data)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    _observe(result, obj, time.perf_counter())
    except httpx.HTTPError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        result.end = time.perf_counter()


@dataclass(frozen=True, slots=True)
class LevelRun:
    """Every request of one level, in the order they were sent."""

    concurrency: int
    results: tuple[RequestResult, ...]


async def run_level(
    client: httpx.AsyncClient,
    *,
    base_url: str,
    model: str,
    prompts: Sequence[Prompt],
    concurrency: int,
    measured: int,
    warmup: int,
    label: str = "sweep",
    on_measured: Callable[[int], None] | None = None,
) -> LevelRun:
    """Drive ``concurrency`` closed-loop sessions until ``measured`` requests have finished.

    Args:
        client: HTTP client (its connection limit must allow ``concurrency`` streams).
        base_url: Server root, e.g. ``http://127.0.0.1:8080`` (``/v1`` is appended).
        model: Served model name.
        prompts: Prompt set, used round-robin in sending order.
        concurrency: Concurrent sessions, >= 1.
        measured: Measured requests, >= 1.
        warmup: Warm-up requests sent first, >= 0.
        label: Tag sent as ``X-Tags: sweep=<label>`` and in session ids.
        on_measured: Called with the number of measured requests finished so far.

    Returns:
        The level's requests, including in-flight fillers that were cancelled.
    """
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/chat/completions"
    results: list[RequestResult] = []
    done = asyncio.Event()
    counter = 0
    finished = 0

    async def session(number: int) -> None:
        nonlocal counter, finished
        headers = {
            "X-Session-Id": f"{label}-c{concurrency}-s{number}",
            "X-Tags": f"sweep={label},concurrency={concurrency}",
        }
        while not done.is_set():
            index, counter = counter, counter + 1
            phase = (
                Phase.warmup
                if index < warmup
                else Phase.measured
                if index < warmup + measured
                else Phase.filler
            )
            prompt = prompts[index % len(prompts)]
            result = RequestResult(
                phase=phase, session=number, prompt_id=prompt.id, start=time.perf_counter()
            )
            results.append(result)
            await _send(client, result, url=url, model=model, prompt=prompt, headers=headers)
            if phase is Phase.measured:
                finished += 1
                if on_measured is not None:
                    on_measured(finished)
                if finished >= measured:
                    done.set()

    tasks = [asyncio.create_task(session(n)) for n in range(concurrency)]
    try:
        await done.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return LevelRun(concurrency=concurrency, results=tuple(results))


@dataclass(frozen=True, slots=True, kw_only=True)
class LevelStats:
    """What one (config, concurrency) level measured."""

    concurrency: int
    requests: int
    """Measured requests that succeeded."""
    errors: int
    window_s: float
    output_tokens_per_s: float
    requests_per_s: float
    ttft_s: tuple[float, float, float]
    """p50, p90, p99."""
    tpot_s: tuple[float, float, float]
    acceptance_rate: float
    """Accepted over drafted tokens of the measured requests; NaN without speculation."""
    mean_acceptance_length: float
    """1 + accepted / speculative steps (vLLM's definition); NaN without speculation."""
    gpu_seconds_per_1k_tokens: float
    other_servers: int = 0
    """Other vLLM servers seen running on the machine at the end of the level (they share
    its CPUs or GPUs, so the level's figures are suspect)."""


def _percentiles(values: list[float]) -> tuple[float, float, float]:
    if not values:
        return (math.nan, math.nan, math.nan)
    p50, p90, p99 = np.percentile(np.asarray(values), [50, 90, 99])
    return float(p50), float(p90), float(p99)


def summarize_level(run: LevelRun, *, gpus: int = 1) -> LevelStats:
    """Throughput, latency percentiles and acceptance of one level.

    Args:
        run: The level's requests.
        gpus: Accelerators of the replica (its GPU-seconds are ``gpus x`` the window).

    Returns:
        The level's figures.

    Raises:
        LoadError: If no measured request succeeded.
    """
    measured = [r for r in run.results if r.phase is Phase.measured]
    ok = [r for r in measured if r.ok and r.output_tokens > 0]
    if not ok:
        errors = sorted({r.error or "no tokens" for r in measured})
        raise LoadError(
            f"no measured request succeeded at concurrency {run.concurrency}: "
            f"{'; '.join(errors)[:500]}"
        )
    start = min(r.start for r in measured)
    end = max(r.end for r in measured if r.end is not None)
    window = end - start
    tokens = sum(r.tokens_until(end) - r.tokens_until(start) for r in run.results)
    completed = sum(1 for r in run.results if r.ok and r.end is not None and start < r.end <= end)
    ttft = [r.first_token - r.start for r in ok if r.first_token is not None]
    tpot = [
        (r.end - r.first_token) / (r.output_tokens - 1)
        for r in ok
        if r.end is not None and r.first_token is not None and r.output_tokens > 1
    ]
    spec = [r for r in ok if r.has_spec_metrics]
    drafted = sum(r.draft_tokens for r in spec)
    accepted = sum(r.accepted_tokens for r in spec)
    steps = sum(r.spec_steps for r in spec)
    return LevelStats(
        concurrency=run.concurrency, requests=len(ok), errors=len(measured) - len(ok),
        window_s=window, output_tokens_per_s=tokens / window,
        requests_per_s=completed / window, ttft_s=_percentiles(ttft), tpot_s=_percentiles(tpot),
        acceptance_rate=accepted / drafted if drafted else math.nan,
        # Drafting that never found a proposal (ngram without matches) still emits 1 per step.
        mean_acceptance_length=1.0 + accepted / steps if steps else (1.0 if spec else math.nan),
        gpu_seconds_per_1k_tokens=1000.0 * gpus * window / tokens if tokens else math.nan,
    )  # fmt: skip
