"""Several proxy processes on one port and one meter service for all of them
(``specledger proxy --workers N``), and the entry point of each worker.

The parent process runs the meter service (:mod:`serving.proxy.meter_service`): the
replicas' meters, the usage sink and its spool, the engines' counter checks. Each worker
is a uvicorn process on its own ``SO_REUSEPORT`` socket bound to the same port (the kernel
spreads connections over them), relaying requests and sending the service their events
over a Unix socket. Proxies on other hosts join with ``--meter-url tcp://...`` when the
service also listens on TCP (``--meter-listen``).

Shutdown: the workers stop first (each finishes its streams and sends its last events),
then the service meters what it holds and closes every replica's window.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

__all__ = [
    "event_loop",
    "reuseport_socket",
    "run_fleet",
    "run_worker",
    "run_workers",
    "spawn_workers",
    "stop_workers",
]

log = logging.getLogger(__name__)


def reuseport_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` that other processes may also bind."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def run_worker(config_json: str, host: str, port: int, log_level: str) -> None:
    """One worker: the proxy app on a ``SO_REUSEPORT`` socket, metering through the meter
    service its config names."""
    import uvicorn

    from serving.proxy.app import create_proxy_app
    from serving.proxy.config import ProxyConfig

    config = ProxyConfig.model_validate_json(config_json)
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    server = uvicorn.Server(
        uvicorn.Config(
            create_proxy_app(config),
            log_level=log_level,
            timeout_graceful_shutdown=30,
            loop=event_loop(),
            http="httptools",
        )
    )
    server.run(sockets=[reuseport_socket(host, port)])


def event_loop() -> Literal["uvloop", "asyncio"]:
    """uvloop where installed (a dependency; a platform without it runs asyncio's loop)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:  # pragma: no cover - Windows
        return "asyncio"
    return "uvloop"


def spawn_workers(
    config_json: str, *, workers: int, host: str, port: int, log_level: str
) -> list[subprocess.Popen[bytes]]:
    """Start ``workers`` worker processes."""
    root = Path(__file__).resolve().parents[2]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
    }
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "serving.proxy.workers",
                config_json,
                host,
                str(port),
                log_level,
            ],
            env=env,
        )
        for _ in range(workers)
    ]


def run_workers(config_json: str, *, workers: int, host: str, port: int, log_level: str) -> None:
    """Workers metered by another process's meter service (their config's ``meter_url``),
    until SIGTERM or SIGINT, which they get passed on to stop gracefully."""
    processes = spawn_workers(config_json, workers=workers, host=host, port=port,
                              log_level=log_level)  # fmt: skip

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        for process in processes:
            process.wait()
    except KeyboardInterrupt:
        stop_workers(processes)
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_workers(processes: Sequence[subprocess.Popen[bytes]], *, timeout_s: float = 45.0) -> None:
    """SIGTERM each worker (uvicorn finishes its requests) and wait; kill what lingers."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            log.error("worker %d did not stop; killing it", process.pid)
            process.kill()
            process.wait()


def run_fleet(
    config_json: str,
    *,
    workers: int,
    host: str,
    port: int,
    listen: Sequence[str] = (),
    metrics_port: int | None = None,
    log_level: str = "info",
) -> None:
    """The meter service in this process and ``workers`` workers in front of it, until
    SIGTERM or SIGINT. With ``metrics_port``, the meter process's Prometheus metrics (GPU
    seconds of requests and idle, the engines' counter checks, the usage sink) are served
    there; the workers' ``/metrics`` has what each relayed."""
    asyncio.run(_fleet(config_json, workers=workers, host=host, port=port, listen=listen,
                       metrics_port=metrics_port, log_level=log_level))  # fmt: skip


async def _fleet(
    config_json: str,
    *,
    workers: int,
    host: str,
    port: int,
    listen: Sequence[str],
    metrics_port: int | None,
    log_level: str,
) -> None:
    import anyio
    import httpx

    from app.db import make_engine
    from serving.proxy.app import check_engine_counters, open_sink, replica_states
    from serving.proxy.config import ProxyConfig
    from serving.proxy.meter_service import MeterService, meter_token, serve_meters
    from serving.proxy.metrics import ProxyMetrics
    from serving.proxy.state import Clock, ProxyState

    config = ProxyConfig.model_validate_json(config_json)
    folder = tempfile.mkdtemp(prefix="specledger-meter-")
    own = f"unix:{folder}/meter.sock"
    worker_config = config.model_copy(update={"meter_url": own}).model_dump_json()
    engine = make_engine(config.database_url) if config.database_url else None
    sink = open_sink(config, engine)
    metrics = ProxyMetrics()
    metrics.watch_sink(sink)
    sink.start()
    if metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(metrics_port, addr=host, registry=metrics.registry)
    clock = Clock()
    loop = asyncio.get_running_loop()
    shutdown = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, shutdown.set)
    async with httpx.AsyncClient(timeout=10.0) as client:
        state = ProxyState(config=config, client=client, metrics=metrics, sink=sink,
                           clock=clock, replicas=replica_states(config, clock))  # fmt: skip
        service = MeterService(state, lateness_s=config.meter_lateness_s, token=meter_token())
        stop = asyncio.Event()
        last_check = time.monotonic()

        async def on_tick() -> None:
            nonlocal last_check
            if time.monotonic() - last_check < config.counter_check_s:
                return
            last_check = time.monotonic()
            for replica in state.replicas:
                try:
                    await check_engine_counters(state, replica)
                except Exception:
                    log.exception("checking %s's counters failed", replica.spec.replica_name)

        metering = asyncio.create_task(serve_meters(service, [own, *listen], stop=stop,
                                                    on_tick=on_tick))  # fmt: skip
        while not Path(folder, "meter.sock").exists():
            if metering.done():
                await metering  # raises what stopped it
            await asyncio.sleep(0.01)
        processes = spawn_workers(worker_config, workers=workers, host=host, port=port,
                                  log_level=log_level)  # fmt: skip
        log.info("proxy: %d workers on %s:%d, meters in process %d", workers, host, port,
                 os.getpid())  # fmt: skip
        try:
            while not shutdown.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(shutdown.wait(), 1.0)
                if any(process.poll() is not None for process in processes):
                    log.error("a proxy worker exited; stopping the proxy")
                    break
        finally:
            await anyio.to_thread.run_sync(stop_workers, processes)
            stop.set()
            await metering
    await anyio.to_thread.run_sync(sink.close)
    if engine is not None:
        engine.dispose()
    with contextlib.suppress(OSError):
        os.unlink(Path(folder, "meter.sock"))
        os.rmdir(folder)


if __name__ == "__main__":
    run_worker(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
