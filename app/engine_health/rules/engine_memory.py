"""The draft model's memory, measured from vLLM's own start-up log, priced, and judged.

vLLM loads the drafter inside the target's worker process, so neither NVML nor DCGM can split
draft from target memory (reference/usage-sources.md B5). vLLM's start-up log can: start the
same engine twice, once without and once with the drafter, and compare what it printed.

The lines read (format strings of vLLM 0.32, the pinned release; ``X`` is GiB with two
decimals, vLLM's ``format_gib``)::

    CPU KV cache size: 278,784 tokens, Maximum concurrency for 2,048 tokens per request: 136.12x
    GPU KV cache size: 417,376 tokens, Maximum concurrency for 8,192 tokens per request: 50.95x
        (v1/core/kv_cache_utils.py; "CPU" on the CPU backend, "GPU" on CUDA)
    Auto set (5.98/23.54) GiB for KV cache on node 0, with 7.06 GiB requested memory for the
        worker. 1.08 GiB memory was consumed by non-kv usages.        (v1/worker/cpu_worker.py)
    Explicitly set (X/T) GiB for KV cache on node N.     (CPU, with VLLM_CPU_KVCACHE_SPACE)
    Model loading took X GiB memory and S seconds          (v1/worker/gpu_model_runner.py)
    Available KV cache memory: X GiB                       (v1/worker/gpu_worker.py)
    Free memory on device (F/T GiB) on startup. Desired GPU memory utilization is (U, R GiB).
        Actual usage is X GiB for consumed memory (weights + non-torch), ...  (gpu_worker.py)
    Loading drafter model...                     (the CPU and GPU model runners)
    Filesystem type for checkpoints: EXT4. Checkpoint size: X GiB. Available RAM: Y GiB.
        (model_executor/model_loader/weight_utils.py; after "Loading drafter model...", the
        drafter's own checkpoint)
    Initializing a V1 LLM engine (v0.32.0) with config: ..., speculative_config=None, ...

The CPU lines come from real logs of this project's machines (tests/fixtures/vllm_logs); the
GPU lines follow the format strings above (no GPU was at hand).

**The draft's memory.** With the same memory budget, the drafter takes memory from the KV
cache twice: its weights (and buffers) come out of the budget, and its own layers need KV
entries for every token, so each token costs more. Both show in one number, the KV capacity
in tokens: ``T0`` without the drafter, ``T1`` with it. With ``b = KV0 / T0`` the target's KV
bytes per token, the draft holds ``M = (T0 - T1) * b`` bytes of the target's KV cache; of
that, ``KV0 - KV1`` left the KV budget (weights, buffers) and the rest, ``KV1 - T1 * b``, is
the drafter's own KV cache.

**Its price.** ``M`` as a share of the memory vLLM was given on the device (the requested
budget, ``gpu_memory_utilization`` x device memory; the device's total memory when the log
does not say), times the deployment's GPU cost in the window.

**The waste rule.** Without the drafter the same memory holds ``R = T0 / T1`` times as many
tokens, so ``R`` times as many concurrent sequences of any length; while decoding is
memory-bound, throughput grows with the sequences in the batch, so once the KV cache is what
limits the batch, the memory would serve up to ``R`` times the throughput as KV cache.
Speculation serves ``S`` times plain decoding's throughput at the same batch, ``S`` taken at
the batch where the KV cache fills with the drafter loaded (``T1 / L`` sequences of ``L``
tokens). The draft's memory serves more than it saves when ``S < R``; the finding costs the
draft memory's price. ``S`` comes from the deployment's fitted breakeven curve when there is
one, else from its measured acceptance as Leviathan's batch-one speedup
``E / (1 + k c)`` (an upper bound: the speedup only falls as the batch grows in the step-time
model of app.breakeven.rules), with ``c`` the draft's weights over the target's (decode is
memory-bound, so step time follows bytes read). A drafter loaded while nothing was
speculated is reserved and unused: the whole price is waste. Linear throughput in the batch
favours the KV cache; where decoding has turned compute-bound, the KV's real value is lower
and ``S < R`` overstates the case, which the finding's detail says.
"""

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from app.breakeven.rules.curve import speedup_at
from app.breakeven.rules.speculation import alpha_from_acceptance_length, walltime_speedup
from app.domain.errors import InvalidInput
from app.domain.findings import Finding, FindingKind, Scope, monthly
from app.domain.money import format_micros
from app.domain.speculation_methods import MODEL_FREE_METHODS as MODEL_FREE_METHODS
from app.domain.speculation_methods import has_draft_model

