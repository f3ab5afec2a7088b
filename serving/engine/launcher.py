"""Start, watch and stop an inference server as a child process.

What differs per engine (argv, files it reads, health path) comes from its adapter
(:mod:`serving.engines`); vLLM's flags live in :mod:`serving.engines.vllm`. A small state
file per deployment lets ``engine status`` and ``engine stop`` find a server started by
another CLI process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import httpx

from serving.engine.config import DEFAULT_ENGINES_DIR, EngineConfig
from serving.engines import adapter_for
from serving.engines.base import EngineError, UnsupportedEngineConfig
from serving.engines.vllm import SERVER_MODULE, VLLM_CPU_VERSION

__all__ = [
    "SERVER_MODULE",
    "VLLM_CPU_VERSION",
    "EngineAlreadyRunning",
    "EngineError",
    "EngineHandle",
    "EngineStartError",
    "EngineState",
    "EngineStatus",
    "UnsupportedEngineConfig",
    "build_argv",
    "build_env",
    "check_supported",
    "speculative_config",
    "start",
    "status",
    "stop",
]

DEFAULT_START_TIMEOUT_S = 300.0
DEFAULT_STOP_GRACE_S = 20.0
_POLL_INTERVAL_S = 0.5


class EngineStartError(EngineError):
    """The server exited or did not become healthy; the message ends with the tail of its
    log."""


class EngineAlreadyRunning(EngineError):
    """A live server is already recorded for this deployment."""


@dataclass(frozen=True, slots=True)
class EngineHandle:
    """A started server, as recorded in its state file."""

    name: str
    pid: int
    """Also the process-group id: the server leads its own group."""
    base_url: str
    log_path: Path
    started_at: float
    """Unix time of the launch."""
    argv: tuple[str, ...]
    proc_start_ticks: int | None = None
    """Kernel start time of ``pid``, so a recycled pid is not mistaken for the server."""
    health_path: str = "/health"
    """The engine's health path (its adapter's)."""
    process: subprocess.Popen[bytes] | None = field(default=None, compare=False, repr=False)
    """Present only in the process that started the server."""


class EngineState(StrEnum):
    """Life-cycle state of a deployment's server."""

    stopped = "stopped"
    starting = "starting"
    """Process up, its health path not yet answering."""
    running = "running"
    dead = "dead"
    """Recorded as started, but its process is gone (crashed or killed)."""


@dataclass(frozen=True, slots=True)
class EngineStatus:
    """What ``engine status`` reports."""

    name: str
    state: EngineState
    handle: EngineHandle | None


def speculative_config(config: EngineConfig) -> dict[str, Any] | None:
    """vLLM's ``--speculative-config`` object for ``config``, or None without speculation."""
    from serving.engines.vllm import speculative_config as vllm_speculative_config

    return vllm_speculative_config(config)


def build_argv(config: EngineConfig, *, state_dir: Path = DEFAULT_ENGINES_DIR) -> list[str]:
    """The command line that starts the server described by ``config``.

    Args:
        config: The deployment to start.
        state_dir: Folder of the files the server reads (TensorRT-LLM's options file).

    Returns:
        argv for ``subprocess`` (for vLLM the first item is its venv's interpreter).
    """
    return adapter_for(config.engine).build_argv(config, config_dir=state_dir)


def check_supported(config: EngineConfig) -> None:
    """Reject settings that would start but then kill the engine at its first request.

    Raises:
        UnsupportedEngineConfig: With the reason, found by running the pinned release (or
            from the engine's documentation).
    """
    adapter_for(config.engine).check_supported(config)


