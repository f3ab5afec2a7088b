"""Load sweeps: for each speculation config, an engine and the metering proxy, then the levels.

Configs run one at a time: each gets its own vLLM engine (``serving.launcher``) with the proxy
in front (a ``specledger proxy`` child process writing usage to a JSONL file), is driven by
:mod:`serving.loadgen` at every concurrency level, and is stopped before the next starts, so
two engines never share the machine. A config may instead point at a running server or proxy.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from app.domain.errors import SpecLedgerError
from serving.engine import launcher
from serving.engine.config import (
    DraftModelSpeculation,
    EngineConfig,
    NgramSpeculation,
    NoSpeculation,
    OtherSpeculation,
)
from serving.load.loadgen import LevelStats, Prompt, run_level, summarize_level
from serving.proxy.config import ReplicaSpec

Progress = Callable[[str, int, int], None]

_PROXY_BOOT = "import typer\nfrom app.cli.proxy import proxy\ntyper.run(proxy)\n"
_SERVER_MODULE_MARK = b"vllm.entrypoints.openai.api_server"


class SweepError(SpecLedgerError):
    """A sweep that cannot run or went wrong; the message says what to do."""

    code = "sweep_failed"


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepTarget:
    """One speculation config to sweep: an engine to start, or a URL to drive."""

    name: str
    """Config name in the sweep CSV."""
    method: str
    """``none``, ``ngram``, ``draft_model`` or another vLLM method."""
    k: int
    schedule: str | None = None
    """``num_speculative_tokens_per_batch_size`` JSON when the engine speculates dynamically."""
    engine: EngineConfig | None = None
    url: str | None = None
    """A running proxy or vLLM server (then nothing is started)."""
    api_key: str | None = None
    """The key the running proxy (or server) at ``url`` expects, sent as a bearer token;
    a sweep's own proxy serves its load-test traffic without one."""
    plain_engine: EngineConfig | None = None
    speculate_up_to: int | None = None
    """Routing by load: ``engine`` speculates, ``plain_engine`` does not, and the proxy sends
    new requests to the first while at most this many are in flight, else to the second."""


def target_for_engine(config: EngineConfig, name: str | None = None) -> SweepTarget:
    """The sweep target of an engine config (method, k and schedule read from it)."""
    spec = config.speculation
    method = spec.vllm_method if isinstance(spec, OtherSpeculation) else spec.method
    k = 0 if isinstance(spec, NoSpeculation) else int(getattr(spec, "k", 0) or 0)
    if isinstance(spec, OtherSpeculation):
        k = int(spec.options.get("num_speculative_tokens", 0) or 0)  # type: ignore[arg-type]
    schedule = None
    if config.batch_size_schedule is not None:
        schedule = json.dumps([[b.start, b.end, b.k] for b in config.batch_size_schedule])
    if name is None:
        name = "none" if method == "none" else f"{method}-k{k}" + ("-dynamic" if schedule else "")
    return SweepTarget(name=name, method=method, k=k, schedule=schedule, engine=config)


def engine_for_method(
    method: str, *, base: EngineConfig, k: int, draft_model: Path | None
) -> EngineConfig:
    """``base`` with the speculation of ``none``, ``ngram`` or ``draft``.

    Raises:
        SweepError: On an unknown method or a missing draft model.
    """
    if method == "none":
        speculation: NoSpeculation | NgramSpeculation | DraftModelSpeculation = NoSpeculation()
    elif method == "ngram":
        speculation = NgramSpeculation(k=k)
    elif method in ("draft", "draft_model"):
        if draft_model is None or not draft_model.exists():
            raise SweepError(
                f"draft model {draft_model} not found; run "
                "`specledger models prepare --draft-layers 6` or pass --draft-model"
            )
        speculation = DraftModelSpeculation(draft_model=str(draft_model.resolve()), k=k)
    else:
        raise SweepError(
            f"unknown --spec {method!r}; use none, ngram or draft (or "
            "--engine-config for other methods)"
        )
    return EngineConfig.model_validate(
        {**base.model_dump(), "speculation": speculation.model_dump(), "batch_size_schedule": None}
    )


