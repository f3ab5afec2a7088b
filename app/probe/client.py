"""Send a probe set through the metering proxy: streamed chat completions, timed per
request, with vLLM's per-request speculative-decoding metrics read from the final usage
chunk (``--enable-per-request-metrics``).

Timing follows ``vllm bench serve`` (and serving/load/loadgen.py): TTFT from sending to the
first chunk with text, TPOT = (end-to-end - TTFT) / (output tokens - 1). Output tokens are
the last cumulative ``usage.completion_tokens`` the stream carried.
"""

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from app.probe.probe_set import ProbePrompt
from app.probe.rules.drift import ProbeResponse

ProgressHook = Callable[[str, int, int], None]
"""``hook(description, done, total)``."""

SESSION_HEADER = "X-Session-Id"
EVENT_HEADER = "X-Event-Id"
"""The proxy names each metered request in its response (the usage record's event id)."""


@dataclass(frozen=True, slots=True)
class SentProbe:
    prompt_id: str
    response: ProbeResponse
    event_id: str | None
    error: str | None


@dataclass(slots=True)
class _Stream:
    first_token: float | None = None
    output_tokens: int = 0
    spec: dict[str, Any] | None = None

    def observe(self, chunk: dict[str, Any], now: float) -> None:
        choices = chunk.get("choices") or []
        if self.first_token is None and any(
            (c.get("delta") or {}).get("content") or c.get("text") for c in choices
        ):
            self.first_token = now
        usage = chunk.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            self.output_tokens = max(self.output_tokens, usage["completion_tokens"])
        spec = (chunk.get("metrics") or {}).get("speculative_decoding")
        if isinstance(spec, dict):
            self.spec = spec


def _count(spec: dict[str, Any] | None, name: str) -> int:
    value = (spec or {}).get(name)
    return int(value) if isinstance(value, int | float) and value >= 0 else 0


def _histogram(spec: dict[str, Any] | None) -> tuple[int, ...]:
    value = (spec or {}).get("acceptance_histogram")
    if not isinstance(value, list) or not all(isinstance(v, int) and v >= 0 for v in value):
        return ()
    return tuple(value)


async def send_one(
    client: httpx.AsyncClient,
    prompt: ProbePrompt,
    *,
    url: str,
    model: str,
    headers: dict[str, str],
) -> SentProbe:
    """One streamed chat completion, timed; a failure is a result, never an exception."""
    body = {
        "model": model,
        "messages": list(prompt.messages),
        "max_tokens": prompt.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    stream = _Stream()
    error: str | None = None
    event_id: str | None = None
    start = time.perf_counter()
    try:
        async with client.stream("POST", url, json=body, headers=headers) as response:
            event_id = response.headers.get(EVENT_HEADER)
            if response.status_code != 200:
                text = (await response.aread()).decode("utf-8", "replace")
                error = f"HTTP {response.status_code}: {text[:300]}"
            else:
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        break
                    try:
                        chunk = json.loads(data)
                    except json.JSONDecodeError:
                        continue
                    if isinstance(chunk, dict):
                        if isinstance(chunk.get("error"), dict):
                            error = str(chunk["error"].get("message", "error"))[:300]
                        stream.observe(chunk, time.perf_counter())
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    end = time.perf_counter()
    spec = stream.spec
    ok = error is None and stream.output_tokens > 0
    if error is None and not ok:
        error = "no tokens"
    return SentProbe(
        prompt_id=prompt.id,
        event_id=event_id,
        error=error,
        response=ProbeResponse(
            ok=ok,
            seconds=end - start,
            ttft_s=None if stream.first_token is None else stream.first_token - start,
            output_tokens=stream.output_tokens,
            num_drafts=_count(spec, "num_spec_steps"),
            draft_tokens=_count(spec, "num_draft_tokens"),
            accepted_tokens=_count(spec, "num_accepted_draft_tokens"),
            histogram=_histogram(spec),
        ),
    )


async def send_all(
    prompts: Sequence[ProbePrompt],
    *,
    base_url: str,
    api_key: str,
    model: str,
    session_id: str,
    tags: str,
    concurrency: int,
    timeout_s: float,
    progress: ProgressHook | None = None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[list[SentProbe], float]:
    """Every prompt once, ``concurrency`` at a time, in the set's order; the results in
    that order and the wall seconds from the first send to the last end."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/chat/completions"
    headers = {"Authorization": f"Bearer {api_key}", SESSION_HEADER: session_id, "X-Tags": tags}
    results: list[SentProbe | None] = [None] * len(prompts)
    queue = list(enumerate(prompts))
    done = 0
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits, transport=transport) as client:

        async def worker() -> None:
            nonlocal done
            while queue:
                index, prompt = queue.pop(0)
                results[index] = await send_one(
                    client, prompt, url=url, model=model, headers=headers
                )
                done += 1
                if progress is not None:
                    progress(f"probe {prompt.id}", done, len(prompts))

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(prompts)))))
        wall = time.perf_counter() - started
    return [r for r in results if r is not None], wall


async def served_model(
    base_url: str,
    api_key: str,
    *,
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> str | None:
    """The first model the proxy lists for this key (its deployments' models), or None.

    Raises:
        httpx.HTTPError: If the proxy cannot be reached or answers with an error.
        ValueError: If it answers with something other than a model list.
    """
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/models"
    async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as client:
        response = await client.get(url, headers={"Authorization": f"Bearer {api_key}"})
        response.raise_for_status()
        body = response.json()
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        raise ValueError("the answer to GET /v1/models holds no model list")
    ids = [str(item["id"]) for item in data if isinstance(item, dict) and item.get("id")]
    return ids[0] if ids else None