GIB = 1 << 30
"""vLLM's GiB (``format_gib``: bytes / 2**30, rounded to two decimals)."""

GIB_RESOLUTION_BYTES = GIB // 200
"""Half of vLLM's last printed digit (0.005 GiB): the uncertainty of a figure read from GiB."""


class StartupLogError(InvalidInput):
    """A vLLM log that does not hold the start-up figures needed (or holds others)."""

    code = "startup_log_invalid"


_NUM = r"([0-9]+(?:\.[0-9]+)?)"
_KV_SIZE = re.compile(
    r"\b([A-Z]+(?: \+ host)?) KV cache size: ([0-9,]+) tokens, Maximum concurrency for "
    r"([0-9,]+) tokens per request: " + _NUM + "x"
)
_CPU_AUTO = re.compile(
    rf"Auto set \({_NUM}/{_NUM}\) GiB for KV cache on node (-?[0-9]+), with {_NUM} GiB "
    rf"requested memory for the worker\. {_NUM} GiB memory was consumed by non-kv usages"
)
_CPU_EXPLICIT = re.compile(rf"Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache on node (-?[0-9]+)")
_GPU_AVAILABLE = re.compile(rf"Available KV cache memory: {_NUM} GiB")
_GPU_MODEL_LOADING = re.compile(rf"Model loading took {_NUM} (GiB|GB)")
_GPU_FREE = re.compile(
    rf"Free memory on device \({_NUM}/{_NUM} GiB\) on startup\. Desired GPU memory "
    rf"utilization is \({_NUM}, {_NUM} GiB\)\. Actual usage is {_NUM} GiB for consumed memory"
)
_DRAFTER = re.compile(r"Loading drafter model\.\.\.")
_CHECKPOINT = re.compile(rf"Checkpoint size: {_NUM} GiB")
_ENGINE = re.compile(r"Initializing a V1 LLM engine \(v([^)\s]+)\)")
_SPEC_NONE = re.compile(r"speculative_config=None")
_SPEC = re.compile(
    r"speculative_config=SpeculativeConfig\(method='([^']*)'(?:, model=(?:'([^']*)'|None))?"
    r"(?:, num_spec_tokens=([0-9]+))?"
)
_THREADS_BIND = re.compile(r"VLLM_CPU_OMP_THREADS_BIND='([^']*)'")
_CORE_IDS = re.compile(r"local_rank=([0-9]+), core ids=\[([0-9, ]*)\]")
_SHARED_EMBEDDINGS = re.compile(r"Sharing target model (?:embedding|lm_head) weights")


def gib_bytes(text: str) -> int:
    """Bytes of a GiB figure as vLLM prints it (``"5.98"`` -> 6,420,959,887)."""
    return round(float(text) * GIB)