def free_port() -> int:
    """A TCP port free on localhost right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def running_vllm_servers() -> list[int]:
    """Pids of vLLM OpenAI servers running on this machine (Linux /proc; empty elsewhere)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if _SERVER_MODULE_MARK in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except (OSError, ValueError):
            continue
    return sorted(pids)


def _wait_http(
    url: str, *, timeout_s: float, process: subprocess.Popen[bytes], what: str, log: Path
) -> None:
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            if process.poll() is not None:
                raise SweepError(f"{what} exited with status {process.returncode}; see {log}")
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SweepError(f"{what} not healthy after {timeout_s:.0f} s; see {log}")
            time.sleep(0.25)


def routed_target(
    speculating: EngineConfig, plain: EngineConfig, *, speculate_up_to: int
) -> SweepTarget:
    """A config that routes by load between a speculating and a plain engine."""
    base = target_for_engine(speculating)
    return SweepTarget(
        name=f"routed-{base.name}-up-to-{speculate_up_to}",
        method=base.method,
        k=base.k,
        engine=speculating,
        plain_engine=plain,
        speculate_up_to=speculate_up_to,
        schedule=json.dumps({"speculate_up_to": speculate_up_to}),
    )


def _replica_option(engine: EngineConfig, *, deployment: str, gpus: int) -> str:
    """The engine as a ``specledger proxy --replica`` value."""
    spec = ReplicaSpec.from_engine(engine, gpus=gpus, deployment=deployment)
    return (
        f"{spec.base_url},gpus={spec.gpus},deployment={spec.deployment},"
        f"spec={spec.spec_method},model={spec.model}" + (f",k={spec.spec_k}" if spec.spec_k else "")
    )


@contextmanager
def metering_proxy(
    engine: EngineConfig,
    *,
    work_dir: Path,
    gpus: int,
    plain: EngineConfig | None = None,
    speculate_up_to: int | None = None,
) -> Iterator[str]:
    """Run ``specledger proxy`` in front of ``engine`` (and ``plain``, routed by load) until
    the block ends; yields its URL.

    Usage records go to ``<work_dir>/<engine name>.usage.jsonl``, not to the database: they are
    load-test traffic, not chargeable usage.
    """
    port = free_port()
    replicas = [engine] if plain is None else [engine, plain]
    log_path = work_dir / f"{engine.name}.proxy.log"
    argv = [
        sys.executable,
        "-c",
        _PROXY_BOOT,
        "--port",
        str(port),
        "--no-db",
        "--allow-anonymous",  # load-test traffic: metered to a file, billed to no team
        "--jsonl",
        str(work_dir / f"{engine.name}.usage.jsonl"),
        "--log-level",
        "warning",
    ]
    for replica in replicas:
        argv += ["--replica", _replica_option(replica, deployment=engine.name, gpus=gpus)]
    if speculate_up_to is not None:
        argv += ["--speculate-up-to", str(speculate_up_to)]
    work_dir.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
        )
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/healthz", timeout_s=60, process=process, what="the proxy", log=log_path)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def _served_model(client: httpx.AsyncClient, base_url: str) -> str:
    response = await client.get(base_url.rstrip("/").removesuffix("/v1") + "/v1/models")
    response.raise_for_status()
    data = response.json().get("data") or []
    if not data:
        raise SweepError(f"{base_url} serves no model")
    return str(data[0]["id"])


async def _run_levels(
    base_url: str,
    *,
    target: SweepTarget,
    levels: Sequence[int],
    requests_per_level: int,
    warmup: int | None,
    prompts: Sequence[Prompt],
    gpus: int,
    progress: Progress | None,
    own_pids: frozenset[int] | set[int] = frozenset(),
) -> list[LevelStats]:
    stats = []
    for level in levels:
        limits = httpx.Limits(max_connections=level + 4, max_keepalive_connections=level + 4)
        timeout = httpx.Timeout(600.0, connect=10.0)
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        async with httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers) as client:
            model = await _served_model(client, base_url)

            def report(done: int, level: int = level) -> None:
                if progress is not None:
                    progress(f"{target.name} @ {level}", done, requests_per_level)

            report(0)
            run = await run_level(
                client,
                base_url=base_url,
                model=model,
                prompts=prompts,
                concurrency=level,
                measured=requests_per_level,
                warmup=level if warmup is None else warmup,
                label=target.name,
                on_measured=report,
            )
        others = [pid for pid in running_vllm_servers() if pid not in own_pids]
        stats.append(replace(summarize_level(run, gpus=gpus), other_servers=len(others)))
    return stats