def build_env(config: EngineConfig, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The server's environment: ``base`` (default: ours) plus the config's extras."""
    env = dict(os.environ if base is None else base)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(config.env)
    return env


def state_path(name: str, state_dir: Path = DEFAULT_ENGINES_DIR) -> Path:
    """Where the state file of deployment ``name`` lives."""
    return state_dir / f"{name}.state.json"


def start(
    config: EngineConfig,
    log_path: Path,
    *,
    timeout_s: float = DEFAULT_START_TIMEOUT_S,
    state_dir: Path = DEFAULT_ENGINES_DIR,
) -> EngineHandle:
    """Start the server in its own process group and wait until its health path answers 200.

    Args:
        config: The deployment to start.
        log_path: File that receives the server's stdout and stderr.
        timeout_s: How long to wait for health before giving up.
        state_dir: Folder of the state file that other processes read.

    Returns:
        A handle for ``stop`` and ``wait_healthy``.

    Raises:
        UnsupportedEngineConfig: If the config would crash the engine later.
        EngineAlreadyRunning: If this deployment's recorded server is alive.
        EngineStartError: If the server exits or stays unhealthy; it is stopped first.
    """
    check_supported(config)
    previous = load_state(config.name, state_dir)
    if previous is not None and is_alive(previous):
        raise EngineAlreadyRunning(
            f"engine {config.name!r} already runs as pid {previous.pid} at {previous.base_url}"
        )
    adapter = adapter_for(config.engine)
    missing = adapter.missing_runtime(config)
    if missing is not None:
        raise EngineStartError(missing)
    argv = adapter.build_argv(config, config_dir=state_dir)
    for path, text in adapter.launch_files(config, config_dir=state_dir).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=build_env(config),
            start_new_session=True,
        )
    handle = EngineHandle(
        name=config.name,
        pid=process.pid,
        base_url=config.base_url,
        log_path=log_path.resolve(),
        started_at=time.time(),
        argv=tuple(argv),
        proc_start_ticks=_proc_start_ticks(process.pid),
        health_path=adapter.health_path,
        process=process,
    )
    try:
        save_state(handle, state_dir)
        wait_healthy(handle, timeout_s=timeout_s)
    except BaseException:
        # Never leave an orphaned server behind, whatever interrupted the start
        # (including Ctrl-C).
        stop(handle, state_dir=state_dir)
        raise
    return handle


def wait_healthy(handle: EngineHandle, *, timeout_s: float) -> None:
    """Poll the engine's health path until it answers 200.

    Raises:
        EngineStartError: If the process exits first or ``timeout_s`` passes.
    """
    deadline = time.monotonic() + timeout_s
    with httpx.Client(timeout=2.0) as client:
        while True:
            if not is_alive(handle):
                raise EngineStartError(
                    f"the engine exited during start-up; log {handle.log_path}:\n{log_tail(handle)}"
                )
            if is_healthy(handle.base_url, client, path=handle.health_path):
                return
            if time.monotonic() > deadline:
                raise EngineStartError(
                    f"the engine is not healthy after {timeout_s:.0f} s; log {handle.log_path}:\n"
                    f"{log_tail(handle)}"
                )
            time.sleep(_POLL_INTERVAL_S)


def is_healthy(base_url: str, client: httpx.Client, *, path: str = "/health") -> bool:
    """Whether the server at ``base_url`` answers ``GET path`` with 200."""
    try:
        return client.get(f"{base_url}{path}").status_code == 200
    except httpx.TransportError:
        return False


def stop(
    handle: EngineHandle,
    *,
    grace_s: float = DEFAULT_STOP_GRACE_S,
    state_dir: Path = DEFAULT_ENGINES_DIR,
) -> bool:
    """Send SIGTERM to the server's process group, then SIGKILL after ``grace_s``.

    The whole group is signalled because engines run their cores in child processes.

    Returns:
        True if live processes were stopped, False if they had already gone.
    """
    if handle.process is not None:
        handle.process.poll()
    # Also catches engine-core children orphaned by a crashed lead process. A recycled pid
    # cannot be our group: the kernel does not hand out a pid still in use as a group id.
    running = _group_exists(handle.pid) and not _pid_recycled(handle)
    if running:
        _signal_group(handle.pid, signal.SIGTERM)
        if not _wait_gone(handle, grace_s):
            _signal_group(handle.pid, signal.SIGKILL)
            _wait_gone(handle, 5.0)
    clear_state(handle.name, state_dir)
    return running


def status(
    name: str, *, state_dir: Path = DEFAULT_ENGINES_DIR, client: httpx.Client | None = None
) -> EngineStatus:
    """Report whether deployment ``name`` is stopped, starting, running or dead."""
    handle = load_state(name, state_dir)
    if handle is None:
        return EngineStatus(name=name, state=EngineState.stopped, handle=None)
    if not is_alive(handle):
        return EngineStatus(name=name, state=EngineState.dead, handle=handle)
    if client is not None:
        healthy = is_healthy(handle.base_url, client, path=handle.health_path)
    else:
        with httpx.Client(timeout=2.0) as own_client:
            healthy = is_healthy(handle.base_url, own_client, path=handle.health_path)
    state = EngineState.running if healthy else EngineState.starting
    return EngineStatus(name=name, state=state, handle=handle)


def log_tail(handle: EngineHandle, max_lines: int = 40) -> str:
    """The last lines of the server's log, or a note when it cannot be read."""
    try:
        with handle.log_path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 64_000))
            text = log.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(log unreadable: {exc})"
    return "\n".join(text.splitlines()[-max_lines:])