@dataclass(frozen=True, slots=True, kw_only=True)
class StartupMemory:
    """What one vLLM start-up log says about memory. Per-worker figures are the first
    worker's (with tensor parallelism each GPU holds its share of weights and KV alike)."""

    device: str
    """vLLM's name of the KV cache's pool: ``CPU`` or ``GPU``."""
    kv_cache_tokens: int
    max_model_len: int
    max_concurrency: float
    """Requests of ``max_model_len`` tokens the KV cache holds at once."""
    kv_cache_bytes: int | None
    requested_bytes: int | None
    """The memory vLLM was given on the device (``gpu_memory_utilization`` x memory)."""
    device_total_bytes: int | None
    non_kv_bytes: int | None
    """CPU: resident memory besides the KV cache; GPU: weights + non-torch memory."""
    weights_bytes: int | None
    """GPU: ``Model loading took`` (the drafter included when one is loaded)."""
    numa_node: int | None
    """CPU: the node the KV cache was allocated on."""
    checkpoint_bytes: int | None
    """The target's checkpoint size on disk."""
    drafter_loaded: bool
    draft_checkpoint_bytes: int | None
    """The drafter's checkpoint size on disk (its own load line)."""
    speculative_method: str | None
    draft_model: str | None
    num_speculative_tokens: int | None
    shares_target_embeddings: bool
    """MTP/EAGLE heads that reuse the target's embedding or lm_head weights."""
    vllm_version: str | None
    threads_bind: str | None
    """``VLLM_CPU_OMP_THREADS_BIND`` as the CPU backend read it."""
    bound_cpus: tuple[tuple[int, ...], ...] = ()
    """The CPU ids each local rank's OpenMP threads were bound to."""
    workers: int = 1

    @property
    def speculative(self) -> bool:
        return self.speculative_method is not None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_startup_log(lines: Iterable[str], *, source: str = "log") -> StartupMemory:
    """Read the memory figures of one vLLM start-up from its log.

    Args:
        lines: The log's lines (a file object will do).
        source: Names the log in errors.

    Returns:
        The figures; those a device does not print are None.

    Raises:
        StartupLogError: If no KV cache size line is found (the engine did not finish
            starting), or the log holds two starts with different figures.
    """
    kv: tuple[str, int, int, float] | None = None
    kv_bytes = requested = total = non_kv = weights = node = None
    checkpoint = draft_checkpoint = None
    drafter = shares = False
    method = draft_model = version = bind = None
    spec_tokens: int | None = None
    spec_seen = False
    cores: dict[int, tuple[int, ...]] = {}
    workers = 0
    for number, line in enumerate(lines, start=1):
        if match := _KV_SIZE.search(line):
            found = (
                match[1],
                int(match[2].replace(",", "")),
                int(match[3].replace(",", "")),
                float(match[4]),
            )
            if kv is not None and found != kv:
                raise StartupLogError(
                    f"{source}, line {number}: a second KV cache size ({found[1]:,} tokens "
                    f"against {kv[1]:,}); keep one engine start per log"
                )
            kv = found
        elif match := _CPU_AUTO.search(line):
            workers += 1
            if kv_bytes is None:
                kv_bytes, total = gib_bytes(match[1]), gib_bytes(match[2])
                node = int(match[3])
                requested, non_kv = gib_bytes(match[4]), gib_bytes(match[5])
        elif match := _CPU_EXPLICIT.search(line):
            workers += 1
            if kv_bytes is None:
                kv_bytes, total, node = gib_bytes(match[1]), gib_bytes(match[2]), int(match[3])
        elif match := _GPU_AVAILABLE.search(line):
            workers += 1
            if kv_bytes is None:
                kv_bytes = gib_bytes(match[1])
        elif match := _GPU_MODEL_LOADING.search(line):
            if weights is None:
                unit = GIB if match[2] == "GiB" else 10**9
                weights = round(float(match[1]) * unit)
        elif match := _GPU_FREE.search(line):
            if total is None:
                total, requested = gib_bytes(match[2]), gib_bytes(match[4])
                non_kv = gib_bytes(match[5])
        elif _DRAFTER.search(line):
            drafter = True
        elif match := _CHECKPOINT.search(line):
            if drafter and draft_checkpoint is None:
                draft_checkpoint = gib_bytes(match[1])
            elif not drafter and checkpoint is None:
                checkpoint = gib_bytes(match[1])
        elif _ENGINE.search(line) or _SPEC_NONE.search(line) or _SPEC.search(line):
            if match := _ENGINE.search(line):
                version = version or match[1]
            if match := _SPEC.search(line):
                spec_seen = True
                method, draft_model = match[1], match[2]
                spec_tokens = int(match[3]) if match[3] else None
            elif _SPEC_NONE.search(line):
                spec_seen = True
        elif match := _THREADS_BIND.search(line):
            bind = bind or match[1]
        elif match := _CORE_IDS.search(line):
            ids = tuple(int(x) for x in match[2].replace(" ", "").split(",") if x)
            cores.setdefault(int(match[1]), ids)
        elif _SHARED_EMBEDDINGS.search(line):
            shares = True
    if kv is None:
        raise StartupLogError(
            f"{source}: no 'KV cache size: N tokens' line; the engine did not finish starting "
            "(or this is not a vLLM log)"
        )
    if not spec_seen and drafter:
        method = "unknown"
    device, tokens, max_len, concurrency = kv
    return StartupMemory(
        device=device,
        kv_cache_tokens=tokens,
        max_model_len=max_len,
        max_concurrency=concurrency,
        kv_cache_bytes=kv_bytes,
        requested_bytes=requested,
        device_total_bytes=total,
        non_kv_bytes=non_kv,
        weights_bytes=weights,
        numa_node=node,
        checkpoint_bytes=checkpoint,
        drafter_loaded=drafter,
        draft_checkpoint_bytes=draft_checkpoint,
        speculative_method=method,
        draft_model=draft_model,
        num_speculative_tokens=spec_tokens,
        shares_target_embeddings=shares,
        vllm_version=version,
        threads_bind=bind,
        bound_cpus=tuple(cores[rank] for rank in sorted(cores)),
        workers=max(workers, 1),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftMemory:
    """The drafter's memory, from a start-up without it and one with it."""

    device: str
    method: str
    draft_model: str | None
    tokens_without: int
    tokens_with: int
    kv_bytes_without: int
    kv_bytes_with: int
    bytes_per_token: float
    """The target's KV bytes per token (``KV0 / T0``)."""
    draft_bytes: int
    """``(T0 - T1) * b``: the target KV cache the drafter holds, never below 0."""
    out_of_budget_bytes: int
    """``KV0 - KV1``: weights and buffers the drafter took out of the KV budget."""
    draft_kv_bytes: int
    """``KV1 - T1 * b``: the drafter's own KV cache."""
    draft_weights_bytes: int | None
    """The drafter's weights: the difference of ``Model loading took`` (GPU) or the
    drafter's checkpoint size (CPU)."""
    target_weights_bytes: int | None
    pool_bytes: int
    """The memory vLLM was given on the device: the basis of the share."""
    pool_basis: str
    """``requested`` (the engine's budget) or ``device`` (the device's total memory)."""
    max_model_len: int

    @property
    def share(self) -> float:
        """The draft's share of the replica's memory."""
        return self.draft_bytes / self.pool_bytes

    @property
    def capacity_ratio(self) -> float:
        """``R = T0 / T1``: how many times the tokens (and concurrent sequences) the KV cache
        holds without the drafter."""
        return self.tokens_without / self.tokens_with

    @property
    def draft_cost_ratio(self) -> float | None:
        """Leviathan's ``c`` as memory-bound decode sees it: draft weights over target
        weights."""
        if not self.draft_weights_bytes or not self.target_weights_bytes:
            return None
        return self.draft_weights_bytes / self.target_weights_bytes

    def kv_concurrency(self, tokens_per_request: float | None = None) -> float:
        """Requests of ``tokens_per_request`` tokens (default: ``max_model_len``) the KV cache
        holds at once with the drafter loaded."""
        length = tokens_per_request if tokens_per_request and tokens_per_request > 0 else None
        return self.tokens_with / (length or self.max_model_len)

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "share": self.share,
            "capacity_ratio": self.capacity_ratio,
            "draft_cost_ratio": self.draft_cost_ratio,
        }