def _wait_for_other_servers(wait_s: float, progress: Progress | None) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        others = running_vllm_servers()
        if not others:
            return
        if time.monotonic() >= deadline:
            raise SweepError(
                f"another vLLM server is running (pid {', '.join(map(str, others))}); two "
                "engines on one machine distort the measurement: stop it first, wait for it "
                "(--wait-for-other-engines SECONDS), or pass --proxy URL to drive it"
            )
        if progress is not None:
            progress(f"waiting for vLLM pid {others[0]}", 0, 1)
        time.sleep(min(10.0, max(0.0, deadline - time.monotonic())))


def sweep_target(
    target: SweepTarget,
    *,
    levels: Sequence[int],
    requests_per_level: int,
    prompts: Sequence[Prompt],
    work_dir: Path,
    engines_dir: Path,
    warmup: int | None = None,
    repeats: int = 1,
    gpus: int = 1,
    start_timeout_s: float = 600.0,
    wait_s: float = 0.0,
    progress: Progress | None = None,
) -> list[LevelStats]:
    """Measure one config at every level; start (and stop) its engine and proxy if needed.

    Args:
        target: The config.
        levels: Concurrency levels, in the order to run them.
        repeats: Run the whole list of levels this many times on the same engine (repeat-major
            order, so slow drift spreads over every level).
        requests_per_level: Measured requests per level.
        prompts: The prompt set.
        work_dir: Where engine and proxy logs and the usage JSONL go.
        engines_dir: Folder of engine state files.
        warmup: Warm-up requests per level; default one per session.
        gpus: Accelerators of the replica (a CPU replica counts as 1).
        start_timeout_s: How long the engine may take to become healthy.
        wait_s: How long to wait for other vLLM servers on the machine to stop before
            starting this config's engine (0: refuse at once).
        progress: ``(description, done, total)`` callback.

    Returns:
        One result per level.

    Raises:
        SweepError: If another vLLM server still runs after ``wait_s``, or the engine or proxy
            fail to start.
        launcher.EngineError: From the launcher, with the tail of vLLM's log.
    """
    levels = [level for _ in range(repeats) for level in levels]
    if target.url is not None:
        return asyncio.run(
            _run_levels(
                target.url,
                target=target,
                levels=levels,
                requests_per_level=requests_per_level,
                warmup=warmup,
                prompts=prompts,
                gpus=gpus,
                progress=progress,
            )
        )
    if target.engine is None:
        raise SweepError(f"config {target.name!r} has neither an engine nor a URL")
    _wait_for_other_servers(wait_s, progress)
    engines = [
        EngineConfig.model_validate(
            {**config.model_dump(), "port": free_port(), "name": f"sweep-{target.name}{suffix}"}
        )
        for config, suffix in ((target.engine, ""), (target.plain_engine, "-plain"))
        if config is not None
    ]
    handles: list[launcher.EngineHandle] = []
    try:
        for engine in engines:
            if progress is not None:
                progress(f"{target.name}: starting vLLM", 0, 1)
            handles.append(
                launcher.start(
                    engine,
                    work_dir / f"{engine.name}.engine.log",
                    timeout_s=start_timeout_s,
                    state_dir=engines_dir,
                )
            )
        with metering_proxy(
            engines[0],
            work_dir=work_dir,
            gpus=gpus,
            plain=engines[1] if len(engines) > 1 else None,
            speculate_up_to=target.speculate_up_to,
        ) as url:
            return asyncio.run(
                _run_levels(
                    url,
                    target=target,
                    levels=levels,
                    requests_per_level=requests_per_level,
                    warmup=warmup,
                    prompts=prompts,
                    gpus=gpus,
                    progress=progress,
                    own_pids={handle.pid for handle in handles},
                )
            )
    finally:
        for handle in handles:
            launcher.stop(handle, state_dir=engines_dir)