def save_state(handle: EngineHandle, state_dir: Path = DEFAULT_ENGINES_DIR) -> Path:
    """Record a started server so other processes can find it."""
    record = {
        "name": handle.name,
        "pid": handle.pid,
        "base_url": handle.base_url,
        "log_path": str(handle.log_path),
        "started_at": handle.started_at,
        "argv": list(handle.argv),
        "proc_start_ticks": handle.proc_start_ticks,
        "health_path": handle.health_path,
    }
    path = state_path(handle.name, state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def load_state(name: str, state_dir: Path = DEFAULT_ENGINES_DIR) -> EngineHandle | None:
    """The recorded server of deployment ``name``, or None if none is recorded."""
    path = state_path(name, state_dir)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    return EngineHandle(
        name=record["name"],
        pid=int(record["pid"]),
        base_url=record["base_url"],
        log_path=Path(record["log_path"]),
        started_at=float(record["started_at"]),
        argv=tuple(record["argv"]),
        proc_start_ticks=record.get("proc_start_ticks"),
        health_path=record.get("health_path", "/health"),
    )


def clear_state(name: str, state_dir: Path = DEFAULT_ENGINES_DIR) -> None:
    """Forget the recorded server of deployment ``name``."""
    state_path(name, state_dir).unlink(missing_ok=True)


def is_alive(handle: EngineHandle) -> bool:
    """Whether the server's lead process still runs (and is the one we started)."""
    if handle.process is not None:
        return handle.process.poll() is None
    try:
        os.kill(handle.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process: maybe a recycled pid, which the start time tells
    stat = _proc_stat(handle.pid)
    if stat is None:
        return True
    return stat[0] != "Z" and not _pid_recycled(handle)


def _pid_recycled(handle: EngineHandle) -> bool:
    stat = _proc_stat(handle.pid)
    return (
        stat is not None
        and stat[0] != "Z"
        and handle.proc_start_ticks is not None
        and stat[1] != handle.proc_start_ticks
    )


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _group_exists(pgid: int) -> bool:
    """Whether any process of the group still runs; zombies awaiting a reaper do not count."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for stat_file in proc.glob("[0-9]*/stat"):
        fields = _stat_fields(stat_file)
        if fields is not None and int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _wait_gone(handle: EngineHandle, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while True:
        if handle.process is not None:
            handle.process.poll()  # reap, or the zombie keeps the group alive
        if not _group_exists(handle.pid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def _proc_start_ticks(pid: int) -> int | None:
    stat = _proc_stat(pid)
    return None if stat is None else stat[1]


def _proc_stat(pid: int) -> tuple[str, int] | None:
    """State letter and start time of ``pid`` from Linux's /proc; None elsewhere."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return None if fields is None else (fields[0], int(fields[19]))


def _stat_fields(stat_file: Path) -> list[str] | None:
    """Fields 3 onwards of a /proc/<pid>/stat file (proc(5)): state, ppid, pgrp, ...

    They are split after the ")" that closes the command name, which may hold spaces.
    """
    try:
        return stat_file.read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