def draft_memory(
    *, baseline: StartupMemory, drafted: StartupMemory, pool_bytes: int | None = None
) -> DraftMemory:
    """The drafter's memory from two start-ups of the same engine, without and with it.

    Args:
        baseline: The start-up without speculation.
        drafted: The start-up with the drafter.
        pool_bytes: The replica's memory, when neither log says it (GPU logs print it only
            when vLLM sized the KV cache itself).

    Raises:
        StartupLogError: If the logs are the wrong way round, from different devices or
            budgets, or lack the KV cache memory.
    """
    if baseline.speculative or baseline.drafter_loaded:
        raise StartupLogError(
            f"the baseline log ran with speculation ({baseline.speculative_method}); "
            "start the engine once without --speculative-config"
        )
    if not drafted.speculative:
        raise StartupLogError("the drafted log ran without speculation (speculative_config=None)")
    if baseline.device != drafted.device:
        raise StartupLogError(
            f"the logs come from different devices ({baseline.device}, {drafted.device})"
        )
    if baseline.kv_cache_bytes is None or drafted.kv_cache_bytes is None:
        raise StartupLogError(
            "a log lacks the KV cache memory line ('Available KV cache memory' on GPU, "
            "'... GiB for KV cache on node N' on CPU)"
        )
    for name in ("requested_bytes", "max_model_len"):
        a, b = getattr(baseline, name), getattr(drafted, name)
        tolerance = 2 * GIB_RESOLUTION_BYTES if name == "requested_bytes" else 0
        if a is not None and b is not None and abs(a - b) > tolerance:
            raise StartupLogError(
                f"the two starts differ in {name.removesuffix('_bytes')} ({a} against {b}); "
                "compare starts with the same memory settings"
            )
    t0, t1 = baseline.kv_cache_tokens, drafted.kv_cache_tokens
    if t0 <= 0 or t1 <= 0:
        raise StartupLogError(f"a KV cache of no tokens ({t0}, {t1})")
    per_token = baseline.kv_cache_bytes / t0
    draft_weights: int | None
    target_weights: int | None
    if baseline.weights_bytes is not None and drafted.weights_bytes is not None:
        draft_weights = drafted.weights_bytes - baseline.weights_bytes
        target_weights = baseline.weights_bytes
    else:
        draft_weights = drafted.draft_checkpoint_bytes
        target_weights = baseline.checkpoint_bytes
    pool, basis = _pool(baseline, drafted, pool_bytes)
    total = max(0, round((t0 - t1) * per_token))
    out_of_budget = baseline.kv_cache_bytes - drafted.kv_cache_bytes
    return DraftMemory(
        device=drafted.device,
        method=drafted.speculative_method or "unknown",
        draft_model=drafted.draft_model,
        tokens_without=t0,
        tokens_with=t1,
        kv_bytes_without=baseline.kv_cache_bytes,
        kv_bytes_with=drafted.kv_cache_bytes,
        bytes_per_token=per_token,
        draft_bytes=total,
        out_of_budget_bytes=out_of_budget,
        draft_kv_bytes=total - out_of_budget,
        draft_weights_bytes=draft_weights,
        target_weights_bytes=target_weights,
        pool_bytes=pool,
        pool_basis=basis,
        max_model_len=drafted.max_model_len,
    )


def _pool(baseline: StartupMemory, drafted: StartupMemory, given: int | None) -> tuple[int, str]:
    if given is not None:
        if given <= 0:
            raise StartupLogError(f"the replica's memory must be positive, got {given} bytes")
        return given, "given"
    for log in (drafted, baseline):
        if log.requested_bytes:
            return log.requested_bytes, "requested"
    for log in (drafted, baseline):
        if log.device_total_bytes:
            return log.device_total_bytes, "device"
    raise StartupLogError(
        "neither log says how much memory the engine was given; pass the replica's memory "
        "(GiB of one GPU)"
    )


def draft_memory_price(memory: DraftMemory, cost_micros: int) -> int:
    """The draft memory's part of ``cost_micros`` (the replica's or deployment's GPU cost)."""
    return round(cost_micros * memory.draft_bytes / memory.pool_bytes)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeculationEvidence:
    """What the deployment's traffic says about speculation in the window."""

    requests: int
    """Speculative requests."""
    num_drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    k: int | None = None
    tokens_per_request: float | None = None
    """Mean prompt + completion tokens of a request: ``L`` of the KV concurrency."""
    curve: Sequence[tuple[float, float]] = ()
    """The fitted breakeven curve's (concurrency, speedup) points, if any."""
    sweep_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SpeedupEstimate:
    speedup: float
    source: str
    concurrency: float
    """Where it was taken: the batch at which the KV cache fills with the drafter loaded."""


def speedup_estimate(memory: DraftMemory, evidence: SpeculationEvidence) -> SpeedupEstimate | None:
    """``S`` of the waste rule: from the breakeven curve at the KV-full batch, else the
    batch-one bound from the measured acceptance; None without either."""
    batch = memory.kv_concurrency(evidence.tokens_per_request)
    if evidence.curve:
        return SpeedupEstimate(
            speedup=speedup_at(evidence.curve, batch),
            source=f"breakeven curve of sweep {evidence.sweep_id} at concurrency {batch:.1f}",
            concurrency=batch,
        )
    if evidence.num_drafts <= 0 or evidence.draft_tokens <= 0 or not evidence.k:
        return None
    accepted = min(evidence.accepted_tokens, evidence.draft_tokens)
    length = min(max((accepted + evidence.num_drafts) / evidence.num_drafts, 1.0), evidence.k + 1)
    alpha = alpha_from_acceptance_length(mean_acceptance_length=length, k=evidence.k)
    c = memory.draft_cost_ratio or 0.0
    return SpeedupEstimate(
        speedup=walltime_speedup(alpha=alpha, k=evidence.k, cost_ratio=c),
        source=(
            f"batch-one bound E/(1+kc) at acceptance {accepted / evidence.draft_tokens:.1%} "
            f"(alpha {alpha:.3f}), k={evidence.k}, c={c:.3f}"
        ),
        concurrency=batch,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DraftMemoryExposure:
    deployment: str
    memory: DraftMemory
    gpu_cost_micros: int
    """The deployment's GPU cost (request + idle entries) in the window."""
    evidence: SpeculationEvidence
    measurement_id: int | None = None
    metrics: Mapping[str, float | int | str | None] = field(default_factory=dict)


def draft_memory_finding(exposure: DraftMemoryExposure, *, window_seconds: float) -> Finding | None:
    """A ``draft_memory`` finding when the draft's memory would serve more as KV cache than
    speculation gains (``S < R``), or when the drafter is loaded and nothing was speculated;
    None otherwise, and for methods without a draft model (ngram, suffix, Lookahead: nothing
    is loaded to draft with)."""
    memory = exposure.memory
    if not has_draft_model(memory.method) or memory.draft_bytes <= 0:
        return None
    price = draft_memory_price(memory, exposure.gpu_cost_micros)
    ratio = memory.capacity_ratio
    metrics: dict[str, float | int | str | None] = {
        "draft_gib": round(memory.draft_bytes / GIB, 3),
        "draft_kv_gib": round(memory.draft_kv_bytes / GIB, 3),
        "out_of_budget_gib": round(memory.out_of_budget_bytes / GIB, 3),
        "memory_share": round(memory.share, 4),
        "kv_tokens_without": memory.tokens_without,
        "kv_tokens_with": memory.tokens_with,
        "capacity_ratio": round(ratio, 4),
        "draft_memory_cost": format_micros(price),
        "speculative_requests": exposure.evidence.requests,
        "method": memory.method,
        **exposure.metrics,
    }
    holds = (
        f"the drafter holds {memory.draft_bytes / GIB:.2f} GiB ({memory.share:.1%} of the "
        f"replica's memory: {memory.out_of_budget_bytes / GIB:.2f} GiB of weights and buffers, "
        f"{memory.draft_kv_bytes / GIB:.2f} GiB of its own KV cache); without it the KV cache "
        f"holds {memory.tokens_without:,} tokens instead of {memory.tokens_with:,} "
        f"(R = {ratio:.3f})"
    )
    if exposure.evidence.requests <= 0:
        return _finding(
            exposure,
            price,
            window_seconds,
            action="drop the drafter from this deployment's engine config (no request was "
            "speculated), or route speculative traffic to it",
            detail=f"{holds}; no speculative request in the window: reserved but unused",
            metrics=metrics,
        )
    estimate = speedup_estimate(memory, exposure.evidence)
    if estimate is None:
        return None
    metrics |= {
        "speedup": round(estimate.speedup, 4),
        "speedup_source": estimate.source,
        "kv_concurrency": round(estimate.concurrency, 2),
        "memory_adjusted_speedup": round(estimate.speedup / ratio, 4),
    }
    if estimate.speedup >= ratio:
        return None
    return _finding(
        exposure,
        price,
        window_seconds,
        action=(
            "serve without the drafter (its memory as KV cache holds "
            f"{ratio:.2f}x the sequences), or use a smaller or better-matched drafter "
            "(EAGLE/MTP heads share the target's embeddings), or ngram for copy-heavy traffic"
        ),
        detail=(
            f"{holds}; speculation gives {estimate.speedup:.2f}x ({estimate.source}), below "
            f"the {ratio:.2f}x the same memory gives as KV cache once the KV cache limits the "
            "batch (throughput taken as growing with the batch, as while decoding is "
            "memory-bound; compute-bound decoding gains less from the KV cache)"
        ),
        metrics=metrics,
    )


def _finding(
    exposure: DraftMemoryExposure,
    price: int,
    window_seconds: float,
    *,
    action: str,
    detail: str,
    metrics: Mapping[str, float | int | str | None],
) -> Finding:
    return Finding(
        kind=FindingKind.draft_memory,
        scope=Scope.deployment,
        key=exposure.deployment,
        window_cost_micros=price,
        monthly_cost_micros=monthly(price, window_seconds),
        action=action,
        detail=detail,
        metrics=metrics,
    )
